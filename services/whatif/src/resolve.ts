import type { EngineConfig } from '@spillway/engine';
import { capacityOf, type Capacity } from './calibrate.js';
import { resolveEngine, type FaultInput, type ScenarioFile, type SingleWorkloadInput, type WorkloadInput } from './scenario.js';
import { strategySpecs, type StrategySpec } from './strategies.js';
import { RoundTrips, type ZoneSpec } from './topology.js';
import type { RateSchedule, SingleWorkload, WorkloadSpec } from './workload.js';

/**
 * A scenario file turned into numbers a run needs: per-gateway arrival rate schedules from the
 * calibrated capacity, faults on replica indices, report windows, strategies with their config.
 * Plain data (it crosses to worker threads), computed once per (file, load).
 */
export interface ResolvedScenario {
  readonly name: string;
  readonly title: string;
  readonly description: string;
  readonly seeds: readonly number[];
  readonly durationMs: number;
  readonly warmupMs: number;
  readonly zones: readonly ZoneSpec[];
  /** Round trips between zones, `rttMs[from][to]`. */
  readonly rttMs: readonly (readonly number[])[];
  /** Engine config of each zone's replicas. */
  readonly engines: readonly EngineConfig[];
  readonly workload: WorkloadSpec;
  /** The offered cluster load: a fraction of calibrated capacity when the file gives one. */
  readonly clusterFraction: number | undefined;
  readonly rates: readonly RateSchedule[];
  readonly signals: ScenarioFile['signals'];
  readonly epps: {
    readonly perZone: number;
    readonly spread: 'round-robin' | 'random';
    readonly sharing: boolean;
    readonly batchMs: number;
  };
  readonly faults: readonly ResolvedFault[];
  readonly windows: readonly WindowSpec[];
  readonly strategies: readonly StrategySpec[];
  readonly capacity: CapacityReport;
  /** Arrivals each zone cannot serve at its own capacity, summed, / all arrivals (measured window). */
  readonly overflowShare: number;
  readonly ladder: readonly number[] | undefined;
}

export interface CapacityReport {
  /** Requests per second of one replica of each zone, as calibrated (the load axis). */
  readonly perReplica: readonly number[];
  /** Cluster capacity: Σ replicas × perReplica. */
  readonly clusterRps: number;
  /** How it was measured, for the report. */
  readonly method: string;
  /** For prefix workloads: one replica seeing every group (what a cache-blind router gives it). */
  readonly cacheBlindPerReplica?: readonly number[];
  readonly detail: readonly Capacity[];
}

export type ResolvedFault =
  | { readonly kind: 'replica-down' | 'replica-up'; readonly atMs: number; readonly zone: number; readonly replicas: readonly number[] }
  | { readonly kind: 'collector-down' | 'collector-up'; readonly atMs: number; readonly zone: number }
  | { readonly kind: 'nats-down' | 'nats-up'; readonly atMs: number }
  | { readonly kind: 'epp-restart'; readonly atMs: number; readonly zone: number; readonly index: number | undefined };

/** A report window: one per fault, from its start to its end (or the run's end). */
export interface WindowSpec {
  readonly name: string;
  readonly fromMs: number;
  readonly toMs: number;
  /** The zone the fault is about, when it is about one. */
  readonly zone: number | undefined;
}

export interface ResolveOptions {
  /** Overrides load.clusterFraction (timeline fractions scale by the same ratio). */
  readonly load?: number | undefined;
  readonly seeds?: readonly number[] | undefined;
  readonly durationS?: number | undefined;
}

export function toWorkloadSpec(input: WorkloadInput): WorkloadSpec {
  const one = (w: SingleWorkloadInput): SingleWorkload =>
    w.kind === 'sharegpt'
      ? { kind: 'sharegpt', inputMean: w.inputMean, outputMean: w.outputMean, sigma: w.sigma }
      : {
          kind: 'shared-prefix',
          groups: w.groups,
          prefixTokens: w.prefixTokens,
          questionTokens: w.questionTokens,
          outputTokens: w.outputTokens,
        };
  if (input.kind === 'mixed')
    return { parts: input.parts.map((p) => ({ weight: p.weight, spec: one(p) })), sheddableShare: input.sheddableShare };
  return { parts: [{ weight: 1, spec: one(input) }], sheddableShare: input.sheddableShare };
}

