import { ENGINE_MODES, engineConfig, PRESET_NAMES, type EngineConfig, type EngineMode, type PresetName } from '@spillway/engine';
import { schedulerConfigSchema } from '@spillway/scheduler';
import { z } from 'zod';
import { RESPONSE_BODY_MODES, STRATEGY_KINDS } from './strategies.js';

const KV_REPLAY_MODES = ['none', 'tail', 'full'] as const;

/**
 * The scenario file (YAML or JSON): zones, network, engine, workload, offered load, signals, EPPs,
 * faults, strategies. Every object is strict, so a misspelt key is an error naming it; checks that
 * span fields (shares summing to 1, faults naming known zones, ...) report the path of the field
 * at fault. docs/whatif.md is the reference for users.
 */
const name = z
  .string()
  .min(1)
  .max(63)
  .regex(/^[A-Za-z0-9][A-Za-z0-9_.-]*$/, 'letters, digits, "-", "_" and "." only');
const seconds = z.number().finite().min(0).max(86_400);
const positiveInt = z.number().int().min(1);
const fraction = z.number().finite().min(0).max(1);
const range = (min: number, max: number) =>
  z
    .tuple([z.number().int().min(min).max(max), z.number().int().min(min).max(max)])
    .refine(([lo, hi]) => lo <= hi, 'the first number must not exceed the second');

/** Any engine config field, each optional; `preset` picks the base. */
const engineSchema = z.strictObject({
  preset: z.enum(PRESET_NAMES as [PresetName, ...PresetName[]]).optional(),
  mode: z.enum(ENGINE_MODES as [EngineMode, ...EngineMode[]]).optional(),
  maxNumSeqs: positiveInt.optional(),
  numBlocks: positiveInt.optional(),
  blockSize: positiveInt.optional(),
  maxLoras: z.number().int().min(0).optional(),
  maxWaiting: z.number().int().min(0).optional(),
  maxNumBatchedTokens: positiveInt.optional(),
  stepOverheadMs: z.number().finite().min(0).optional(),
  stepPerTokenMs: z.number().finite().min(0).optional(),
  stepPerContextTokenMs: z.number().finite().min(0).optional(),
  stepPerAttentionPairMs: z.number().finite().min(0).optional(),
  prefillOverheadMs: z.number().finite().min(0).optional(),
  prefillPerTokenMs: z.number().finite().min(0).optional(),
  interTokenMs: z.number().finite().min(0).optional(),
  loadFactor: z.number().finite().min(1).optional(),
  jitter: z.number().min(0).max(0.3).optional(),
});
export type EngineInput = z.output<typeof engineSchema>;

const zoneSchema = z.strictObject({
  zone: name,
  region: name,
  replicas: positiveInt.max(4096),
  /** Engine fields for this zone's replicas, over the scenario's `engine`. */
  engine: engineSchema.optional(),
});

const networkSchema = z.strictObject({
  sameRegionMs: z.number().finite().min(0).max(10_000).default(1),
  crossRegionMs: z.number().finite().min(0).max(10_000).default(30),
  /** Round trips per zone pair (either direction), over the region defaults. */
  rttMs: z.record(name, z.record(name, z.number().finite().min(0).max(10_000))).optional(),
});

const shareGpt = z.strictObject({
  kind: z.literal('sharegpt'),
  inputMean: z.number().min(1).max(131_072).default(250),
  outputMean: z.number().min(1).max(8192).default(225),
  sigma: z.number().min(0).max(3).default(0.8),
  /** Lengths are clamped to these (long-context parts raise inputMax). */
  inputMax: z.number().int().min(4).max(131_072).default(2048),
  outputMax: z.number().int().min(4).max(8192).default(1024),
});
const sharedPrefix = z.strictObject({
  kind: z.literal('shared-prefix'),
  groups: positiveInt.max(100_000),
  prefixTokens: range(16, 131_072),
  questionTokens: range(1, 131_072),
  outputTokens: z.number().min(1).max(8192).default(200),
});
const weighted = (s: typeof shareGpt | typeof sharedPrefix) => s.extend({ weight: z.number().positive().finite() });
/**
 * LoRA traffic: `share` of the requests name one of `adapters` adapters (`adapter-0` …), drawn with
 * Zipf weights 1 / (k + 1)^skew, so a few adapters are hot and many are cold.
 */
