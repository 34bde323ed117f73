import type { ScenarioFile } from './scenario.js';
import type { ZoneSpec } from './topology.js';
import type { RateSchedule } from './workload.js';

/**
 * The offered load as per-gateway arrival rate schedules (piecewise constant): the file's load and
 * timeline (each entry changing only what it gives), split over the zones, then shaped over time
 * by the optional diurnal swing and bursts. Rates are requests per second.
 */
interface LoadState {
  atMs: number;
  clusterFraction: number | undefined;
  rps: number | undefined;
  zoneShares: Record<string, number> | undefined;
  zoneFractions: Record<string, number> | undefined;
}

export interface LoadInput {
  readonly file: ScenarioFile;
  readonly zones: readonly ZoneSpec[];
  /** Each zone's calibrated capacity (req/s), and the cluster's. */
  readonly zoneCapacity: readonly number[];
  readonly clusterRps: number;
  /** Overrides load.clusterFraction; timeline fractions scale by the same ratio. */
  readonly loadOverride: number | undefined;
  readonly durationMs: number;
}

export function rateSchedules(o: LoadInput): RateSchedule[] {
  const base = o.file.load;
  const scale =
    o.loadOverride !== undefined && base.clusterFraction !== undefined && base.clusterFraction > 0
      ? o.loadOverride / base.clusterFraction
      : 1;
  const segments = loadSegments(o.file, o.loadOverride, scale);
  const zoneRates = segments.map((seg, i) => ({
    fromMs: seg.atMs,
    rates: zoneRatesOf(seg, o, i === 0 ? 'load' : `load.timeline[${i - 1}]`),
  }));
  const plain: RateSchedule[] = o.zones.map((_, z) => ({
    startsMs: zoneRates.map((s) => s.fromMs),
    rates: zoneRates.map((s) => s.rates[z] as number),
  }));
  return shape(plain, o);
}

/** The load in force from each change on: every timeline entry changes only the fields it gives. */
function loadSegments(file: ScenarioFile, loadOverride: number | undefined, scale: number): LoadState[] {
  const b = file.load;
  let state: LoadState = {
    atMs: 0,
    clusterFraction: loadOverride ?? b.clusterFraction,
    rps: loadOverride !== undefined ? undefined : b.rps,
    zoneShares: b.zoneShares,
    zoneFractions: b.zoneFractions,
  };
  const out = [state];
  for (const c of b.timeline) {
    state = { ...state, atMs: c.atS * 1000 };
    if (c.clusterFraction !== undefined) state = { ...state, clusterFraction: c.clusterFraction * scale, rps: undefined };
    if (c.rps !== undefined) state = { ...state, rps: c.rps, clusterFraction: undefined };
    if (c.zoneShares) state = { ...state, zoneShares: c.zoneShares, zoneFractions: undefined };
    if (c.zoneFractions) state = { ...state, zoneFractions: c.zoneFractions, zoneShares: undefined };
    out.push(state);
  }
  return out;
}

function zoneRatesOf(seg: LoadState, o: LoadInput, where: string): number[] {
  const { zones, zoneCapacity } = o;
  const total = seg.rps ?? (seg.clusterFraction ?? 0) * o.clusterRps;
  if (seg.zoneShares) {
    const shares = seg.zoneShares;
    return zones.map((z) => total * (shares[z.zone] ?? 0));
  }
  // By default every zone at the same fraction of its own capacity.
  const fixed = seg.zoneFractions ?? {};
  const rates = zones.map((z, i) => (z.zone in fixed ? (fixed[z.zone] as number) * (zoneCapacity[i] as number) : Number.NaN));
  const taken = rates.reduce((a, r) => a + (Number.isNaN(r) ? 0 : r), 0);
  const rest = total - taken;
  if (rest < -1e-9)
    throw new Error(
      `${where}.zoneFractions: the listed zones alone are offered ${taken.toFixed(1)} req/s, more than the cluster load of ${total.toFixed(1)} req/s`,
    );
  const freeCapacity = zones.reduce((a, _z, i) => a + (Number.isNaN(rates[i] as number) ? (zoneCapacity[i] as number) : 0), 0);
  return rates.map((r, i) =>
    Number.isNaN(r) ? (freeCapacity > 0 ? (Math.max(0, rest) * (zoneCapacity[i] as number)) / freeCapacity : 0) : r,
  );
}