export function resolveScenario(file: ScenarioFile, options: ResolveOptions = {}): ResolvedScenario {
  const durationS = options.durationS ?? file.durationS;
  if (file.warmupS >= durationS) throw new Error(`--duration ${durationS}: must be longer than the warm-up (${file.warmupS} s)`);
  const durationMs = durationS * 1000;
  const warmupMs = file.warmupS * 1000;
  const zones: ZoneSpec[] = file.zones.map((z) => ({ zone: z.zone, region: z.region, replicas: z.replicas }));
  const engines = file.zones.map((z) => resolveEngine(file.engine, z.engine));
  const workload = toWorkloadSpec(file.workload);
  const totalReplicas = zones.reduce((n, z) => n + z.replicas, 0);
  const capacity = calibrate(workload, engines, zones, totalReplicas);
  const zoneCapacity = zones.map((z, i) => z.replicas * (capacity.perReplica[i] as number));

  const base = file.load;
  const scale =
    options.load !== undefined && base.clusterFraction !== undefined && base.clusterFraction > 0 ? options.load / base.clusterFraction : 1;
  const clusterFraction = options.load ?? base.clusterFraction;
  const segments = loadSegments(file, options.load, scale);
  const zoneRates = segments.map((seg, i) => ({
    fromMs: seg.atMs,
    rates: zoneRatesOf(seg, zones, zoneCapacity, capacity.clusterRps, i === 0 ? 'load' : `load.timeline[${i - 1}]`),
  }));
  const rates: RateSchedule[] = zones.map((_, z) => ({
    startsMs: zoneRates.map((s) => s.fromMs),
    rates: zoneRates.map((s) => s.rates[z] as number),
  }));

  // A shorter --duration drops the faults it no longer reaches.
  const inRun = file.faults.filter((f) => f.atS * 1000 < durationMs);
  const faults = inRun.map((f) => resolveFault(f, zones, file.epps.perZone)).sort((a, b) => a.atMs - b.atMs);
  const windows = windowsOf(inRun, zones, durationMs);
  const overflowShare = overflowOf({ rates, faults, zones, perReplica: capacity.perReplica, fromMs: warmupMs, toMs: durationMs });
  const rtt = new RoundTrips(zones, file.network);

  return {
    name: file.name,
    title: file.title ?? file.name,
    description: file.description ?? '',
    seeds: options.seeds ?? file.seeds ?? [file.seed ?? 1],
    durationMs,
    warmupMs,
    zones,
    rttMs: rtt.rows(),
    engines,
    workload,
    clusterFraction,
    rates,
    signals: file.signals,
    epps: { perZone: file.epps.perZone, spread: file.epps.spread, sharing: file.epps.sharing, batchMs: file.epps.batchMs },
    faults,
    windows,
    strategies: strategySpecs(file.strategies, file.config),
    capacity,
    overflowShare,
    ladder: file.ladder,
  };
}

/** One replica's capacity per zone; for prefix workloads each replica holds its share of the groups. */
function calibrate(
  workload: WorkloadSpec,
  engines: readonly EngineConfig[],
  zones: readonly ZoneSpec[],
  totalReplicas: number,
): CapacityReport {
  const prefixGroups = workload.parts.reduce((n, p) => Math.max(n, p.spec.kind === 'shared-prefix' ? p.spec.groups : 0), 0);
  const groupLimit = prefixGroups > 0 ? Math.max(1, Math.ceil(prefixGroups / totalReplicas)) : undefined;
  const detail = engines.map((engine) => capacityOf({ workload, engine, ...(groupLimit !== undefined ? { groupLimit } : {}) }));
  const perReplica = detail.map((c) => c.requestsPerSec);
  const clusterRps = zones.reduce((s, z, i) => s + z.replicas * (perReplica[i] as number), 0);
  if (groupLimit === undefined) {
    return {
      perReplica,
      clusterRps,
      detail,
      method: 'one replica kept saturated (8 requests always waiting), completions over 120 s after 60 s of warm-up',
    };
  }
  const blind = engines.map((engine) => capacityOf({ workload, engine }).requestsPerSec);
  return {
    perReplica,
    clusterRps,
    detail,
    cacheBlindPerReplica: blind,
    method:
      `one replica kept saturated while it sees only its share of the prefix groups (${groupLimit} of ${prefixGroups}: groups ÷ ${totalReplicas} replicas), ` +
      'i.e. the capacity of a cluster whose router keeps every group on one replica; completions over 120 s after 60 s of warm-up',
  };
}

