import { Counter, Gauge, type Registry } from 'prom-client';
import type { Fleet } from '@spillway/fleet';
import { mirrorCounter } from './counter-mirror.js';

/**
 * The requests charged to endpoints (docs/picking.md, "A request's charge"), read from the fleet
 * when scraped: how many are held, started or not, what they hold, and how the charges the fleet
 * settled itself ended (docs/metrics.md).
 */
export function registerChargeMetrics(registry: Registry, fleet: Fleet): void {
  const registers = [registry];
  new Gauge({
    name: 'spillway_charges',
    help: "Requests charged to endpoints (this EPP's and its peers'), by state: picked (no response yet) or started (response begun).",
    labelNames: ['state'] as const,
    registers,
    collect() {
      const charges = fleet.charges;
      this.set({ state: 'picked' }, charges.count - charges.started);
      this.set({ state: 'started' }, charges.started);
    },
  });
  new Gauge({
    name: 'spillway_charge_bytes',
    help: 'Estimated bytes the charges hold (bounded by charges.maxBytes).',
    registers,
    collect() {
      this.set(fleet.charges.bytes);
    },
  });
  const counters = fleet.chargeCounters;
  const ended: Counter<'reason'> = new Counter({
    name: 'spillway_charges_ended_total',
    help: 'Started charges ended without a completion signal: by the endpoint samples (samples), at their bound (bound), to make room at a cap (cap).',
    labelNames: ['reason'] as const,
    registers,
    collect: () => collectEnded(),
  });
  const collectEnded = mirrorCounter(ended, [
    [{ reason: 'samples' }, () => counters.endedBySamples],
    [{ reason: 'bound' }, () => counters.endedByBound],
    [{ reason: 'cap' }, () => counters.evicted],
  ]);
  const refused: Counter = new Counter({
    name: 'spillway_charges_refused_total',
    help: 'Picks not charged at a cap with no started charge to end for room (they do not load their endpoint).',
    registers,
    collect: () => collectRefused(),
  });
  const collectRefused = mirrorCounter(refused, [[{}, () => counters.refused]]);
}