/** The rate of a schedule at `t`. */
export function rateAt(schedule: RateSchedule, t: number): number {
  let seg = 0;
  while (seg + 1 < schedule.startsMs.length && (schedule.startsMs[seg + 1] as number) <= t) seg++;
  return schedule.rates[seg] ?? 0;
}

/** Seconds per step of a diurnal swing (rates are piecewise constant). */
const DIURNAL_STEP_MS = 1000;

/**
 * The diurnal swing and the bursts, as factors on each zone's rate over time:
 * - diurnal: 1 − amplitude · cos(2π (t − lag) / period), a zone's own swing starting at its trough
 *   `lag` seconds in (the zone with the smallest lag leads), stepped every second;
 * - bursts: every `everyS` from `startS`, for `lengthS`, the bursting zones' rate is `factor` times
 *   the rate between bursts — all zones at once (`all`: correlated), one zone per burst in turn
 *   (`rotate`), or the zones listed — with the rate between bursts lowered so that each zone's mean
 *   over whole burst periods stays its unshaped rate.
 */
function shape(plain: RateSchedule[], o: LoadInput): RateSchedule[] {
  const { diurnal, bursts } = o.file.load;
  if (!diurnal && !bursts) return plain;
  const cuts = new Set<number>();
  for (const s of plain) for (const t of s.startsMs) cuts.add(t);
  if (diurnal) for (let t = 0; t < o.durationMs; t += DIURNAL_STEP_MS) cuts.add(t);
  if (bursts) {
    for (let t = bursts.startS * 1000; t < o.durationMs; t += bursts.everyS * 1000) {
      cuts.add(t);
      cuts.add(t + bursts.lengthS * 1000);
    }
  }
  const points = [...cuts].filter((t) => t >= 0 && t < o.durationMs).sort((a, b) => a - b);
  return plain.map((s, z) => {
    const zone = o.zones[z]?.zone ?? '';
    const rates = points.map((t, i) => {
      const next = points[i + 1] ?? o.durationMs;
      // A diurnal step takes the swing at its middle.
      const mid = (t + next) / 2;
      let factor = 1;
      if (diurnal) {
        const lag = (diurnal.lagS[zone] ?? 0) * 1000;
        factor *= 1 - diurnal.amplitude * Math.cos((2 * Math.PI * (mid - lag)) / (diurnal.periodS * 1000));
      }
      if (bursts) factor *= burstFactor(bursts, { index: z, name: zone }, o.zones.length, t);
      return rateAt(s, t) * factor;
    });
    return { startsMs: points, rates };
  });
}

function burstFactor(
  b: NonNullable<ScenarioFile['load']['bursts']>,
  zone: { index: number; name: string },
  zones: number,
  t: number,
): number {
  const zoneList = b.zones;
  // The share of bursts this zone takes part in.
  const share = zoneList === 'all' ? 1 : zoneList === 'rotate' ? 1 / zones : zoneList.includes(zone.name) ? 1 : 0;
  if (share === 0) return 1;
  const period = b.everyS * 1000;
  const since = t - b.startS * 1000;
  const k = Math.floor(since / period);
  const inBurst = since >= 0 && since - k * period < b.lengthS * 1000;
  const mine = zoneList === 'rotate' ? k % zones === zone.index : true;
  // Between bursts the rate is lowered so that the zone's mean stays its unshaped rate.
  const between = 1 / (1 + (b.factor - 1) * (b.lengthS / b.everyS) * share);
  return inBurst && mine ? b.factor * between : between;
}