const loraSchema = z.strictObject({
  adapters: positiveInt.max(1000),
  share: fraction,
  skew: z.number().finite().min(0).max(4).default(1),
});
/**
 * Tenants: `share` of each gateway's arrivals belongs to each (shares sum to 1), each with its
 * fairness id (`x-gateway-inference-fairness-id`, default its name) and its requests' priority
 * bands (`priorities`, shares summing to 1; default one band of priority 0). A flooding tenant is
 * one whose share asks for more than the pool has. Without tenants every request is of one flow
 * and priority 0 (or −1 at `sheddableShare`, which still applies on top of a tenant's bands).
 */
const prioritySchema = z.strictObject({ priority: z.number().int().min(-1_000_000).max(1_000_000), share: fraction });
const tenantSchema = z.strictObject({
  name,
  share: fraction,
  fairnessId: z.string().min(1).max(128).optional(),
  priorities: z.array(prioritySchema).min(1).max(16).optional(),
});
const common = {
  sheddableShare: fraction.default(0),
  lora: loraSchema.optional(),
  tenants: z.array(tenantSchema).min(1).max(16).optional(),
};
const workloadSchema = z.discriminatedUnion('kind', [
  shareGpt.extend(common),
  sharedPrefix.extend(common),
  z.strictObject({
    kind: z.literal('mixed'),
    parts: z
      .array(z.discriminatedUnion('kind', [weighted(shareGpt), weighted(sharedPrefix)]))
      .min(1)
      .max(16),
    ...common,
  }),
]);
export type WorkloadInput = z.output<typeof workloadSchema>;
export type SingleWorkloadInput = z.output<typeof shareGpt> | z.output<typeof sharedPrefix>;

const shares = z.record(name, fraction);
const loadChange = z.strictObject({
  atS: seconds,
  clusterFraction: z.number().finite().min(0).max(10).optional(),
  rps: z.number().finite().min(0).max(1_000_000).optional(),
  zoneShares: shares.optional(),
  /** Zones offered this multiple of their own capacity; the other zones share what is left of the cluster load. */
  zoneFractions: z.record(name, z.number().finite().min(0).max(10)).optional(),
});
/** Each zone's rate swings as 1 − amplitude · cos(2π (t − lag) / period): from its trough `lagS[zone]` seconds in (default 0) to its peak half a period later. */
const diurnalSchema = z.strictObject({
  periodS: z.number().finite().positive().max(86_400),
  amplitude: z.number().finite().min(0).max(0.95),
  lagS: z.record(name, seconds).default({}),
});
/** Bursts: every `everyS` from `startS`, for `lengthS`, `factor` times the rate between bursts; each zone's mean stays its unshaped rate. */
const burstsSchema = z.strictObject({
  everyS: z.number().finite().positive().max(86_400),
  lengthS: z.number().finite().positive().max(86_400),
  factor: z.number().finite().min(1).max(20),
  startS: seconds.default(0),
  /** `all`: every zone at once (correlated); `rotate`: one zone per burst, in turn; or the zones listed. */
  zones: z.union([z.literal('all'), z.literal('rotate'), z.array(name).min(1)]).default('all'),
});
const loadSchema = z.strictObject({
  clusterFraction: z.number().finite().min(0).max(10).optional(),
  rps: z.number().finite().min(0).max(1_000_000).optional(),
  zoneShares: shares.optional(),
  zoneFractions: z.record(name, z.number().finite().min(0).max(10)).optional(),
  timeline: z.array(loadChange).max(1000).default([]),
  diurnal: diurnalSchema.optional(),
  bursts: burstsSchema.optional(),
});

/** A path's own delay, uniform in [min, max] ms (on top of half the round trip between the zones). */
const jitterRange = (lo: number, hi: number) =>
  z
    .tuple([z.number().finite().min(0).max(60_000), z.number().finite().min(0).max(60_000)])
    .refine(([a, b]) => a <= b, 'the first number must not exceed the second')
    .default([lo, hi]);

