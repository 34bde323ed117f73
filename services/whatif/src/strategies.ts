import { schedulerConfigSchema, type SchedulerConfigInput } from '@spillway/scheduler';
import type { KvReplayMode } from './kv-relay.js';

/**
 * The routing strategies a scenario compares. Each baseline runs as it would be deployed, on its
 * own signal path (docs/whatif.md, "The strategies"); the Spillway kinds run the production
 * `@spillway/scheduler`.
 */
export const STRATEGY_KINDS = [
  'random',
  'round-robin',
  'least-queue',
  'reference',
  'reference-plus',
  'reference-zonal',
  'reference-regional',
  'envoy-load-aware',
  'llm-d-topology',
  'zone-local',
  'spillway',
  'spillway-fc',
  'spillway-precise',
  'oracle',
] as const;
export type StrategyKind = (typeof STRATEGY_KINDS)[number];

/** The zone-unaware strategies (the latency / cross-zone curve is compared with the best of them). */
export const ZONE_UNAWARE: readonly StrategyKind[] = ['random', 'round-robin', 'least-queue', 'reference', 'reference-plus'];

/** What each baseline is, for the report header and the docs. */
export const STRATEGY_DESCRIPTIONS: Readonly<Record<StrategyKind, string>> = {
  random: 'each gateway picks uniformly over every ready replica of the pool (zone-unaware)',
  'round-robin': 'each gateway cycles over every ready replica of the pool (zone-unaware)',
  'least-queue':
    "per-zone EPPs fed by the collectors' events: lowest waiting + running of the latest sample plus this EPP's picks since, over the whole pool (zone-unaware)",
  reference:
    "the Gateway API Inference Extension's EPP (now in llm-d) as deployed: ONE pool-wide picker in epps.referenceZone that every gateway asks (paying the round trip), " +
    'scraping every pod directly every scrapeEveryMs, no accounting of its own picks between scrapes, queue 2 / KV 2 / prefix 3 (its approximate prefix LRU), ' +
    'one endpoint per answer, its saturation rule for sheddable requests (zone-unaware)',
  'reference-plus': 'reference, plus in-flight accounting of its own picks between scrapes (an upper bound for it; zone-unaware)',
  'reference-zonal':
    "one reference EPP per zone picking among its zone's pods; the gateway fails over to other zones' EPPs by Envoy priorities (same region first) only when its zone's pool is saturated",
  'reference-regional':
    "one reference EPP per region picking among its region's pods (zone-unaware within it); the gateway fails over to other regions only when its region's pool is saturated",
  'envoy-load-aware':
    "no EPP: each gateway's Envoy load_aware_locality policy (zone weights from ORCA utilisation reports in responses, EWMA smoothing, local preference, 3 % probe, all-overloaded fallback) over least-request",
  'llm-d-topology':
    'an llm-d EPP per zone scraping the whole pool: the reference scorers plus a zone topology scorer outweighing them, behind the utilisation capacity filter, so a request leaves its zone only when the filter drops every local pod',
  'zone-local': "Spillway's scheduler in strict mode with the gateway's zone-local subset: never leaves the zone",
  spillway: "Spillway's scheduler in locality mode with the gateway's zone-local subset: spills to other zones by its rules",
  'spillway-fc':
    'spillway with flow control: a request no endpoint has room for is held at its EPP (priority bands, round robin across fairness ids, FCFS within one) and dispatched when a sample, a completion or a peer shows room',
  'spillway-precise':
    "spillway, with the precise block index: the requests' token ids and every replica's KV events (relayed in batches with delay and loss, snapshots every kvSnapshotEveryS)",
  oracle:
    'spillway-precise with every KV event applied the instant the server emits it, to every EPP (a router that knows every cache exactly)',
};

