import type { Fleet } from '@spillway/fleet';
import type { Scheduler } from '@spillway/scheduler';
import type { EppMetrics } from './metrics.js';

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
      metrics.zoneReadyPods.set({ zone }, pods.size);
      metrics.zoneSaturatedPods.set({ zone }, saturated);
      metrics.zoneStalePods.set({ zone }, stale);
    }
  }
  metrics.poolReadyPods.set({ name: pool }, ready);
  metrics.poolAverageKv.set({ name: pool }, withMetrics ? kv / withMetrics : 0);
  metrics.poolAverageQueue.set({ name: pool }, withMetrics ? queue / withMetrics : 0);
  metrics.poolAverageRunning.set({ name: pool }, withMetrics ? running / withMetrics : 0);
  syncEventCounters(metrics, fleet);
}

const reported = new WeakMap<EppMetrics, { applied: number; ignored: number; rejected: number }>();

/** The fleet counts events itself; the Prometheus counters catch up by the difference. */
function syncEventCounters(metrics: EppMetrics, fleet: Fleet): void {
  const last = reported.get(metrics) ?? { applied: 0, ignored: 0, rejected: 0 };
  const now = fleet.counters;
  for (const result of ['applied', 'ignored', 'rejected'] as const) {
    if (now[result] > last[result]) metrics.events.inc({ result }, now[result] - last[result]);
  }
  reported.set(metrics, { ...now });
}