const signalsSchema = z.strictObject({
  sampleEveryMs: z.number().finite().min(10).max(60_000).default(100),
  /** Delivery delay from a collector to each EPP beyond half the zones' round trip, uniform in [min, max] ms. */
  delayMs: jitterRange(5, 20),
  /** Share of metric samples lost on the way to each EPP (readiness is acknowledged, never lost). */
  lossRate: z.number().min(0).max(0.99).default(0),
  staleAfterMs: z.number().finite().min(1).max(600_000).default(1000),
  /** Collectors re-publish every pod's readiness this often. */
  readinessEveryS: z.number().finite().min(1).max(3600).default(30),
  /** From a replica's death until probes mark it not ready (gateways and readiness events). */
  detectMs: z.number().finite().min(0).max(600_000).default(2000),
  /** Delivery delay of a shared-state batch from one EPP to another (core NATS) beyond half their zones' round trip; batches are lost at `lossRate` too. */
  sharingDelayMs: jitterRange(1, 3),
  /**
   * KV events (the `spillway-precise` strategy): each replica's collector relays its server's block
   * events in batches every `kvBatchMs`, delivered to each EPP after `kvDelayMs` (uniform), lost at
   * `kvLossRate` (core NATS; a lost batch is a sequence gap: the EPP forgets the pod until its next
   * snapshot), and publishes the pod's block set every `kvSnapshotEveryS`.
   */
  kvBatchMs: z.number().finite().min(1).max(10_000).default(20),
  kvDelayMs: jitterRange(2, 10),
  kvLossRate: z.number().min(0).max(0.99).default(0),
  kvSnapshotEveryS: z.number().finite().min(0.1).max(3600).default(10),
  /**
   * What a zone's restarted collector (`collector-up`) recovers of each server's cache from the
   * server's replay socket: `none` (no socket, vLLM's default; TensorRT-LLM has none): every pod
   * starts afresh; `tail`: the server's buffer holds the last `kvReplayTailS` of its batches;
   * `full`: the buffer reaches back to the server's start. A strategy may say otherwise.
   */
  kvReplay: z.enum(KV_REPLAY_MODES).default('none'),
  kvReplayTailS: z.number().finite().min(0.1).max(86_400).default(30),
  /**
   * The scrape path (the reference EPP, i.e. the Gateway API Inference Extension's EPP now in llm-d, and the pickers built on it): each picker scrapes each pod
   * it picks among every `scrapeEveryMs` (the reference's --refresh-metrics-interval); a scrape
   * takes the round trip between the zones plus `scrapeMs` (rendering and parsing the metrics).
   */
  scrapeEveryMs: z.number().finite().min(1).max(60_000).default(50),
  scrapeMs: jitterRange(1, 5),
});

const eppsSchema = z.strictObject({
  perZone: positiveInt.max(16).default(1),
  /** How a gateway spreads its picks over its zone's EPPs. */
  spread: z.enum(['round-robin', 'random']).default('round-robin'),
  /**
   * The pool's EPPs (every zone's) share picks in flight, prefix placements and penalties, as
   * deployed by default. Applies to the strategies that run Spillway's scheduler per zone
   * (spillway, zone-local); a strategy may say otherwise (`{ name, kind, sharing: false }`).
   */
  sharing: z.boolean().default(true),
  /** A batch leaves this long after its first entry (the EPP's `sharedState.batchMs`). */
  batchMs: z.number().finite().min(0).max(1000).default(5),
  /** The zone the pool-wide reference EPP runs in (`reference`, `reference-plus`); default the first zone. */
  referenceZone: name.optional(),
  /**
   * What the gateway sends Spillway's EPPs of a response (ext_proc `response_body_mode`). `none`,
   * the shipped Envoy config: response headers only, so an EPP sees a request start (its headers,
   * when the engine accepts it) and never its end — its charge ends by samples or at its bound.
   * `full-duplex`: the body streams through the EPP, which sees the last token (a completion).
   */
  responseBody: z.enum(RESPONSE_BODY_MODES).default('none'),
});