interface LoadState {
  atMs: number;
  clusterFraction: number | undefined;
  rps: number | undefined;
  zoneShares: Record<string, number> | undefined;
  zoneFractions: Record<string, number> | undefined;
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

function zoneRatesOf(
  seg: LoadState,
  zones: readonly ZoneSpec[],
  zoneCapacity: readonly number[],
  clusterRps: number,
  where: string,
): number[] {
  const total = seg.rps ?? (seg.clusterFraction ?? 0) * clusterRps;
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

function replicasOf(f: { zone: string; count?: number | undefined; pods?: string[] | undefined }, zones: readonly ZoneSpec[]): number[] {
  let first = 0;
  for (const z of zones) {
    if (z.zone === f.zone) break;
    first += z.replicas;
  }
  if (f.pods) return f.pods.map((p) => first + Number(/-(\d+)$/.exec(p)?.[1] ?? 0));
  return Array.from({ length: f.count ?? 0 }, (_, k) => first + k);
}

function resolveFault(f: FaultInput, zones: readonly ZoneSpec[], perZone: number): ResolvedFault {
  const atMs = f.atS * 1000;
  const zoneIndex = (zone: string) => zones.findIndex((z) => z.zone === zone);
  switch (f.kind) {
    case 'replica-down':
    case 'replica-up':
      return { kind: f.kind, atMs, zone: zoneIndex(f.zone), replicas: replicasOf(f, zones) };
    case 'collector-down':
    case 'collector-up':
      return { kind: f.kind, atMs, zone: zoneIndex(f.zone) };
    case 'nats-down':
    case 'nats-up':
      return { kind: f.kind, atMs };
    case 'epp-restart':
      return { kind: f.kind, atMs, zone: zoneIndex(f.zone), index: f.index !== undefined && f.index < perZone ? f.index : undefined };
  }
}

/** One window per fault that starts something: until the fault that ends it, or the run's end. */
function windowsOf(faults: readonly FaultInput[], zones: readonly ZoneSpec[], durationMs: number): WindowSpec[] {
  const out: WindowSpec[] = [];
  faults.forEach((f) => {
    const fromMs = f.atS * 1000;
    const zone = 'zone' in f ? zones.findIndex((z) => z.zone === f.zone) : undefined;
    const endOf = (kind: string, same: (g: FaultInput) => boolean): number => {
      const end = faults.filter((g) => g.kind === kind && g.atS > f.atS && same(g)).sort((a, b) => a.atS - b.atS)[0];
      return Math.min(durationMs, end ? end.atS * 1000 : durationMs);
    };
    const sameZone = (g: FaultInput) => 'zone' in g && 'zone' in f && g.zone === f.zone;
    switch (f.kind) {
      case 'replica-down': {
        const what = f.pods ? f.pods.join(',') : `${f.count} replica${f.count === 1 ? '' : 's'}`;
        out.push({ name: `replica-down ${f.zone} (${what})`, fromMs, toMs: endOf('replica-up', sameZone), zone });
        break;
      }
      case 'collector-down':
        out.push({ name: `collector-down ${f.zone}`, fromMs, toMs: endOf('collector-up', sameZone), zone });
        break;
      case 'nats-down':
        out.push({ name: 'nats-down', fromMs, toMs: endOf('nats-up', () => true), zone: undefined });
        break;
      case 'epp-restart':
        out.push({
          name: `epp-restart ${f.zone}${f.index !== undefined ? `#${f.index}` : ''}`,
          fromMs,
          toMs: Math.min(durationMs, fromMs + f.windowS * 1000),
          zone,
        });
        break;
      default:
        break;
    }
  });
  return out;
}

/**
 * Σ over zones of the arrivals that exceed the zone's own capacity (its live replicas × the
 * calibrated per-replica capacity), over the measured window, / all arrivals in it — from the
 * offered rates, so it does not depend on any strategy.
 */
function overflowOf(o: {
  readonly rates: readonly RateSchedule[];
  readonly faults: readonly ResolvedFault[];
  readonly zones: readonly ZoneSpec[];
  readonly perReplica: readonly number[];
  readonly fromMs: number;
  readonly toMs: number;
}): number {
  const { rates, faults, zones, perReplica, fromMs, toMs } = o;
  const cuts = new Set<number>([fromMs, toMs]);
  for (const r of rates) for (const s of r.startsMs) if (s > fromMs && s < toMs) cuts.add(s);
  for (const f of faults) if ((f.kind === 'replica-down' || f.kind === 'replica-up') && f.atMs > fromMs && f.atMs < toMs) cuts.add(f.atMs);
  const points = [...cuts].sort((a, b) => a - b);
  let over = 0;
  let all = 0;
  for (let i = 0; i + 1 < points.length; i++) {
    const a = points[i] as number;
    const len = (points[i + 1] as number) - a;
    zones.forEach((z, zi) => {
      const schedule = rates[zi] as RateSchedule;
      let seg = 0;
      while (seg + 1 < schedule.startsMs.length && (schedule.startsMs[seg + 1] as number) <= a) seg++;
      const rate = schedule.rates[seg] as number;
      const down = new Set<number>();
      for (const f of faults) {
        if (f.atMs > a || (f.kind !== 'replica-down' && f.kind !== 'replica-up') || f.zone !== zi) continue;
        for (const r of f.replicas) {
          if (f.kind === 'replica-down') down.add(r);
          else down.delete(r);
        }
      }
      const cap = (z.replicas - down.size) * (perReplica[zi] as number);
      over += Math.max(0, rate - cap) * len;
      all += rate * len;
    });
  }
  return all > 0 ? over / all : 0;
}
