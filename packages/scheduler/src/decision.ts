import { Charge, type ChargeEnd, type Endpoint } from '@spillway/fleet';
import type { CacheIndexSource } from './kv-lookup.js';
import type { GatewayZoneUse } from './origins.js';
import type { EntryCost, EntryScore } from './pricing.js';

/**
 * Why an endpoint is in the list (local: in the zone the request was picked for, `Decision.zone`):
 * - `local-best`: the primary, in the local zone.
 * - `spill`: a remote endpoint ranked among the cheapest (the primary, when the request leaves its zone).
 * - `local`: a further local endpoint, next cheapest.
 * - `cross-zone-fallback`: a remote endpoint while the primary is local, so a retry can leave a failing zone.
 * - `local-fallback`: a local endpoint while the primary is remote, so a spilled request can still come home.
 * - `last-resort`: every eligible endpoint is past a hard limit (full; saturated under the weighted
 *   policy), so the whole list is. An entry past its limit in a list whose primary is not keeps its
 *   position's reason; its `full` flag says so.
 */
export type EntryReason = 'local-best' | 'spill' | 'local' | 'cross-zone-fallback' | 'local-fallback' | 'last-resort';

/**
 * Which rule produced the outcome (for logs and a metric label):
 * - `local`: the cheapest endpoint is in the local zone (`Decision.zone`).
 * - `spill`: the cheapest endpoint is in another zone: the request leaves its zone.
 * - `last-resort`: every eligible endpoint is past a hard limit; a non-sheddable request still goes
 *   to the cheapest (round trip included).
 * - `shed`: 429 for a sheddable request under overload (cost: the lowest expected wait is above
 *   shedAboveMs; weighted: every eligible endpoint saturated).
 * - `unknown-pool`, `no-ready-endpoints`, `empty-subset`, `subset-unmatched`: 503, nothing eligible.
 */
export type DecisionRule =
  'local' | 'spill' | 'last-resort' | 'shed' | 'unknown-pool' | 'no-ready-endpoints' | 'empty-subset' | 'subset-unmatched';

export type DecisionStatus = 'routed' | 429 | 503;

export interface DecisionEntry {
  readonly endpoint: Endpoint;
  /** Canonical `ip:port` (IPv6 bracketed), as written into the destination header. */
  readonly address: string;
  readonly zone: string | undefined;
  readonly reason: EntryReason;
  /** The ranking key (lower is better): milliseconds under the cost policy, plus bands for limits. */
  readonly key: number;
  /** Past a hard limit: full (cost) or saturated (weighted). */
  readonly full: boolean;
  /** The cost components (cost policy) or the weighted score (weighted policy). */
  readonly cost: EntryCost | EntryScore;
}

export interface DecisionCounts {
  /** Eligible endpoints (ready, not penalised, not silent, allowed by the subset mode). */
  readonly eligible: number;
  readonly eligibleLocal: number;
  /** Endpoints priced for this pick (every candidate with a strict subset; the remote shortlist otherwise). */
  readonly examined: number;
  /** Past a hard limit among the examined. */
  readonly full: number;
  /** Subset entries received, malformed ones ignored, well-formed ones matching no routable endpoint. */
  readonly subsetEntries: number;
  readonly subsetIgnored: number;
  readonly subsetUnmatched: number;
  /** Routable endpoints left out for a passive-health penalty or a readiness silence. */
  readonly penalised: number;
  /**
   * Of those, local endpoints listed all the same, ranked after every other candidate: penalties
   * (or silences) had excluded every endpoint of the local zone while others were eligible.
   */
  readonly localKept: number;
}

export interface Decision {
  readonly status: DecisionStatus;
  readonly rule: DecisionRule;
  /** Primary first, at most maxEndpoints, no duplicate addresses; empty unless routed. */
  readonly entries: readonly DecisionEntry[];
  /** `ip:port[,ip:port...]` for the destination header and metadata; '' unless routed. */
  readonly destination: string;
  readonly priority: number;
  readonly sheddable: boolean;
  /**
   * The zone the request was picked for, its local zone: the gateway's (`x-spillway-gateway-zone`)
   * when it named a zone the pool has a pod in, else the EPP's `--zone`.
   */
  readonly zone: string;
  /**
   * What the gateway said of its zone: `none` (nothing: the EPP's zone), `known` (a zone of the
   * pool: that zone), `unknown` (a zone the pool has no pod in) or `malformed` (not a zone name);
   * the last two are picked for the EPP's zone.
   */
  readonly gatewayZone: GatewayZoneUse;
  /** The request left its zone, or everything eligible was past its limits. */
  readonly localOverloaded: boolean;
  /**
   * Flow control is on and no eligible endpoint has room: holding the request until one has is
   * expected to be faster than any endpoint now (hold.ts). The list is what it would be if sent
   * now; the caller holds the request and picks again when room frees. Always false when off.
   */
  readonly hold: boolean;
  /** Penalties (and readiness silences) were ignored because they alone would have left nothing eligible. */
  readonly penaltiesIgnored: boolean;
  readonly subsetGiven: boolean;
  readonly counts: DecisionCounts;
  /** Prompt blocks hashed, and how many of them the primary was believed to cache. */
  readonly prefixBlocks: number;
  readonly prefixMatched: number;
  /** Which index priced the primary's cached prefix, and the tokens the precise index says it caches (0 when the approximate index alone priced it). */
  readonly prefixSource: CacheIndexSource;
  readonly kvMatchedTokens: number;
  readonly policy: 'cost' | 'weighted';
  readonly at: number;
  /** The request's id as the gateway gave it (`x-request-id`, at most MAX_REQUEST_ID_CHARS), so a decision can be matched to its request. */
  readonly requestId: string | undefined;
  /**
   * The first subset entries (canonical, at most 8; `counts.subsetUnmatched` counts them all) that
   * name no routable pod: a stale hint, typically pods rescheduled, which in locality mode sends
   * the zone's traffic elsewhere. Empty without a subset.
   */
  readonly subsetUnmatchedEntries: readonly string[];
}

