import type { Endpoint } from '@spillway/fleet';
import type { EndpointExplanation } from '@spillway/scheduler';
import type { UiPod, UiPodSortKey } from './state-types.js';

/** One pod as the view shows it, and the orders pods can be listed in. */
export function podView(endpoint: Endpoint, explained: EndpointExplanation | undefined, now: number): UiPod {
  const metrics = endpoint.metrics;
  const routable = endpoint.ready && endpoint.address !== undefined;
  const cost = explained?.cost;
  return {
    pod: endpoint.pod,
    zone: endpoint.zone,
    region: endpoint.region ?? null,
    address: endpoint.address ?? null,
    ready: routable,
    waiting: metrics?.waitingRequests ?? null,
    running: metrics?.runningRequests ?? null,
    kvCacheUsage: metrics?.kvCacheUsage ?? null,
    metricsAgeMs: metrics === undefined ? null : Math.max(0, now - metrics.receivedAt),
    inFlight: endpoint.inFlight,
    started: endpoint.startedInFlight,
    batchSize: endpoint.batchCapacity ?? null,
    penaltyLeftMs: explained?.penaltyLeftMs ?? 0,
    silent: explained?.silent ?? false,
    stale: cost?.stale ?? metrics === undefined,
    suspect: cost?.suspect ?? false,
    full: cost?.full ?? false,
    expectedWaitMs: routable && cost ? cost.waitMs : null,
    costMs: routable && cost ? cost.totalMs : null,
  };
}

/** How much attention a pod needs, for `?sort=state`: not ready, excluded, suspect, full, stale, fine. */
function severity(pod: UiPod): number {
  if (!pod.ready) return 5;
  if (pod.penaltyLeftMs > 0 || pod.silent) return 4;
  if (pod.suspect) return 3;
  if (pod.full) return 2;
  return pod.stale ? 1 : 0;
}

type Key = string | number | null;

function sortValue(pod: UiPod, key: UiPodSortKey): Key {
  if (key === 'state') return severity(pod);
  const value = pod[key];
  return typeof value === 'boolean' ? Number(value) : value;
}

function compareNames(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0;
}

/** The order of `sort`; empty values (null) last either way, then zone and pod name ascending. */
export function podOrder(key: UiPodSortKey, order: 'asc' | 'desc'): (a: UiPod, b: UiPod) => number {
  const sign = order === 'asc' ? 1 : -1;
  return (a, b) => {
    const x = sortValue(a, key);
    const y = sortValue(b, key);
    if (x !== y) {
      if (x === null) return 1;
      if (y === null) return -1;
      return (typeof x === 'number' && typeof y === 'number' ? x - y : compareNames(String(x), String(y))) * sign;
    }
    return compareNames(a.zone, b.zone) || compareNames(a.pod, b.pod);
  };
}
