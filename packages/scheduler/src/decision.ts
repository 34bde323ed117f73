import type { Endpoint } from '@spillway/fleet';

/**
 * Why an endpoint is in the list:
 * - `local-best`: primary, the best unsaturated endpoint of the EPP's zone.
 * - `local`: a further unsaturated local endpoint.
 * - `local-saturated`: a saturated local endpoint filling a slot nothing unsaturated could fill.
 * - `cross-zone-fallback`: an unsaturated remote endpoint in the last slots, so a retry can leave the zone.
 * - `spill`: an unsaturated remote endpoint chosen because the local zone is overloaded.
 * - `local-fallback`: the best local endpoint, kept in the last slot while spilling.
 * - `last-resort`: nothing eligible is unsaturated and the request is not sheddable.
 */
export type EntryReason = 'local-best' | 'local' | 'local-saturated' | 'cross-zone-fallback' | 'spill' | 'local-fallback' | 'last-resort';

/**
 * Which rule produced the outcome (for logs and a metric label):
 * - `local`: the local zone had room (DESIGN §5 step 3).
 * - `spill`: the local zone was overloaded and the list widened (step 4).
 * - `last-resort`: everything eligible was saturated; a non-sheddable request stays local (step 5).
 * - `shed`: 429, everything eligible saturated and the request sheddable (step 5).
 * - `unknown-pool`, `no-ready-endpoints`, `empty-subset`, `subset-unmatched`: 503, nothing eligible
 *   (step 1) — no pool, no ready (unpenalised) pod, an empty subset, or a subset matching none.
 */
export type DecisionRule =
  | 'local'
  | 'spill'
  | 'last-resort'
  | 'shed'
  | 'unknown-pool'
  | 'no-ready-endpoints'
  | 'empty-subset'
  | 'subset-unmatched';

export type DecisionStatus = 'routed' | 429 | 503;

export interface DecisionEntry {
  readonly endpoint: Endpoint;
  /** Canonical `ip:port` (IPv6 bracketed), as written into the destination header. */
  readonly address: string;
  readonly zone: string | undefined;
  readonly reason: EntryReason;
  /** Weighted score within its group (local, or remote). */
  readonly score: number;
  readonly saturated: boolean;
}

export interface DecisionCounts {
  /** Eligible endpoints (ready, not penalised, allowed by the subset mode). */
  readonly eligible: number;
  readonly eligibleLocal: number;
  /** Endpoints whose saturation was checked for this pick (the whole candidate set with a strict subset; the shortlist otherwise). */
  readonly examined: number;
  /** Saturated among the examined. */
  readonly saturated: number;
  /** Subset entries received, malformed ones ignored, well-formed ones matching no routable endpoint. */
  readonly subsetEntries: number;
  readonly subsetIgnored: number;
  readonly subsetUnmatched: number;
  /** Endpoints left out because they are in passive-health penalty. */
  readonly penalised: number;
}

export interface Decision {
  readonly status: DecisionStatus;
  readonly rule: DecisionRule;
  /** Primary first, at most maxEndpoints, no duplicates; empty unless routed. */
  readonly entries: readonly DecisionEntry[];
  /** `ip:port[,ip:port...]` for the destination header and metadata; '' unless routed. */
  readonly destination: string;
  readonly priority: number;
  readonly sheddable: boolean;
  /** No eligible local endpoint was unsaturated (DESIGN §5 step 2). */
  readonly localOverloaded: boolean;
  /** Penalties were ignored because they alone would have left nothing eligible. */
  readonly penaltiesIgnored: boolean;
  readonly subsetGiven: boolean;
  readonly counts: DecisionCounts;
  /** Prompt blocks hashed, and how many of them the primary was believed to cache. */
  readonly prefixBlocks: number;
  readonly prefixMatched: number;
  readonly at: number;
}

/** The scheduler's own bookkeeping on a decision: what commit charged, for release and reportServed. */
export class DecisionRecord implements Decision {
  /** The endpoint whose in-flight accounting carries this request, and since when. */
  chargedTo: Endpoint | undefined = undefined;
  chargedAt = 0;
  committed = false;
  served: string | undefined = undefined;

  constructor(
    readonly status: DecisionStatus,
    readonly rule: DecisionRule,
    readonly entries: readonly DecisionEntry[],
    readonly destination: string,
    readonly priority: number,
    readonly sheddable: boolean,
    readonly localOverloaded: boolean,
    readonly penaltiesIgnored: boolean,
    readonly subsetGiven: boolean,
    readonly counts: DecisionCounts,
    readonly prefixBlocks: number,
    readonly prefixMatched: number,
    readonly at: number,
    /**
     * The prompt's block hashes, kept for commit to index. A plain array: a Float64Array of more
     * than 8 hashes would get an off-heap backing store, which V8 allocates and frees slowly.
     */
    readonly prefixHashes: readonly number[] | undefined,
  ) {}

  get primary(): Endpoint | undefined {
    return this.entries[0]?.endpoint;
  }
}
