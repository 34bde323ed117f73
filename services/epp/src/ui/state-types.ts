/**
 * The shape of `GET /api/state` (docs/ui.md): what the view's page reads every second. Types only,
 * with no imports, so the page's own build (services/epp/web) can check itself against them.
 * Times are milliseconds; `null` where there is nothing to report (JSON has no undefined).
 */
export interface UiState {
  /** Bumped on an incompatible change of this shape. */
  readonly version: 1;
  /** When the state was taken (ms since the epoch, the EPP's clock). */
  readonly at: number;
  readonly pool: string;
  /** This EPP's zone and region: its gateways' zone, the local zone of its picks. */
  readonly zone: string;
  readonly region: string | null;
  readonly policy: 'cost' | 'weighted';
  /** The EPP reports ready (its first replay caught up). */
  readonly ready: boolean;
  /** Metrics older than this are stale. */
  readonly staleAfterMs: number;
  readonly zones: UiZone[];
  /** More zones than the state lists (the first `zones.length` by name are). */
  readonly zonesTruncated: boolean;
  readonly pods: UiPodPage;
  readonly spill: UiSpill;
  readonly decisions: readonly UiDecision[];
  readonly stream: UiStream;
  /** Flow control's queue (docs/flow-control.md); held counts stay 0 while it is off. */
  readonly flowControl: UiFlowControl;
}

export interface UiFlowControl {
  readonly enabled: boolean;
  /** Requests held now, their bytes, and the flows (band, fairness id) they are in. */
  readonly held: number;
  readonly bytes: number;
  readonly flows: number;
  readonly maxHeldRequests: number;
  readonly maxHeldBytes: number;
  readonly maxHoldMs: number;
  /** Held requests per band, highest priority first. */
  readonly bands: readonly { readonly priority: number; readonly requests: number; readonly bytes: number; readonly flows: number }[];
}

export interface UiZone {
  readonly zone: string;
  readonly region: string | null;
  /** This EPP's own zone. */
  readonly local: boolean;
  /** Routable pods, and every pod not deleted (ready or not, with or without an address). */
  readonly ready: number;
  readonly total: number;
  /** Sums over the zone's ready pods' latest samples. */
  readonly waiting: number;
  readonly running: number;
  /** Mean KV-cache use (0..1) of its ready pods with a sample; null when none has one. */
  readonly meanKvCacheUsage: number | null;
  /** Requests this EPP picked into the zone per second, over the last 10 s. */
  readonly pickedPerS: number;
  /** Requests picked into the zone in each of the last 60 s, oldest first (the last second is partial). */
  readonly pickedSeries: number[];
  /** Lowest expected wait of the zone's eligible ready pods (cost model, before a prompt is known); null when none is eligible. */
  readonly expectedWaitMs: number | null;
  /** Lowest request-independent cost from this EPP (wait + round trip + zone bias + uncertainty); null when none is eligible. */
  readonly costMs: number | null;
  /** Ready pods with stale metrics, penalised or silent, past a hard limit (full). */
  readonly stale: number;
  readonly penalised: number;
  readonly full: number;
}

export interface UiPod {
  readonly pod: string;
  readonly zone: string;
  readonly region: string | null;
  /** `ip:port`; null while only metrics were seen. */
  readonly address: string | null;
  readonly ready: boolean;
  /** The latest sample's figures; null without a sample. */
  readonly waiting: number | null;
  readonly running: number | null;
  readonly kvCacheUsage: number | null;
  readonly metricsAgeMs: number | null;
  /**
   * Requests charged to the pod (this EPP's, and its peers' with sharing) whose charge has not
   * ended: picked and not released, or started and not yet completed, accounted for by a sample
   * or past their bound.
   */
  readonly inFlight: number;
  /** Of `inFlight`, those whose response has begun (they outlive their ext_proc streams). */
  readonly started: number;
  /** How many requests the pod runs at once, learnt from samples taken while its queue persisted; null until seen full. */
  readonly batchSize: number | null;
  /** Passive-health penalty left (0 when none). */
  readonly penaltyLeftMs: number;
  /** Readiness not re-published while its zone-mates' was: left out of picks like a penalised pod. */
  readonly silent: boolean;
  /** No sample within the staleness limit; suspect: stale while its zone-mates' samples arrive. */
  readonly stale: boolean;
  readonly suspect: boolean;
  /** Past a hard limit (KV cache full with a queue, or the queue at its limit). */
  readonly full: boolean;
  /** The cost model's expected wait and request-independent cost from this EPP; null for pods not ready. */
  readonly expectedWaitMs: number | null;
  readonly costMs: number | null;
}

