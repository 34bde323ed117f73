import type { Fleet, FleetCounters } from '@spillway/fleet';
import type { Scheduler } from '@spillway/scheduler';
import type { EppMetrics } from './metrics.js';
import { capLabel } from './model-labels.js';

/**
 * Refreshes the per-zone and pool gauges from the view. Runs on each Prometheus scrape rather than
 * on the request path: O(pool), off the hot path.
 */
export function refreshViewGauges(metrics: EppMetrics, fleet: Fleet, scheduler: Scheduler, pool: string, now: number): void {
  metrics.zoneReadyPods.reset();
  metrics.zoneSaturatedPods.reset();
  metrics.zoneStalePods.reset();
  const view = fleet.pool(pool);
  let ready = 0;
  let withMetrics = 0;
  let kv = 0;
  let queue = 0;
  let running = 0;
  if (view) {
    for (const zone of view.readyZones()) {
      let saturated = 0;
      let stale = 0;
      const pods = view.readyInZone(zone);
      for (const pod of pods) {
        if (!fleet.isFresh(pod, now)) stale++;
        if (scheduler.isFull(pod, now)) saturated++;
        if (pod.metrics) {
          withMetrics++;
          kv += pod.metrics.kvCacheUsage;
          queue += pod.metrics.waitingRequests;
          running += pod.metrics.runningRequests;
        }
      }
      ready += pods.size;
      // Zone names come from event subjects, which per-zone NATS permissions bound; capped in length all the same.
      const label = { zone: capLabel(zone) };
      metrics.zoneReadyPods.set(label, pods.size);
      metrics.zoneSaturatedPods.set(label, saturated);
      metrics.zoneStalePods.set(label, stale);
    }
  }
  metrics.poolReadyPods.set({ name: pool }, ready);
  metrics.poolAverageKv.set({ name: pool }, withMetrics ? kv / withMetrics : 0);
  metrics.poolAverageQueue.set({ name: pool }, withMetrics ? queue / withMetrics : 0);
  metrics.poolAverageRunning.set({ name: pool }, withMetrics ? running / withMetrics : 0);
  syncEventCounters(metrics, fleet);
}

const reported = new WeakMap<EppMetrics, FleetCounters>();

/** The `result` label of spillway_events_total for each fleet counter. */
const RESULTS = {
  applied: 'applied',
  ignored: 'ignored',
  rejected: 'rejected',
  future: 'future',
  overCapacity: 'over-capacity',
  tooManyZones: 'too-many-zones',
  addressConflict: 'address-conflict',
} as const satisfies Record<keyof FleetCounters, string>;

/** The fleet counts events itself; the Prometheus counters catch up by the difference. */
function syncEventCounters(metrics: EppMetrics, fleet: Fleet): void {
  const last = reported.get(metrics) ?? {
    applied: 0,
    ignored: 0,
    rejected: 0,
    future: 0,
    overCapacity: 0,
    tooManyZones: 0,
    addressConflict: 0,
  };
  const now = fleet.counters;
  for (const key of Object.keys(RESULTS) as (keyof FleetCounters)[]) {
    if (now[key] > last[key]) metrics.events.inc({ result: RESULTS[key] }, now[key] - last[key]);
  }
  reported.set(metrics, { ...now });
}