const faultSchema = z.discriminatedUnion('kind', [
  z.strictObject({
    kind: z.literal('replica-down'),
    atS: seconds,
    zone: name,
    count: positiveInt.optional(),
    pods: z.array(name).min(1).optional(),
  }),
  z.strictObject({
    kind: z.literal('replica-up'),
    atS: seconds,
    zone: name,
    count: positiveInt.optional(),
    pods: z.array(name).min(1).optional(),
  }),
  z.strictObject({ kind: z.literal('collector-down'), atS: seconds, zone: name }),
  z.strictObject({
    kind: z.literal('collector-up'),
    atS: seconds,
    zone: name,
    /** A report window of this length from the restart (the recovery), besides the outage's own. */
    windowS: z.number().finite().positive().max(86_400).optional(),
  }),
  z.strictObject({ kind: z.literal('nats-down'), atS: seconds }),
  z.strictObject({ kind: z.literal('nats-up'), atS: seconds }),
  z.strictObject({
    kind: z.literal('epp-restart'),
    atS: seconds,
    zone: name,
    /** Which of the zone's EPPs (0-based); all of them when absent. */
    index: z.number().int().min(0).max(15).optional(),
    /** Length of the fault's report window (default 10 s). */
    windowS: z.number().finite().positive().max(86_400).default(10),
  }),
]);
export type FaultInput = z.output<typeof faultSchema>;

/**
 * Scheduler config overrides stay raw here: parsing them alone would fill every default and mask a
 * strategy kind's own settings. The merged config of each strategy is validated below.
 */
const configOverrides = z.record(z.string(), z.unknown());

const strategyObject = z.strictObject({
  name,
  kind: z.enum(STRATEGY_KINDS),
  config: configOverrides.optional(),
  /** Overrides `epps.sharing` for this strategy (e.g. `spillway-unshared`: `sharing: false`). */
  sharing: z.boolean().optional(),
  /** Overrides `epps.responseBody` for this strategy (e.g. `spillway-full-duplex`: `responseBody: full-duplex`). */
  responseBody: z.enum(RESPONSE_BODY_MODES).optional(),
  /** Overrides `signals.kvReplay` for this strategy (the same run with the servers' replay sockets set otherwise). */
  kvReplay: z.enum(KV_REPLAY_MODES).optional(),
});
const strategyEntry = z.union([z.enum(STRATEGY_KINDS), strategyObject], {
  error: `a strategy is one of ${STRATEGY_KINDS.join(', ')}, or { name, kind, config }`,
});

const scenarioObject = z.strictObject({
  name,
  title: z.string().max(200).optional(),
  description: z.string().max(2000).optional(),
  seed: z
    .number()
    .int()
    .min(0)
    .max(2 ** 31)
    .optional(),
  seeds: z
    .array(
      z
        .number()
        .int()
        .min(0)
        .max(2 ** 31),
    )
    .min(1)
    .max(100)
    .optional(),
  durationS: z.number().finite().positive().max(3600),
  warmupS: seconds.default(10),
  zones: z.array(zoneSchema).min(1).max(64),
  network: networkSchema.prefault({}),
  engine: engineSchema.prefault({}),
  workload: workloadSchema,
  load: loadSchema,
  /** The time-to-first-token objective a served request must meet to count as goodput. */
  ttftObjectiveMs: z.number().finite().positive().max(600_000).default(1000),
  /** Cluster loads the benchmark iterates (each overrides load.clusterFraction). */
  ladder: z.array(z.number().finite().positive().max(10)).min(1).max(20).optional(),
  signals: signalsSchema.prefault({}),
  epps: eppsSchema.prefault({}),
  faults: z.array(faultSchema).max(1000).default([]),
  strategies: z
    .array(strategyEntry)
    .min(1)
    .max(32)
    .default(['random', 'round-robin', 'least-queue', 'reference', 'zone-local', 'spillway']),
  /** Scheduler config overrides per strategy name (merged over the strategy's own). */
  config: z.record(name, configOverrides).default({}),
  /**
   * The latency / cross-zone curve: each Spillway strategy also runs once per value of this
   * scheduler config field (e.g. `zoneBiasMs: [0, 2, 4, 8, 16, 32]`); `--sweep` overrides it.
   */
  sweep: z.record(z.string().min(1).max(63), z.array(z.number().finite().min(0).max(1e9)).min(1).max(32)).optional(),
});

export const scenarioSchema = scenarioObject.superRefine(checkScenario);

export type ScenarioFile = z.output<typeof scenarioSchema>;

type Ctx = z.RefinementCtx;

function issue(ctx: Ctx, path: (string | number)[], message: string): void {
  ctx.addIssue({ code: 'custom', path, message });
}

