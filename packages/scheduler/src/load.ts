import type { Endpoint, PoolView } from '@spillway/fleet';

/**
 * An endpoint's load now, estimated from its latest sample and this EPP's own accounting since
 * (picks the sample cannot have seen, completions of requests it did see). With a fresh sample the
 * correction is small; with a stale one it is what keeps a zone whose events stopped routable
 * (picking v2, "event gaps are not overload").
 */
export interface LoadEstimate {
  /** Requests waiting for a batch slot now. */
  waiting: number;
  /** Picks since the sample that the endpoint has admitted: their prefills run before a new request's. */
  admittedPicks: number;
  /** The sample showed a queue: the endpoint was at capacity, so its measured completion rate is its service rate. */
  queued: boolean;
  kvCacheUsage: number;
  /** Milliseconds since the sample was received; Infinity without one. */
  ageMs: number;
}

export function estimateLoad(endpoint: Endpoint, now: number, out: LoadEstimate): LoadEstimate {
  const metrics = endpoint.metrics;
  const picks = endpoint.unsampledPicks;
  if (metrics === undefined) {
    out.waiting = 0;
    out.admittedPicks = picks;
    out.queued = false;
    out.kvCacheUsage = 0;
    out.ageMs = Number.POSITIVE_INFINITY;
    return out;
  }
  const waiting = metrics.waitingRequests;
  out.queued = waiting > 0;
  if (waiting > 0) {
    // At capacity: new picks queue behind the waiting ones, and each completion admits one of them.
    out.waiting = Math.max(0, waiting + picks - endpoint.releasedSinceSample);
    out.admittedPicks = 0;
  } else {
    out.waiting = 0;
    out.admittedPicks = picks;
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