/** Pod columns `?sort=` accepts. */
export type UiPodSortKey =
  | 'zone'
  | 'pod'
  | 'address'
  | 'ready'
  | 'waiting'
  | 'running'
  | 'kvCacheUsage'
  | 'metricsAgeMs'
  | 'inFlight'
  | 'started'
  | 'penaltyLeftMs'
  | 'expectedWaitMs'
  | 'costMs'
  | 'state';

export interface UiPodPage {
  /** Pods of the pool not deleted; `items` is the page `offset .. offset + limit` of them in `sort` order. */
  readonly total: number;
  readonly offset: number;
  readonly limit: number;
  readonly sort: UiPodSortKey;
  readonly order: 'asc' | 'desc';
  /** True when pods exist beyond this page. */
  readonly truncated: boolean;
  readonly items: UiPod[];
}

export interface UiSpill {
  /** Seconds the rates average over: the last minute, or the EPP's uptime when shorter. */
  readonly windowS: number;
  /** Gateway zones (rows) and serving zones (columns) alike, in the order first counted. */
  readonly zones: string[];
  /** perS[from][to]: requests per second from gateway zone `zones[from]` to serving zone `zones[to]`. */
  readonly perS: number[][];
}

export interface UiCost {
  readonly totalMs: number;
  readonly waitMs: number;
  readonly prefillMs: number;
  readonly loraMs: number;
  readonly rttMs: number;
  readonly biasMs: number;
  readonly displacementMs: number;
  readonly uncertaintyMs: number;
  /** What the components were computed from (docs/picking.md, "What each decision shows"). */
  readonly stepMs: number;
  readonly stepTrust: number;
  readonly running: number;
  readonly slots: number;
  readonly kvUse: number;
  readonly aheadMs: number;
  readonly aheadTokens: number;
  readonly prefillMsPerToken: number;
  readonly zoneUse: number;
  readonly cachedTokens: number;
  readonly stale: boolean;
  readonly suspect: boolean;
  readonly full: boolean;
  readonly excluded: boolean;
}

export interface UiScore {
  readonly score: number;
  readonly saturated: boolean;
  readonly stale: boolean;
  readonly suspect: boolean;
  readonly excluded: boolean;
}

/** One of the last decisions, as `GET /debug/decisions` gives it. */
export interface UiDecision {
  readonly at: number;
  readonly status: 'routed' | 429 | 503;
  readonly rule: string;
  readonly policy: 'cost' | 'weighted';
  readonly priority: number;
  readonly destination: string;
  readonly prefixBlocks: number;
  readonly prefixMatched: number;
  readonly counts: UiDecisionCounts;
  readonly entries: readonly UiDecisionEntry[];
}

export interface UiDecisionEntry {
  readonly address: string;
  readonly pod: string;
  readonly zone?: string;
  readonly reason: string;
  readonly full: boolean;
  readonly cost: UiCost | UiScore;
}

/** What a pick looked at (see docs/picking.md). */
export interface UiDecisionCounts {
  readonly eligible: number;
  readonly eligibleLocal: number;
  readonly examined: number;
  readonly full: number;
  readonly subsetEntries: number;
  readonly subsetIgnored: number;
  readonly subsetUnmatched: number;
  readonly penalised: number;
}

export interface UiStream {
  /** `not-started` until the first connection to NATS. */
  readonly connection: 'connected' | 'disconnected' | 'reconnecting' | 'closed' | 'not-started';
  readonly caughtUp: boolean;
  /** How long the view may have been missing events (null while live). */
  readonly staleForMs: number | null;
  /** Since the last event was handled (null before any). */
  readonly lastEventAgeMs: number | null;
  /** Messages the stream held beyond the last one handled, when it was handled. */
  readonly pending: number;
  /** How long the last event waited in the stream before this EPP handled it. */
  readonly lastDelayMs: number | null;
  readonly received: number;
  readonly reconnects: number;
  readonly consumerRestarts: number;
  /** Messages that never reached the view, by reason (malformed, dated in the future, over capacity, ...). */
  readonly rejected: number;
  readonly rejectedByReason: Record<string, number>;
  /** The view's own counts: events applied, ignored as older than what it holds. */
  readonly applied: number;
  readonly ignored: number;
}