/** Checks that span fields; each issue names the field at fault. */
function checkScenario(s: z.output<typeof scenarioObject>, ctx: Ctx): void {
  if (s.seed !== undefined && s.seeds !== undefined) issue(ctx, ['seeds'], 'give either seed or seeds, not both');
  if (s.warmupS >= s.durationS) issue(ctx, ['warmupS'], `must be less than durationS (${s.durationS})`);
  const zones = new Set<string>();
  s.zones.forEach((z, i) => {
    if (zones.has(z.zone)) issue(ctx, ['zones', i, 'zone'], `zone ${z.zone} is listed twice`);
    zones.add(z.zone);
  });
  checkEngine(ctx, ['engine'], s.engine, undefined);
  s.zones.forEach((z, i) => z.engine && checkEngine(ctx, ['zones', i, 'engine'], s.engine, z.engine));

  const knownZone = (path: (string | number)[], zone: string): boolean => {
    if (zones.has(zone)) return true;
    issue(ctx, path, `unknown zone ${zone} (zones: ${[...zones].join(', ')})`);
    return false;
  };
  if (s.epps.referenceZone !== undefined) knownZone(['epps', 'referenceZone'], s.epps.referenceZone);
  for (const [from, row] of Object.entries(s.network.rttMs ?? {})) {
    knownZone(['network', 'rttMs', from], from);
    for (const to of Object.keys(row)) knownZone(['network', 'rttMs', from, to], to);
  }

  checkTenants(ctx, s.workload.tenants);
  checkLoad(ctx, ['load'], s.load, knownZone, true);
  for (const z of Object.keys(s.load.diurnal?.lagS ?? {})) knownZone(['load', 'diurnal', 'lagS', z], z);
  const bursts = s.load.bursts;
  if (bursts) {
    if (bursts.lengthS >= bursts.everyS) issue(ctx, ['load', 'bursts', 'lengthS'], `must be less than everyS (${bursts.everyS})`);
    if (Array.isArray(bursts.zones)) bursts.zones.forEach((z, i) => knownZone(['load', 'bursts', 'zones', i], z));
  }
  if (s.sweep) {
    if (Object.keys(s.sweep).length !== 1) issue(ctx, ['sweep'], 'sweep one scheduler config field at a time');
    for (const [field, values] of Object.entries(s.sweep)) {
      for (const v of values) {
        const r = schedulerConfigSchema.safeParse({ [field]: v });
        if (!r.success) issue(ctx, ['sweep', field], r.error.issues[0]?.message ?? 'not a scheduler config field');
      }
    }
  }
  s.load.timeline.forEach((c, i) => {
    checkLoad(ctx, ['load', 'timeline', i], c, knownZone, false);
    if (c.atS >= s.durationS) issue(ctx, ['load', 'timeline', i, 'atS'], `must be before durationS (${s.durationS})`);
    const prev = s.load.timeline[i - 1];
    if (prev && c.atS <= prev.atS) issue(ctx, ['load', 'timeline', i, 'atS'], 'timeline entries must be in increasing atS order');
  });

  const replicasOf = new Map(s.zones.map((z) => [z.zone, z.replicas]));
  s.faults.forEach((f, i) => {
    if (f.atS >= s.durationS) issue(ctx, ['faults', i, 'atS'], `must be before durationS (${s.durationS})`);
    if (!('zone' in f)) return;
    if (!knownZone(['faults', i, 'zone'], f.zone)) return;
    const replicas = replicasOf.get(f.zone) ?? 0;
    if (f.kind === 'replica-down' || f.kind === 'replica-up') {
      if ((f.count === undefined) === (f.pods === undefined)) issue(ctx, ['faults', i], `${f.kind} needs either count or pods`);
      if (f.count !== undefined && f.count > replicas) issue(ctx, ['faults', i, 'count'], `zone ${f.zone} has ${replicas} replicas`);
      f.pods?.forEach((pod, k) => {
        const m = /^vllm-(.+)-(\d+)$/.exec(pod);
        if (!m || m[1] !== f.zone || Number(m[2]) >= replicas)
          issue(
            ctx,
            ['faults', i, 'pods', k],
            `unknown pod ${pod} in zone ${f.zone} (pods are vllm-${f.zone}-0 .. vllm-${f.zone}-${replicas - 1})`,
          );
      });
    }
    if (f.kind === 'epp-restart' && f.index !== undefined && f.index >= s.epps.perZone) {
      issue(ctx, ['faults', i, 'index'], `zone ${f.zone} has ${s.epps.perZone} EPP(s) (epps.perZone)`);
    }
  });

  const names = new Set<string>();
  s.strategies.forEach((entry, i) => {
    const n = typeof entry === 'string' ? entry : entry.name;
    if (names.has(n)) issue(ctx, ['strategies', i], `strategy ${n} is listed twice`);
    names.add(n);
  });
  for (const key of Object.keys(s.config)) {
    if (!names.has(key)) issue(ctx, ['config', key], `no strategy named ${key} in strategies (${[...names].join(', ')})`);
  }
  s.strategies.forEach((entry, i) => {
    if (typeof entry === 'string') return;
    const r = schedulerConfigSchema.safeParse(entry.config ?? {});
    if (!r.success) for (const e of r.error.issues) issue(ctx, ['strategies', i, 'config', ...e.path.map(String)], e.message);
  });
  for (const [key, overrides] of Object.entries(s.config)) {
    const r = schedulerConfigSchema.safeParse(overrides);
    if (!r.success) for (const e of r.error.issues) issue(ctx, ['config', key, ...e.path.map(String)], e.message);
  }
}

