import type { Endpoint, PoolView } from '@spillway/fleet';

/**
 * An endpoint's load now, estimated from its latest sample and this EPP's own accounting since
 * (picks the sample cannot have seen, completions of requests it did see). With a fresh sample the
 * correction is small; with a stale one it is what keeps a zone whose events stopped routable
 * (picking v2, "event gaps are not overload").
 */
export interface LoadEstimate {
  /** Requests a new one would wait behind (completions it needs before it is admitted). */
  waiting: number;
  /**
   * Backlogged: its queue has persisted over two samples or more, so waiting requests wait
   * for others to finish (at its completion rate) rather than for the next step to admit them.
   */
  backlogged: boolean;
  kvCacheUsage: number;
  /** Milliseconds since the sample was received; Infinity without one. */
  ageMs: number;
}

/**
 * The requests waiting at the endpoint now. Once the endpoint's batch size is known (learnt while
 * it was backlogged), everything present beyond it — the sample's waiting and running requests,
 * plus this EPP's picks the sample cannot have seen, minus its requests that finished since —
 * waits. Before that, only a queue in the sample (plus picks, minus completions) counts.
 */
export function estimateLoad(endpoint: Endpoint, now: number, out: LoadEstimate): LoadEstimate {
  const metrics = endpoint.metrics;
  if (metrics === undefined) {
    out.waiting = 0;
    out.backlogged = false;
    out.kvCacheUsage = 0;
    out.ageMs = Number.POSITIVE_INFINITY;
    return out;
  }
  const sampled = metrics.waitingRequests;
  const capacity = endpoint.batchCapacity;
  if (capacity !== undefined && capacity > 0) {
    // Its batch size is known: a new request waits for as many completions as the endpoint holds
    // requests at or beyond it.
    const present = sampled + metrics.runningRequests + endpoint.unsampledPicks - endpoint.releasedSinceSample;
    out.waiting = Math.max(0, present + 1 - capacity);
    out.backlogged = out.waiting > 0;
  } else {
    out.waiting = sampled > 0 ? Math.max(0, sampled + endpoint.unsampledPicks - endpoint.releasedSinceSample) : 0;
    out.backlogged = sampled > 0 && endpoint.queuedSamples >= 2;
  }
  out.kvCacheUsage = metrics.kvCacheUsage;
  out.ageMs = now - metrics.receivedAt;
  return out;
}

/**
 * Stale: no sample within the fleet's staleness limit. Suspect: stale while other pods of its zone
 * still get fresh samples, so it is this pod, not the zone's collector or NATS, that went quiet.
 */
export function isSuspect(endpoint: Endpoint, pool: PoolView, now: number, staleAfterMs: number, ageMs: number): boolean {
  return ageMs > staleAfterMs && now - pool.zoneLastSampleAt(endpoint.zone ?? '') <= staleAfterMs;
}

/**
 * A pod whose readiness has not been re-published for `silenceMs` while its zone-mates' has: its
 * collector lost it without a tombstone. A silence of the whole zone (or of NATS) drops nobody.
 */
export function isSilent(endpoint: Endpoint, pool: PoolView, now: number, silenceMs: number): boolean {
  return now - endpoint.readinessReceivedAt > silenceMs && now - pool.zoneLastReadinessAt(endpoint.zone ?? '') <= silenceMs;
}
