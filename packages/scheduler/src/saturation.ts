import type { Endpoint } from '@spillway/fleet';

export interface SaturationLimits {
  readonly queueThreshold: number;
  readonly kvThreshold: number;
  readonly staleAfterMs: number;
}

/**
 * The queue the endpoint really has: the sample's waiting requests plus the picks this EPP made
 * that the sample cannot have seen. Counting those picks as waiting is pessimistic (some will have
 * started running) and that is the point: a burst between two samples spreads over endpoints
 * instead of piling onto the one that looked best at the last sample.
 */
export function effectiveQueue(endpoint: Endpoint): number {
  const metrics = endpoint.metrics;
  return (metrics ? metrics.waitingRequests : 0) + endpoint.unsampledPicks;
}

/**
 * DESIGN §5 *saturated*: stale (or no) metrics, queue at the threshold, or KV cache at the threshold.
 * KV use is not projected from unsampled picks: the EPP does not know their prompt lengths or how
 * many blocks the server will reuse, and the queue term already stops a burst within
 * `queueThreshold` picks per endpoint.
 */
export function isSaturated(endpoint: Endpoint, now: number, limits: SaturationLimits): boolean {
  const metrics = endpoint.metrics;
  if (metrics === undefined || now - metrics.receivedAt > limits.staleAfterMs) return true;
  if (metrics.waitingRequests + endpoint.unsampledPicks >= limits.queueThreshold) return true;
  return metrics.kvCacheUsage >= limits.kvThreshold;
}