function checkTenants(ctx: Ctx, tenants: WorkloadInput['tenants']): void {
  if (!tenants) return;
  const sums = (path: (string | number)[], shares: readonly number[]): void => {
    const sum = shares.reduce((a, b) => a + b, 0);
    if (Math.abs(sum - 1) > 1e-6) issue(ctx, path, `shares must sum to 1, got ${+sum.toFixed(6)}`);
  };
  sums(
    ['workload', 'tenants'],
    tenants.map((t) => t.share),
  );
  const seen = new Set<string>();
  tenants.forEach((t, i) => {
    if (seen.has(t.name)) issue(ctx, ['workload', 'tenants', i, 'name'], `tenant ${t.name} is listed twice`);
    seen.add(t.name);
    if (t.priorities)
      sums(
        ['workload', 'tenants', i, 'priorities'],
        t.priorities.map((p) => p.share),
      );
  });
}

function checkEngine(ctx: Ctx, path: string[] | (string | number)[], base: EngineInput, zone: EngineInput | undefined): void {
  try {
    resolveEngine(base, zone);
  } catch (error) {
    const message = (error as Error).message.replace(/^engine config: /, '');
    const field = /^(\w+)/.exec(message)?.[1];
    issue(ctx, field && field !== 'stepOverheadMs' ? [...path, field] : path, message);
  }
}

function checkLoad(
  ctx: Ctx,
  path: (string | number)[],
  load: {
    clusterFraction?: number | undefined;
    rps?: number | undefined;
    zoneShares?: Record<string, number> | undefined;
    zoneFractions?: Record<string, number> | undefined;
  },
  knownZone: (path: (string | number)[], zone: string) => boolean,
  base: boolean,
): void {
  if (load.clusterFraction !== undefined && load.rps !== undefined) issue(ctx, path, 'give either clusterFraction or rps, not both');
  if (base && load.clusterFraction === undefined && load.rps === undefined)
    issue(ctx, path, 'needs clusterFraction (of the calibrated capacity) or rps');
  if (load.zoneShares && load.zoneFractions) issue(ctx, path, 'give either zoneShares or zoneFractions, not both');
  if (load.zoneShares) {
    for (const z of Object.keys(load.zoneShares)) knownZone([...path, 'zoneShares', z], z);
    const sum = Object.values(load.zoneShares).reduce((a, b) => a + b, 0);
    if (Math.abs(sum - 1) > 1e-6) issue(ctx, [...path, 'zoneShares'], `must sum to 1, got ${+sum.toFixed(6)}`);
  }
  if (load.zoneFractions) for (const z of Object.keys(load.zoneFractions)) knownZone([...path, 'zoneFractions', z], z);
}

/** A zone's engine config: preset, then the scenario's fields, then the zone's. Throws RangeError. */
export function resolveEngine(base: EngineInput, zone: EngineInput | undefined): EngineConfig {
  const { preset: basePreset, ...baseFields } = base;
  const { preset: zonePreset, ...zoneFields } = zone ?? {};
  // The simulations run vLLM-style steps unless the file asks for the closed form.
  return engineConfig(zonePreset ?? basePreset ?? 'llama-8b-h100', { mode: 'step', ...baseFields, ...zoneFields });
}