/** Where a strategy's pickers run. */
export type Placement =
  /** In each gateway: no EPP, no round trip. */
  | 'gateway'
  /** One EPP per zone (`epps.perZone` of them for the Spillway kinds). */
  | 'zone'
  /** One EPP for the whole pool, in `epps.referenceZone`. */
  | 'pool'
  /** One EPP per region, in the region's first zone. */
  | 'region';

/** How a strategy's pickers learn the replicas' load. */
export type SignalPath =
  /** Nothing: the gateways' view of which replicas are ready. */
  | 'none'
  /** The zone collectors' events over NATS (Spillway's path). */
  | 'nats'
  /** Each picker scrapes the pods it picks among directly. */
  | 'scrape'
  /** ORCA load reports in the responses a gateway receives. */
  | 'orca';

export interface Deployment {
  readonly placement: Placement;
  readonly signals: SignalPath;
  /** The replicas each picker picks among (before any subset): every replica, or its own zone's or region's. */
  readonly scope: 'pool' | 'zone' | 'region';
  /** A gateway asks the EPPs of other zones (regions) only when its own pool is saturated (Envoy priorities). */
  readonly failover: boolean;
  /**
   * Where the gateway's own fallback (after the list) may send a request: the whole pool (Envoy's
   * fallback over the pool's cluster), the answering EPP's pool (one cluster per zone or region), or
   * the gateway's zone (a zone-local deployment).
   */
  readonly fallback: 'pool' | 'scope' | 'gateway-zone';
}

const atGateway = (signals: SignalPath): Deployment => ({
  placement: 'gateway',
  signals,
  scope: 'pool',
  failover: false,
  fallback: 'pool',
});
const perZone = (signals: SignalPath): Deployment => ({ placement: 'zone', signals, scope: 'pool', failover: false, fallback: 'pool' });

export const DEPLOYMENTS: Readonly<Record<StrategyKind, Deployment>> = {
  random: atGateway('none'),
  'round-robin': atGateway('none'),
  'least-queue': perZone('nats'),
  reference: { placement: 'pool', signals: 'scrape', scope: 'pool', failover: false, fallback: 'pool' },
  'reference-plus': { placement: 'pool', signals: 'scrape', scope: 'pool', failover: false, fallback: 'pool' },
  'reference-zonal': { placement: 'zone', signals: 'scrape', scope: 'zone', failover: true, fallback: 'scope' },
  'reference-regional': { placement: 'region', signals: 'scrape', scope: 'region', failover: true, fallback: 'scope' },
  'envoy-load-aware': atGateway('orca'),
  'llm-d-topology': perZone('scrape'),
  'zone-local': { ...perZone('nats'), fallback: 'gateway-zone' },
  spillway: perZone('nats'),
  'spillway-fc': perZone('nats'),
  'spillway-precise': perZone('nats'),
  oracle: perZone('nats'),
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
  /** The variant's own `responseBody`, over the scenario's `epps.responseBody`. */
  readonly responseBody?: ResponseBodyMode | undefined;
  /** The variant's own `kvReplay`, over the scenario's `signals.kvReplay`. */
  readonly kvReplay?: KvReplayMode | undefined;
  /** A point of a sweep: the strategy it varies, and the config field and value it sets. */
  readonly sweep?: { readonly of: string; readonly field: string; readonly value: number } | undefined;
}

/** The kinds a sweep varies: Spillway's cost policy, where the swept fields act. */
export const SWEPT_KINDS: readonly StrategyKind[] = ['spillway', 'spillway-fc', 'spillway-precise', 'oracle'];

/**
 * A sweep's points: after each Spillway strategy listed by its kind, one variant per value
 * (`spillway zoneBiasMs=4`) with the field set in its config. The other strategies run once: their points stand beside the curve.
 */
