import type { SchedulerConfigInput } from '@spillway/scheduler';

/**
 * The routing strategies a scenario compares. Zone-unaware baselines see the whole pool; the
 * scheduler-based ones run the production `@spillway/scheduler`.
 */
export const STRATEGY_KINDS = [
  'random',
  'round-robin',
  'least-queue',
  'reference',
  'zone-local',
  'spillway',
  'spillway-precise',
  'oracle',
] as const;
export type StrategyKind = (typeof STRATEGY_KINDS)[number];

/** The zone-unaware strategies (targets compare Spillway with the best of them). */
export const ZONE_UNAWARE: readonly StrategyKind[] = ['random', 'round-robin', 'least-queue', 'reference'];

/** What each baseline is, for the report header and the docs. */
export const STRATEGY_DESCRIPTIONS: Readonly<Record<StrategyKind, string>> = {
  random: 'uniform over every ready replica of the pool (zone-unaware)',
  'round-robin': 'each EPP cycles over every ready replica of the pool (zone-unaware)',
  'least-queue': "lowest waiting + running of the latest sample plus this EPP's picks since, over the whole pool (zone-unaware)",
  reference:
    "one pool-wide picker shared by every gateway (the reference EPP's active-passive deployment): Spillway's scheduler with the reference scoring " +
    '(queue 2, KV 2, prefix 3), every replica seen in one zone, no subset; sheddable requests get 429 by the reference saturation rule (zone-unaware)',
  'zone-local': "Spillway's scheduler in strict mode with the gateway's zone-local subset: never leaves the zone",
  spillway: "Spillway's scheduler in locality mode with the gateway's zone-local subset: spills to other zones by its rules",
  'spillway-precise':
    "spillway, with the precise block index: the requests' token ids and every replica's KV events (relayed in batches with delay and loss, snapshots every kvSnapshotEveryS)",
  oracle:
    'spillway-precise with every KV event applied the instant the server emits it, to every EPP (a router that knows every cache exactly)',
};

/** The kinds that tokenize requests and fold KV events into the precise block index. */
export const PRECISE_KINDS: readonly StrategyKind[] = ['spillway-precise', 'oracle'];

export interface StrategySpec {
  /** Label in reports (a variant may reuse a kind under another name, e.g. `spillway-q2`). */
  readonly name: string;
  readonly kind: StrategyKind;
  /** Scheduler config overrides from the file (the variant's own, then `config.<name>`). */
  readonly config: Readonly<Record<string, unknown>>;
  /** The variant's own `sharing`, over the scenario's `epps.sharing`. */
  readonly sharing?: boolean | undefined;
}

/** The kinds whose EPPs run Spillway's scheduler per zone, and so can share state with each other. */
export const SHARING_KINDS: readonly StrategyKind[] = ['spillway', 'zone-local', 'spillway-precise', 'oracle'];

/** Whether a strategy's EPPs share state in a scenario whose `epps.sharing` is `scenarioSharing`. */
export function sharesState(spec: StrategySpec, scenarioSharing: boolean): boolean {
  return SHARING_KINDS.includes(spec.kind) && (spec.sharing ?? scenarioSharing);
}

/** What a strategy's scheduler config may depend on besides the file's overrides. */
export interface StrategyContext {
  readonly zones: readonly { readonly zone: string; readonly region: string }[];
  /** Round trips between zones (ms), `rttMs[from][to]`, in the order of `zones`. */
  readonly rttMs: readonly (readonly number[])[];
}

/**
 * THE place a strategy's scheduler config comes from: its kind's settings, then the file's
 * overrides (deep-merged one level). Spillway is handed the scenario's round trips the way an
 * operator would configure them (`network.rttMs` per zone pair); the reference gets the weighted
 * policy, the reference EPP's scoring.
 */
export function schedulerConfigFor(spec: StrategySpec, context: StrategyContext): SchedulerConfigInput {
  return mergeLayers(kindDefaults(spec.kind, context), spec.config);
}

function kindDefaults(kind: StrategyKind, context: StrategyContext): SchedulerConfigInput {
  switch (kind) {
    case 'spillway':
    case 'spillway-precise':
    case 'oracle':
      return { subsetMode: 'locality', network: { rttMs: rttTable(context) } };
    case 'zone-local':
      return { subsetMode: 'strict', crossZoneFallbacks: 0 };
    case 'reference':
      // The weighted policy's default weights are the reference EPP's profile (queue 2, KV 2, prefix 3).
      return { policy: 'weighted' };
    default:
      return {};
  }
}

/** The scenario's round trips as the scheduler's `network.rttMs` (zone -> zone -> ms). */
function rttTable(context: StrategyContext): Record<string, Record<string, number>> {
  const table: Record<string, Record<string, number>> = {};
  context.zones.forEach((from, i) => {
    const row: Record<string, number> = {};
    context.zones.forEach((to, j) => {
      if (i !== j) row[to.zone] = context.rttMs[i]?.[j] ?? 0;
    });
    table[from.zone] = row;
  });
  return table;
}

function mergeLayers(...layers: readonly Readonly<Record<string, unknown>>[]): SchedulerConfigInput {
  const out: Record<string, unknown> = {};
  for (const layer of layers) {
    for (const [k, v] of Object.entries(layer)) {
      const prev = out[k];
      out[k] = isObject(prev) && isObject(v) ? { ...prev, ...v } : v;
    }
  }
  return out as SchedulerConfigInput;
}

function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

/** Resolves the file's strategy list into specs with their overrides. */
export function strategySpecs(
  entries: readonly (
    StrategyKind | { name: string; kind: StrategyKind; config?: Record<string, unknown> | undefined; sharing?: boolean | undefined }
  )[],
  overrides: Readonly<Record<string, Record<string, unknown>>>,
): StrategySpec[] {
  return entries.map((entry) => {
    const base =
      typeof entry === 'string'
        ? { name: entry, kind: entry, config: {}, sharing: undefined }
        : { name: entry.name, kind: entry.kind, config: entry.config ?? {}, sharing: entry.sharing };
    return {
      name: base.name,
      kind: base.kind,
      config: mergeLayers(base.config, overrides[base.name] ?? {}),
      ...(base.sharing === undefined ? {} : { sharing: base.sharing }),
    };
  });
}
