import { z } from 'zod';
import type { ReaderStatus } from '@spillway/bus';
import type { Fleet, PoolView } from '@spillway/fleet';
import type { Scheduler } from '@spillway/scheduler';
import type { FlowControl } from '../request/flow-control.js';
import type { DecisionLog } from '../telemetry/decision-log.js';
import type { SpillMatrix, SpillSnapshot } from '../telemetry/spill-matrix.js';
import type { UiFlowControl, UiPod, UiPodSortKey, UiSpill, UiState, UiStream, UiZone } from './state-types.js';
import { podOrder, podView } from './pods.js';

/** What the state is read from: the EPP's view, its scheduler, and its own records. */
export interface StateSources {
  readonly fleet: Fleet;
  readonly scheduler: Scheduler;
  readonly decisions: DecisionLog;
  readonly spill: SpillMatrix;
  isReady(): boolean;
  /** The event reader's status; undefined until NATS was first reached. */
  readerStatus(): ReaderStatus | undefined;
  /** Flow control's queue. */
  readonly flow: FlowControl;
}

/** Pods per page: the default, and the most `?limit` may ask for (the response stays well under a megabyte). */
export const DEFAULT_POD_LIMIT = 200;
export const MAX_POD_LIMIT = 1000;
/** Zones listed at most (by name); per-zone publish rights bound them, this bounds the response all the same. */
export const MAX_ZONES = 256;
/** Decisions listed by default. */
export const DEFAULT_DECISIONS = 20;
/** The seconds `pickedPerS` averages over. */
const RECENT_S = 10;

const SORT_KEYS = [
  'zone',
  'pod',
  'address',
  'ready',
  'waiting',
  'running',
  'kvCacheUsage',
  'metricsAgeMs',
  'inFlight',
  'started',
  'penaltyLeftMs',
  'expectedWaitMs',
  'costMs',
  'state',
] as const satisfies readonly UiPodSortKey[];

/** The query of `GET /api/state`; unknown parameters are ignored, bad values are a 400. */
export function stateQuerySchema(maxDecisions: number) {
  return z.object({
    limit: z.coerce.number().int().min(0).max(MAX_POD_LIMIT).default(DEFAULT_POD_LIMIT),
    offset: z.coerce.number().int().min(0).max(Number.MAX_SAFE_INTEGER).default(0),
    sort: z.enum(SORT_KEYS).default('zone'),
    order: z.enum(['asc', 'desc']).default('asc'),
    decisions: z.coerce.number().int().min(0).max(maxDecisions).default(Math.min(DEFAULT_DECISIONS, maxDecisions)),
  });
}

export type StateQuery = z.output<ReturnType<typeof stateQuerySchema>>;

/** Parses a query string with a schema from stateQuerySchema; an error names the parameter at fault. */
export function parseStateQuery(
  params: URLSearchParams,
  schema: ReturnType<typeof stateQuerySchema>,
): { ok: true; query: StateQuery } | { ok: false; error: string } {
  const parsed = schema.safeParse(Object.fromEntries(params));
  if (parsed.success) return { ok: true, query: parsed.data };
  const issue = parsed.error.issues[0];
  return { ok: false, error: `${issue?.path.join('.') || 'query'}: ${issue?.message ?? 'invalid'}` };
}

/** Everything the view shows, at `now`. O(pods of the pool): computed when asked, never on the request path. */
export function buildState(sources: StateSources, query: StateQuery, now: number): UiState {
  const { fleet, scheduler } = sources;
  const pool = fleet.pool(scheduler.pool);
  const spill = sources.spill.snapshot(now);
  const pods: UiPod[] = [];
  const zones = new Map<string, ZoneTotals>();
  if (pool) {
    for (const endpoint of pool.endpoints()) {
      if (endpoint.deleted) continue;
      const pod = podView(endpoint, scheduler.explain(endpoint, now), now);
      pods.push(pod);
      addToZone(zones, pod);
    }
  }
  pods.sort(podOrder(query.sort, query.order));
  const zoneNames = [...zones.keys()].sort();
  return {
    version: 1,
    at: now,
    pool: scheduler.pool,
    zone: scheduler.zone,
    region: scheduler.region ?? null,
    policy: scheduler.config.policy,
    ready: sources.isReady(),
    staleAfterMs: fleet.staleAfterMs,
    zones: zoneNames
      .slice(0, MAX_ZONES)
      .map((name) =>
        zoneView(name, zones.get(name) as ZoneTotals, { pool, localZone: scheduler.zone, spill, window: sources.spill.window }),
      ),
    zonesTruncated: zoneNames.length > MAX_ZONES,
    pods: {
      total: pods.length,
      offset: query.offset,
      limit: query.limit,
      sort: query.sort,
      order: query.order,
      truncated: query.offset + query.limit < pods.length,
      items: pods.slice(query.offset, query.offset + query.limit),
    },
    spill: { windowS: round(spill.windowS), zones: [...spill.zones], perS: spill.perS.map((row) => row.map(round)) } satisfies UiSpill,
    decisions: sources.decisions.recent(query.decisions),
    stream: streamView(sources.readerStatus(), fleet, now),
    flowControl: flowView(sources.flow, scheduler),
  };
}