export function withSweep(specs: readonly StrategySpec[], sweep: Readonly<Record<string, readonly number[]>> | undefined): StrategySpec[] {
  const entry = sweep ? Object.entries(sweep)[0] : undefined;
  if (!entry) return [...specs];
  const [field, values] = entry;
  return specs.flatMap((spec) => {
    // Named variants (`spillway-unshared`, ...) are points of their own, not swept.
    if (!SWEPT_KINDS.includes(spec.kind) || spec.name !== spec.kind || spec.sweep) return [spec];
    // The strategy's own value is one of the points: it runs once, as itself.
    const own = (schedulerConfigSchema.parse(spec.config) as Record<string, unknown>)[field];
    const base = typeof own === 'number' && values.includes(own) ? { ...spec, sweep: { of: spec.name, field, value: own } } : spec;
    const points = values
      .filter((value) => value !== own)
      .map((value) => ({
        ...spec,
        name: `${spec.name} ${field}=${value}`,
        config: mergeLayers(spec.config, { [field]: value }),
        sweep: { of: spec.name, field, value },
      }));
    return [base, ...points];
  });
}

/** The kinds whose EPPs run Spillway's scheduler per zone, and so can share state with each other. */
export const SHARING_KINDS: readonly StrategyKind[] = ['spillway', 'spillway-fc', 'zone-local', 'spillway-precise', 'oracle'];

/**
 * What the gateway sends an EPP of a response (ext_proc `response_body_mode`): `none` (the shipped
 * Envoy config: headers only, no completion seen) or `full-duplex` (the body, so the last token).
 */
export const RESPONSE_BODY_MODES = ['none', 'full-duplex'] as const;
export type ResponseBodyMode = (typeof RESPONSE_BODY_MODES)[number];

/** Whether a strategy's EPPs see a request's completion (its response body streams through them). */
export function seesCompletion(spec: StrategySpec, scenarioMode: ResponseBodyMode): boolean {
  return (spec.responseBody ?? scenarioMode) === 'full-duplex';
}

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
 * operator would configure them (`network.rttMs` per zone pair). The baselines that are not
 * Spillway's scheduler have no scheduler config.
 */
export function schedulerConfigFor(spec: StrategySpec, context: StrategyContext): SchedulerConfigInput {
  return mergeLayers(kindDefaults(spec.kind, context), spec.config);
}

function kindDefaults(kind: StrategyKind, context: StrategyContext): SchedulerConfigInput {
  switch (kind) {
    // Flow control is on by default in the EPP; only spillway-fc runs it (its router holds requests).
    case 'spillway':
    case 'spillway-precise':
    case 'oracle':
      return { subsetMode: 'locality', network: { rttMs: rttTable(context) }, flowControl: { enabled: false } };
    case 'spillway-fc':
      return { subsetMode: 'locality', network: { rttMs: rttTable(context) }, flowControl: { enabled: true } };
    case 'zone-local':
      return { subsetMode: 'strict', crossZoneFallbacks: 0, flowControl: { enabled: false } };
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
    | StrategyKind
    | {
        name: string;
        kind: StrategyKind;
        config?: Record<string, unknown> | undefined;
        sharing?: boolean | undefined;
        responseBody?: ResponseBodyMode | undefined;
        kvReplay?: KvReplayMode | undefined;
      }
  )[],
  overrides: Readonly<Record<string, Record<string, unknown>>>,
): StrategySpec[] {
  return entries.map((entry) => {
    const base =
      typeof entry === 'string'
        ? { name: entry, kind: entry, config: {}, sharing: undefined, responseBody: undefined, kvReplay: undefined }
        : {
            name: entry.name,
            kind: entry.kind,
            config: entry.config ?? {},
            sharing: entry.sharing,
            responseBody: entry.responseBody,
            kvReplay: entry.kvReplay,
          };
    return {
      name: base.name,
      kind: base.kind,
      config: mergeLayers(base.config, overrides[base.name] ?? {}),
      ...(base.sharing === undefined ? {} : { sharing: base.sharing }),
      ...(base.responseBody === undefined ? {} : { responseBody: base.responseBody }),
      ...(base.kvReplay === undefined ? {} : { kvReplay: base.kvReplay }),
    };
  });
}
