import type { EngineConfig } from '@spillway/engine';
import { capacityOf, type Capacity } from './calibrate.js';
import { rateSchedules } from './load.js';
import { resolveEngine, type FaultInput, type ScenarioFile, type SingleWorkloadInput, type WorkloadInput } from './scenario.js';
import { spillOf, type SpillFigures } from './spill.js';
import { strategySpecs, withSweep, type ResponseBodyMode, type StrategySpec } from './strategies.js';
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
    /** What the gateway sends Spillway's EPPs of a response (the shipped config: `none`, headers only). */
    readonly responseBody: ResponseBodyMode;
    /** Index of the zone the pool-wide reference EPP (the Gateway API Inference Extension's EPP, now in llm-d) runs in. */
    readonly referenceZone: number;
  };
  readonly faults: readonly ResolvedFault[];
  readonly windows: readonly WindowSpec[];
  readonly strategies: readonly StrategySpec[];
  readonly capacity: CapacityReport;
  /** What the offered load asks of routing across zones, and the load itself (measured window). */
  readonly spill: SpillFigures;
  readonly ladder: readonly number[] | undefined;
  /** A served request meeting this time to first token counts as goodput. */
  readonly ttftObjectiveMs: number;
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
  /** Overrides the file's sweep (one scheduler config field and its values). */
  readonly sweep?: Readonly<Record<string, readonly number[]>> | undefined;
}

export function toWorkloadSpec(input: WorkloadInput): WorkloadSpec {
  const one = (w: SingleWorkloadInput): SingleWorkload =>
    w.kind === 'sharegpt'
      ? { kind: 'sharegpt', inputMean: w.inputMean, outputMean: w.outputMean, sigma: w.sigma, inputMax: w.inputMax, outputMax: w.outputMax }
      : {
          kind: 'shared-prefix',
          groups: w.groups,
          prefixTokens: w.prefixTokens,
          questionTokens: w.questionTokens,
          outputTokens: w.outputTokens,
        };
  const lora = input.lora ? { lora: { adapters: input.lora.adapters, share: input.lora.share, skew: input.lora.skew } } : {};
  const tenants = input.tenants
    ? {
        tenants: input.tenants.map((t) => ({
          name: t.name,
          share: t.share,
          fairnessId: t.fairnessId ?? t.name,
          priorities: t.priorities ?? [{ priority: 0, share: 1 }],
        })),
      }
    : {};
  if (input.kind === 'mixed')
    return {
      parts: input.parts.map((p) => ({ weight: p.weight, spec: one(p) })),
      sheddableShare: input.sheddableShare,
      ...lora,
      ...tenants,
    };
  return { parts: [{ weight: 1, spec: one(input) }], sheddableShare: input.sheddableShare, ...lora, ...tenants };
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

  const clusterFraction = options.load ?? file.load.clusterFraction;
  const rates = rateSchedules({ file, zones, zoneCapacity, clusterRps: capacity.clusterRps, loadOverride: options.load, durationMs });

  // A shorter --duration drops the faults it no longer reaches.
  const inRun = file.faults.filter((f) => f.atS * 1000 < durationMs);
  const faults = inRun.map((f) => resolveFault(f, zones, file.epps.perZone)).sort((a, b) => a.atMs - b.atMs);
  const windows = windowsOf(inRun, zones, durationMs);
  const spill = spillOf({ rates, faults, zones, perReplica: capacity.perReplica, fromMs: warmupMs, toMs: durationMs });
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
    epps: {
      perZone: file.epps.perZone,
      spread: file.epps.spread,
      sharing: file.epps.sharing,
      batchMs: file.epps.batchMs,
      responseBody: file.epps.responseBody,
      referenceZone: Math.max(
        0,
        zones.findIndex((z) => z.zone === file.epps.referenceZone),
      ),
    },
    faults,
    windows,
    strategies: withSweep(strategySpecs(file.strategies, file.config), options.sweep ?? file.sweep),
    capacity,
    spill,
    ladder: file.ladder,
    ttftObjectiveMs: file.ttftObjectiveMs,
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
      method: 'one replica kept saturated (a full batch of requests always waiting), completions over 120 s after 60 s of warm-up',
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
      case 'collector-up':
        if (f.windowS !== undefined)
          out.push({ name: `collector-up ${f.zone}`, fromMs, toMs: Math.min(durationMs, fromMs + f.windowS * 1000), zone });
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