function flowView(flow: FlowControl, scheduler: Scheduler): UiFlowControl {
  const config = scheduler.config.flowControl;
  return {
    enabled: flow.enabled,
    held: flow.size,
    bytes: flow.bytes,
    flows: flow.flows,
    maxHeldRequests: config.maxHeldRequests,
    maxHeldBytes: config.maxHeldBytes,
    maxHoldMs: config.maxHoldMs,
    bands: flow.bandStats(),
  };
}

interface ZoneTotals {
  ready: number;
  total: number;
  waiting: number;
  running: number;
  kvSum: number;
  withMetrics: number;
  expectedWaitMs: number | null;
  costMs: number | null;
  stale: number;
  penalised: number;
  full: number;
}

function addToZone(zones: Map<string, ZoneTotals>, pod: UiPod): void {
  let totals = zones.get(pod.zone);
  if (totals === undefined) {
    totals = {
      ready: 0,
      total: 0,
      waiting: 0,
      running: 0,
      kvSum: 0,
      withMetrics: 0,
      expectedWaitMs: null,
      costMs: null,
      stale: 0,
      penalised: 0,
      full: 0,
    };
    zones.set(pod.zone, totals);
  }
  totals.total++;
  if (!pod.ready) return;
  totals.ready++;
  if (pod.waiting !== null && pod.running !== null && pod.kvCacheUsage !== null) {
    totals.waiting += pod.waiting;
    totals.running += pod.running;
    totals.kvSum += pod.kvCacheUsage;
    totals.withMetrics++;
  }
  if (pod.stale) totals.stale++;
  if (pod.full) totals.full++;
  const excluded = pod.penaltyLeftMs > 0 || pod.silent;
  if (excluded) totals.penalised++;
  // Where the next request would go in this zone: the cheapest pod a pick may choose.
  else if (pod.expectedWaitMs !== null && pod.costMs !== null) {
    if (totals.expectedWaitMs === null || pod.expectedWaitMs < totals.expectedWaitMs) totals.expectedWaitMs = pod.expectedWaitMs;
    if (totals.costMs === null || pod.costMs < totals.costMs) totals.costMs = pod.costMs;
  }
}

/** What every zone's row is read against: the pool, this EPP's zone, and the picks by zone. */
interface ZoneContext {
  readonly pool: PoolView | undefined;
  readonly localZone: string;
  readonly spill: SpillSnapshot;
  /** Seconds in the spill matrix's window. */
  readonly window: number;
}

function zoneView(name: string, totals: ZoneTotals, { pool, localZone, spill, window }: ZoneContext): UiZone {
  const picked = spill.series[spill.zones.indexOf(name)];
  const series = picked === undefined ? new Array<number>(window).fill(0) : [...picked];
  const recent = series.slice(-RECENT_S).reduce((sum, count) => sum + count, 0);
  return {
    zone: name,
    region: pool?.regionOf(name) ?? null,
    local: name === localZone,
    ready: totals.ready,
    total: totals.total,
    waiting: totals.waiting,
    running: totals.running,
    meanKvCacheUsage: totals.withMetrics === 0 ? null : round(totals.kvSum / totals.withMetrics, 4),
    pickedPerS: round(recent / Math.min(RECENT_S, spill.windowS)),
    pickedSeries: series,
    expectedWaitMs: totals.expectedWaitMs,
    costMs: totals.costMs,
    stale: totals.stale,
    penalised: totals.penalised,
    full: totals.full,
  };
}

function streamView(status: ReaderStatus | undefined, fleet: Fleet, now: number): UiStream {
  const counters = fleet.counters;
  return {
    connection: status?.connection ?? 'not-started',
    caughtUp: status?.caughtUp ?? false,
    staleForMs: status?.staleSince === undefined ? null : Math.max(0, now - status.staleSince),
    lastEventAgeMs: status?.lastReceivedAt === undefined ? null : Math.max(0, now - status.lastReceivedAt),
    pending: status?.pending ?? 0,
    lastDelayMs: status?.lastDelayMs ?? null,
    received: status?.received ?? 0,
    reconnects: status?.reconnects ?? 0,
    consumerRestarts: status?.consumerRestarts ?? 0,
    rejected: status?.rejected ?? 0,
    rejectedByReason: { ...(status?.rejectedByReason ?? {}) },
    applied: counters.applied,
    ignored: counters.ignored,
  };
}

function round(value: number, digits = 2): number {
  const scale = 10 ** digits;
  return Math.round(value * scale) / scale;
}
