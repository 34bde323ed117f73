import { rateAt } from './load.js';
import type { ResolvedFault } from './resolve.js';
import type { ZoneSpec } from './topology.js';
import type { RateSchedule } from './workload.js';

/**
 * What the offered load asks of routing across zones, from the rates and capacities alone (so the
 * same for every strategy), over the measured window. At each instant, with zone z offered λz
 * against its live capacity cz (live replicas × calibrated capacity per replica):
 * - overflow: Σ max(0, λz − cz) — what exceeds its own zone;
 * - required spill: min(Σ overflow, Σ max(0, cz − λz)) — what must cross zones for no zone to be
 *   over capacity, and can: overflow with nowhere to go is not spill;
 * - equal-utilisation spill: Σ max(0, λz − u·cz) with u = Σλ / Σc — what crosses when every zone
 *   runs at the same utilisation (a zone-unaware balancer's ideal, well above what is required).
 * Each is reported as a share of all arrivals. The offered load itself, Σλ / Σc, is reported as
 * its time-weighted mean and its peak.
 */
export interface SpillFigures {
  readonly overflowShare: number;
  readonly requiredShare: number;
  readonly equalUtilisationShare: number;
  readonly meanLoad: number;
  readonly peakLoad: number;
}

export function spillOf(o: {
  readonly rates: readonly RateSchedule[];
  readonly faults: readonly ResolvedFault[];
  readonly zones: readonly ZoneSpec[];
  readonly perReplica: readonly number[];
  readonly fromMs: number;
  readonly toMs: number;
}): SpillFigures {
  const { rates, faults, zones, perReplica, fromMs, toMs } = o;
  const cuts = new Set<number>([fromMs, toMs]);
  for (const r of rates) for (const s of r.startsMs) if (s > fromMs && s < toMs) cuts.add(s);
  for (const f of faults) if ((f.kind === 'replica-down' || f.kind === 'replica-up') && f.atMs > fromMs && f.atMs < toMs) cuts.add(f.atMs);
  const points = [...cuts].sort((a, b) => a - b);
  let over = 0;
  let required = 0;
  let equal = 0;
  let all = 0;
  let loadTime = 0;
  let peak = 0;
  for (let i = 0; i + 1 < points.length; i++) {
    const a = points[i] as number;
    const len = (points[i + 1] as number) - a;
    const lambda = zones.map((_, zi) => rateAt(rates[zi] ?? { startsMs: [0], rates: [0] }, a));
    const cap = zones.map((z, zi) => liveReplicas(faults, z, zi, a) * (perReplica[zi] as number));
    const totalLambda = lambda.reduce((x, y) => x + y, 0);
    const totalCap = cap.reduce((x, y) => x + y, 0);
    let overflow = 0;
    let spare = 0;
    let toEqualise = 0;
    const u = totalCap > 0 ? totalLambda / totalCap : 0;
    lambda.forEach((l, zi) => {
      const c = cap[zi] as number;
      overflow += Math.max(0, l - c);
      spare += Math.max(0, c - l);
      toEqualise += Math.max(0, l - u * c);
    });
    over += overflow * len;
    required += Math.min(overflow, spare) * len;
    equal += toEqualise * len;
    all += totalLambda * len;
    loadTime += u * len;
    peak = Math.max(peak, u);
  }
  const share = (x: number) => (all > 0 ? x / all : 0);
  return {
    overflowShare: share(over),
    requiredShare: share(required),
    equalUtilisationShare: share(equal),
    meanLoad: toMs > fromMs ? loadTime / (toMs - fromMs) : 0,
    peakLoad: peak,
  };
}

function liveReplicas(faults: readonly ResolvedFault[], zone: ZoneSpec, zoneIndex: number, at: number): number {
  const down = new Set<number>();
  for (const f of faults) {
    if (f.atMs > at || (f.kind !== 'replica-down' && f.kind !== 'replica-up') || f.zone !== zoneIndex) continue;
    for (const r of f.replicas) {
      if (f.kind === 'replica-down') down.add(r);
      else down.delete(r);
    }
  }
  return zone.replicas - down.size;
}