/** Longest request id a decision keeps; a longer one is cut. */
export const MAX_REQUEST_ID_CHARS = 128;

/** What one pick found, whatever it decides. */
export interface PickFacts {
  readonly priority: number;
  readonly sheddable: boolean;
  /** The request's local zone, and what the gateway said of its zone. */
  readonly zone: string;
  readonly gatewayZone: GatewayZoneUse;
  /** Penalties (and readiness silences) were ignored because they alone would have left nothing eligible. */
  readonly penaltiesIgnored: boolean;
  readonly subsetGiven: boolean;
  readonly counts: DecisionCounts;
  /** Prompt blocks hashed. */
  readonly prefixBlocks: number;
  readonly policy: 'cost' | 'weighted';
  readonly at: number;
  /** The gateway's request id, as the request gave it (cut by the scheduler). */
  readonly requestId: string | undefined;
}

/** What the pick decided. */
export interface DecisionVerdict {
  readonly status: DecisionStatus;
  readonly rule: DecisionRule;
  readonly entries: readonly DecisionEntry[];
  readonly destination: string;
  readonly localOverloaded: boolean;
  /** How many of the prompt's blocks the primary was believed to cache. */
  readonly prefixMatched: number;
  /**
   * The prompt's block hashes, kept for commit to index. A plain array: a Float64Array of more
   * than 8 hashes would get an off-heap backing store, which V8 allocates and frees slowly.
   */
  readonly prefixHashes: readonly number[] | undefined;
}

/**
 * Told when a started request's charge ends without a completion the caller reported (by the
 * endpoint's samples, at its bound, at a cap): the EPP's request metrics end there.
 */
export interface ChargeListener {
  chargeEnded(at: number, reason: ChargeEnd): void;
}

/** Where a decision's charge reports an end the fleet settled itself (the scheduler's shared state and the caller's listener). */
export interface ChargeHooks {
  ended(record: DecisionRecord, reason: ChargeEnd, at: number): void;
}

/**
 * A decision's bytes while its request is charged, for the fleet's bound: the record, its list of
 * at most a few entries with their cost components, its request id (prompt blocks are let go once
 * the request has started).
 */
const DECISION_BYTES = 2048;

/**
 * The scheduler's own bookkeeping on a decision: the request's charge (the decision is the charge:
 * the fleet links it into the charged endpoint's list, no object of its own), and what the reports
 * need.
 */
export class DecisionRecord extends Charge implements Decision {
  committed = false;
  /** The request's prompt in tokens (given, or estimated from its text) and the output limit its body set: the charge's bound. */
  promptTokens = 0;
  maxTokens: number | undefined = undefined;
  /** The target model: its configured rates price the bound. */
  model = '';
  /** Told when the charge ends without a completion reported (set when the request starts). */
  listener: ChargeListener | undefined = undefined;
  hooks: ChargeHooks | undefined = undefined;
  /** The served endpoint of the first report; later reports are ignored. */
  served: string | undefined = undefined;
  /** The request's id on the shared-state channel; 0 when it is not shared. */
  shareId = 0;
  prefixSource: CacheIndexSource = 'approximate';
  kvMatchedTokens = 0;
  requestId: string | undefined = undefined;
  subsetUnmatchedEntries: readonly string[] = [];
  /** Set by the pick after the verdict (Decision.hold). */
  hold = false;
  readonly status: DecisionStatus;
  readonly rule: DecisionRule;
  readonly entries: readonly DecisionEntry[];
  readonly destination: string;
  readonly priority: number;
  readonly sheddable: boolean;
  readonly zone: string;
  readonly gatewayZone: GatewayZoneUse;
  readonly localOverloaded: boolean;
  readonly penaltiesIgnored: boolean;
  readonly subsetGiven: boolean;
  readonly counts: DecisionCounts;
  readonly prefixBlocks: number;
  readonly prefixMatched: number;
  readonly policy: 'cost' | 'weighted';
  readonly at: number;
  /** Let go once the request has started: every move and placement they serve happens before. */
  prefixHashes: readonly number[] | undefined;

  constructor(facts: PickFacts, verdict: DecisionVerdict) {
    super();
    this.status = verdict.status;
    this.rule = verdict.rule;
    this.entries = verdict.entries;
    this.destination = verdict.destination;
    this.priority = facts.priority;
    this.sheddable = facts.sheddable;
    this.zone = facts.zone;
    this.gatewayZone = facts.gatewayZone;
    this.localOverloaded = verdict.localOverloaded;
    this.penaltiesIgnored = facts.penaltiesIgnored;
    this.subsetGiven = facts.subsetGiven;
    this.counts = facts.counts;
    this.prefixBlocks = facts.prefixBlocks;
    this.prefixMatched = verdict.prefixMatched;
    this.policy = facts.policy;
    this.at = facts.at;
    this.prefixHashes = verdict.prefixHashes;
  }

  get primary(): Endpoint | undefined {
    return this.entries[0]?.endpoint;
  }

  override get bytes(): number {
    return DECISION_BYTES;
  }

  override chargeEnded(reason: ChargeEnd, at: number): void {
    this.hooks?.ended(this, reason, at);
  }
}
