import { parseEndpointAddress, type KvBatch, type KvSnapshotEvent } from '@spillway/events';
import type { ChargeEnd, Endpoint, Fleet, PoolView, PrefillAhead, PrefillRate } from '@spillway/fleet';
import { CandidateSet, type CollectOptions } from './candidates.js';
import { chargeBoundMs, usableMaxTokens } from './charge-bound.js';
import { schedulerConfigSchema, type SchedulerConfig, type SchedulerConfigInput } from './config.js';
import { CostPolicy } from './cost.js';
import {
  DecisionRecord,
  MAX_REQUEST_ID_CHARS,
  type ChargeHooks,
  type ChargeListener,
  type Decision,
  type DecisionEntry,
  type DecisionRule,
  type EntryReason,
  type PickFacts,
} from './decision.js';
import { hashPromptBlocks, prefixSeed } from './hash.js';
import { chooseList } from './list.js';
import { KvBlockIndex, type KvIndexOptions, type KvIndexStats } from './kv-index.js';
import { PrefixLookup } from './kv-lookup.js';
import { isSilent } from './load.js';
import { shouldHold, type PricedCandidates } from './hold.js';
import { TIER_LOCAL, type Tier } from './network.js';
import { Origins, type Origin } from './origins.js';
import { PenaltyBox } from './penalties.js';
import { PrefixIndex } from './prefix-index.js';
import type { EntryCost, PricingContext } from './pricing.js';
import { Ranking } from './rank.js';
import { seededRng, type Rng } from './rng.js';
import { defaultScorers, type WeightedScorer } from './scorers.js';
import { SharedState, type SharedStateOptions } from './shared-state.js';
import { RemoteShortlist, type ShortlistLimits } from './shortlist.js';
import type { SubsetHint } from '@spillway/events';
import { detached } from './subset.js';
import { WeightedPolicy } from './weighted.js';

export interface SchedulerOptions {
  readonly fleet: Fleet;
  /** The InferencePool this EPP serves. */
  readonly pool: string;
  /**
   * The EPP's own zone and region (its flags): they define local and the round trips, unless the
   * request names its gateway's zone (PickRequest.zone).
   */
  readonly zone: string;
  readonly region?: string | undefined;
  /** Validated with schedulerConfigSchema; defaults fill the rest. */
  readonly config?: SchedulerConfigInput;
  /** Random tie-breaking; defaults to a PRNG seeded with `seed` (default 1). */
  readonly rng?: Rng;
  readonly seed?: number;
  /** Replaces the weighted policy's scorers (built from config.weights). */
  readonly scorers?: readonly WeightedScorer[];
  /** State shared with the pool's other EPPs (shared-state.ts): where this EPP's entries go, and how long others' live. */
  readonly shared?: SharedStateOptions;
  /** Bounds of the precise block index (kv-index.ts); its clock-skew limit defaults to the fleet's. */
  readonly kvIndex?: KvIndexOptions;
}

export interface PickRequest {
  /** Target model after rewrite: seeds the prefix hashes, picks rate defaults, drives LoRA affinity. */
  readonly model: string;
  /** Text for prefix-cache affinity: the prompt, or the JSON of chat messages. */
  readonly prompt?: string | undefined;
  /** The prompt's length in tokens when the caller knows it; otherwise estimated from its characters. */
  readonly promptTokens?: number | undefined;
  /** `x-gateway-inference-objective`; its priority comes from config.objectives. */
  readonly objective?: string | undefined;
  /** Overrides the objective's priority (simulations, tests). */
  readonly priority?: number | undefined;
  /** The gateway's subset hint; undefined when absent (not the same as an empty list). */
  readonly subset?: SubsetHint | undefined;
  /** Optional cache salt (separates tenants' prefix entries as the model servers do). */
  readonly cacheSalt?: string | undefined;
  /**
   * The prompt's token ids after the chat template, when the EPP tokenized it: the precise block
   * index is looked up with their content keys (`kvBlockKeys`, seeded by `kvKeySeed(model)` when the
   * model is held as an adapter). Also the prompt's length when `promptTokens` is absent.
   */
  readonly promptTokenIds?: ArrayLike<number> | undefined;
  /** The gateway's request id (`x-request-id`): carried into the decision (cut to MAX_REQUEST_ID_CHARS), never interpreted. */
  readonly requestId?: string | undefined;
  /**
   * The output limit the body set (`max_tokens`, ...), when it set one: with the prompt it bounds
   * how long the request stays charged once started. Anything but a whole number ≥ 1 counts as absent.
   */
  readonly maxTokens?: number | undefined;
  /**
   * The gateway's zone (`x-spillway-gateway-zone`): the request's local zone for tiers, round trips
   * and the zone bias, when the pool has a pod in it. Undefined: the gateway named none; null: it
   * sent a value that is not a zone name. Either, or a zone the pool does not have, picks for the
   * EPP's zone (Decision.zone and Decision.gatewayZone say which).
   */
  readonly zone?: string | null | undefined;
}

/** How the scheduler sees one endpoint now, independent of any request (Scheduler.explain). */
export interface EndpointExplanation {
  /** The cost model's request-independent components: wait, round trip, zone bias, uncertainty. */
  readonly cost: EntryCost;
  /** Milliseconds left of a passive-health penalty; 0 when it has none. */
  readonly penaltyLeftMs: number;
  /** Readiness not re-published while its zone-mates' was: left out of picks like a penalised one. */
  readonly silent: boolean;
}

/** What an outcome report concluded. */
export type ServedOutcome = 'primary' | 'fallback' | 'unparsable' | 'no-primary';

/**
 * Zone-aware picking (picking v2). Pure: no I/O, `now` is always handed in, randomness comes from
 * the injected RNG. One instance per (EPP, pool). A pick runs four steps, one module each, seen
 * from the request's origin (origins.ts: the gateway's zone, else the EPP's):
 *
 *   candidates (candidates.ts)  ->  price (cost.ts | weighted.ts)  ->  rank (rank.ts)  ->  list (list.ts)
 *
 * Per request the EPP calls (a request's life, docs/picking.md "A request's charge"):
 *   const d = scheduler.pick(request, now)      // never throws for bad input; d.status routed | 429 | 503
 *   if (d.status === 'routed') scheduler.commit(d, now)   // picked: the destination is sent, the primary charged
 *   scheduler.reportServed(d, servedAddress, now)         // the response named the endpoint that served it
 *   scheduler.reportFailed(d, now)                        // the primary answered 5xx or could not be reached
 *   scheduler.start(d, now, listener)                     // started: its response began (headers, success status)
 *   scheduler.release(d, now)                              // completed, or over before it started (idempotent)
 * A started request that is never released stays charged to the endpoint that served it until
 * that endpoint's samples account for it or its bound passes (`listener` hears when): never at the
 * end of its stream, which behind Envoy ≥ 1.37 comes right after the response headers.
 */
export class Scheduler {
  readonly zone: string;
  readonly region: string | undefined;
  readonly pool: string;
  private readonly fleet: Fleet;
  private readonly rng: Rng;
  private readonly scorers: readonly WeightedScorer[] | undefined;
  // Everything derived from the config is replaced as a whole by reconfigure(); what the scheduler
  // learnt (penalties, prefix index; in-flight accounting lives in the fleet) is kept.
  private current!: SchedulerConfig;
  /** The weighted policy, shared by every origin (its keys depend on tiers only); undefined under cost. */
  private weighted: WeightedPolicy | undefined;
  /** Prices endpoints for explain(): the EPP's own origin's policy under cost, a cost model beside the weighted policy. */
  private costModel!: CostPolicy;
  private blockChars!: number;
  private usesPrefix!: boolean;
  private candidates!: CandidateSet;
  /** Each request zone's network, policy and shortlist (the EPP's own, and the gateways' zones). */
  private readonly origins: Origins;
  /** The origin of the pick under way. */
  private origin!: Origin;

  private readonly penalties = new PenaltyBox();
  private readonly index = new PrefixIndex();
  private readonly kv: KvBlockIndex;
  private readonly lookup: PrefixLookup;
  private readonly ranking = new Ranking();
  /** Picks, releases, placements and penalties shared with the pool's other EPPs: `shared.apply(batch, now)` folds theirs in. */
  readonly shared: SharedState;

  // Per-pick state, reused.
  private hashes!: Float64Array;
  private keys = new Float64Array(64);
  private waits = new Float64Array(64);
  private readonly chosen: number[] = [];
  private readonly priced: { -readonly [K in keyof PricedCandidates]: PricedCandidates[K] } = {
    count: 0,
    keys: this.keys,
    waits: this.waits,
    tiers: new Uint8Array(0),
    limitBand: 0,
  };
  private readonly ctx: PricingContext;
  private readonly excludedNow = (endpoint: Endpoint): boolean =>
    this.candidates.isExcluded(endpoint, this.ctx.pool, this.ctx.now, this.config.gaps.readinessSilenceMs);
  private readonly silentNow = (endpoint: Endpoint): boolean =>
    isSilent(endpoint, this.ctx.pool, this.ctx.now, this.config.gaps.readinessSilenceMs);
  private readonly penalisedNow = (endpoint: Endpoint): boolean => this.penalties.isPenalised(endpoint, this.ctx.now);
  private readonly addressOf = (index: number): string => this.candidates.endpoints[index]?.address as string;
  private listSizes!: { overall: number; remote: number; local: number };
  private shortlistLimits!: ShortlistLimits;
  /** Where a decision's charge reports an end the fleet settled itself: peers, then the caller's listener. */
  private readonly chargeHooks: ChargeHooks = {
    ended: (record: DecisionRecord, reason: ChargeEnd, at: number): void => {
      this.shared.endedWithoutCompletion(record);
      const listener = record.listener;
      record.listener = undefined;
      listener?.chargeEnded(at, reason);
    },
  };

  constructor(options: SchedulerOptions) {
    this.fleet = options.fleet;
    this.pool = options.pool;
    this.zone = options.zone;
    this.region = options.region;
    this.rng = options.rng ?? seededRng(options.seed ?? 1);
    this.scorers = options.scorers;
    const index = this.index;
    this.kv = new KvBlockIndex(this.pool, { maxClockSkewMs: this.fleet.maxClockSkewMs, ...options.kvIndex });
    const lookup = (this.lookup = new PrefixLookup(this.kv, this.index, this.fleet, this.pool));
    this.ctx = {
      now: 0,
      pickSeq: 0,
      pool: undefined as unknown as PoolView,
      topologyVersion: 0,
      model: '',
      modelIsAdapter: false,
      promptTokens: 0,
      bestCachedTokens: 0,
      prefixBlocks: 0,
      blockTokens: 0,
      prefixMatch: (endpoint: Endpoint) => index.matchOf(endpoint),
      cachedTokens: (endpoint: Endpoint) => lookup.cachedTokens(endpoint),
      cacheSource: (endpoint: Endpoint) => lookup.sourceOf(endpoint),
      prefillAhead: (endpoint: Endpoint, rate: PrefillRate, out: PrefillAhead) =>
        this.fleet.prefillAhead(endpoint, this.ctx.now, this.config.backlog, rate, out),
      includeExcluded: false,
      isExcluded: this.excludedNow,
    };
    this.origins = new Origins(this.zone, this.region, {
      policy: (network) => this.weighted ?? new CostPolicy(this.current, network, this.fleet.staleAfterMs),
      shortlist: (policy) =>
        new RemoteShortlist({
          baseKey: (endpoint, tier) => policy.baseKey(this.ctx, endpoint, tier),
          isPenalised: this.penalisedNow,
          isSilent: this.silentNow,
          rng: this.rng,
        }),
    });
    this.shared = new SharedState(
      {
        fleet: this.fleet,
        pool: this.pool,
        index: this.index,
        penalties: this.penalties,
        learn: (endpoint, hashes) => this.learnBlocks(endpoint, hashes),
        onPenalty: () => this.origins.invalidate(),
        // A peer's started request is bounded as this EPP bounds its own (its model's rates are the defaults').
        boundMs: (endpoint, promptTokens, maxTokens) =>
          chargeBoundMs(this.config.charges, endpoint, this.config.rates.default.prefillTokensPerS, promptTokens, maxTokens),
        blockTokens: () => this.config.prefix.blockTokens,
      },
      options.shared,
    );
    this.configure(schedulerConfigSchema.parse(options.config ?? {}));
  }

  /** The config in force (replaced whole by reconfigure). */
  get config(): SchedulerConfig {
    return this.current;
  }

  /**
   * Puts a new config in force from the next pick on (a live config reload). Validated first: a bad
   * config throws a ZodError and changes nothing. In-flight accounting, penalties and the prefix
   * index are kept (the index is emptied only when the prefix block geometry changes, since no old
   * entry could match a new hash). Decisions made before keep working with commit/release/report.
   */
  reconfigure(input: SchedulerConfigInput): void {
    const next = schedulerConfigSchema.parse(input);
    const before = this.current.prefix;
    if (next.prefix.blockTokens !== before.blockTokens || next.prefix.charsPerToken !== before.charsPerToken) {
      for (const endpoint of [...this.index.endpoints()]) this.index.drop(endpoint);
    }
    this.configure(next);
  }

  private configure(config: SchedulerConfig): void {
    this.current = config;
    this.shared.penaltyLimitMs = config.penaltyMs;
    this.fleet.maxChargesPerEndpoint = config.charges.maxPerEndpoint;
    this.fleet.maxChargeBytes = config.charges.maxBytes;
    this.candidates = new CandidateSet(this.penalties);
    const staleAfterMs = this.fleet.staleAfterMs;
    if (config.policy === 'weighted') {
      const scorers = this.scorers ?? defaultScorers(config.weights);
      this.weighted = new WeightedPolicy(config, scorers, staleAfterMs);
      this.usesPrefix = scorers.some((s) => s.scorer.name === 'prefix-cache');
    } else {
      this.weighted = undefined;
      this.usesPrefix = true;
    }
    // Every origin anew: their policies and shortlists priced with the old config.
    this.origins.configure(config.network);
    const own = this.origins.own;
    this.origin = own;
    this.costModel = own.policy instanceof CostPolicy ? own.policy : new CostPolicy(config, own.network, staleAfterMs);
    this.blockChars = config.prefix.blockTokens * config.prefix.charsPerToken;
    this.hashes = new Float64Array(config.prefix.maxBlocks);
    this.ctx.blockTokens = config.prefix.blockTokens;
    const max = config.maxEndpoints;
    // Two spare places per ranking, for entries skipped because their address is already listed.
    this.shortlistLimits = { size: config.remote.shortlist, refreshMs: config.remote.refreshMs, scanPerPick: config.remote.scanPerPick };
    this.listSizes = { overall: max + 2, remote: Math.min(max, config.crossZoneFallbacks) + 2, local: 2 };
  }

  /** An objective's priority from config; unknown or absent objectives are 0. */
  priorityOf(objective: string | undefined): number {
    if (objective === undefined || !Object.hasOwn(this.config.objectives, objective)) return 0;
    return this.config.objectives[objective]?.priority ?? 0;
  }

  isPenalised(endpoint: Endpoint, now: number): boolean {
    return this.penalties.isPenalised(endpoint, now);
  }

  /** When the first passive-health penalty in force at `now` ends (its endpoint may have room again); undefined when none is. */
  nextPenaltyEndAt(now: number): number | undefined {
    return this.penalties.nextEndAfter(now);
  }

  /** Past a hard limit now (cost: full; weighted: saturated), for the EPP's per-zone gauges. */
  isFull(endpoint: Endpoint, now: number): boolean {
    const pool = this.fleet.pool(this.pool);
    if (!pool) return false;
    this.setContext(pool, now, '', 0, 0);
    const own = this.origins.own;
    const tier = own.network.tierOf(pool, endpoint.zone, this.fleet.topologyVersion);
    return own.policy.baseKey(this.ctx, endpoint, tier) >= own.policy.limitBand;
  }

  /**
   * How the scheduler sees `endpoint` now, whatever the request: its request-independent cost (by
   * the cost model, whatever the policy, from the EPP's own zone) and its passive health. Read-only, for views of the pool;
   * undefined when the pool is unknown.
   */
  explain(endpoint: Endpoint, now: number): EndpointExplanation | undefined {
    const pool = this.fleet.pool(this.pool);
    if (!pool) return undefined;
    this.setContext(pool, now, '', 0, 0);
    const tier = this.origins.own.network.tierOf(pool, endpoint.zone, this.fleet.topologyVersion);
    const until = this.penalties.penalisedUntil(endpoint, now);
    return {
      cost: this.costModel.explainBase(this.ctx, endpoint, tier),
      penaltyLeftMs: until === undefined ? 0 : until - now,
      silent: isSilent(endpoint, pool, now, this.config.gaps.readinessSilenceMs),
    };
  }

  /** A relayed KV batch (`decodeKvBatch`) for the precise block index; batches of other pools are dropped and counted. */
  applyKvBatch(batch: KvBatch, receivedAtMs: number): void {
    this.kv.applyBatch(batch, receivedAtMs);
  }

  /** A pod's `kv` snapshot (replayed or live): replaces what the block index knows of the pod unless it knows newer. */
  applyKvSnapshot(event: KvSnapshotEvent, receivedAtMs: number): void {
    this.kv.applySnapshot(event, receivedAtMs);
  }

  /** The precise block index's size and counters (the EPP exports them as metrics). */
  get kvIndexStats(): KvIndexStats {
    return this.kv.stats;
  }

  /** Blocks held by the prefix index over all endpoints (a gauge for the EPP). */
  get prefixIndexBlocks(): number {
    return this.index.size;
  }

  pick(request: PickRequest, now: number): Decision {
    // Charges past their bound stop loading their endpoints before they are priced (a heap peek when none is).
    this.fleet.expireCharges(now);
    const priority = request.priority ?? this.priorityOf(request.objective);
    const sheddable = priority < 0;
    const pool = this.fleet.pool(this.pool);
    const subsetGiven = request.subset !== undefined;
    const candidates = this.candidates;
    const { origin, gatewayZone } = this.origins.choose(pool, request.zone);
    this.origin = origin;
    const policy = origin.policy;

    const blocks = this.hashPrompt(request);
    const depth = blocks > 0 ? this.index.prepare(this.hashes, blocks) : 0;
    const tokenIds = request.promptTokenIds;
    const promptTokens =
      request.promptTokens ??
      tokenIds?.length ??
      (typeof request.prompt === 'string' ? request.prompt.length / this.config.prefix.charsPerToken : 0);

    let failOpen = false;
    if (pool) {
      this.setContext(pool, now, request.model, promptTokens, blocks);
      this.ctx.bestCachedTokens = this.lookup.begin(
        this.usesPrefix ? tokenIds : undefined,
        request.model,
        promptTokens,
        depth,
        this.config.prefix.blockTokens,
      );
      this.collect(pool, request.subset, depth);
      if (candidates.eligible === 0 && candidates.excluded > 0 && this.config.penaltyFailOpen) {
        failOpen = true;
        this.ctx.includeExcluded = true;
        this.collect(pool, request.subset, depth);
      }
      // The zone's last local endpoints were kept though excluded: price them behind every other.
      if (candidates.localKept > 0) this.ctx.includeExcluded = true;
    } else {
      candidates.clear();
      candidates.subsetCounts.entries = candidates.subsetCounts.ignored = candidates.subsetCounts.unmatched = 0;
    }
    const counts = {
      eligible: candidates.eligible,
      eligibleLocal: candidates.localCount,
      examined: candidates.count,
      full: 0,
      subsetEntries: candidates.subsetCounts.entries,
      subsetIgnored: candidates.subsetCounts.ignored,
      subsetUnmatched: candidates.subsetCounts.unmatched,
      penalised: candidates.excluded,
      localKept: candidates.localKept,
    };
    const facts: PickFacts = {
      priority,
      sheddable,
      zone: origin.zone,
      gatewayZone,
      penaltiesIgnored: failOpen,
      subsetGiven,
      counts,
      prefixBlocks: blocks,
      policy: this.config.policy,
      at: now,
      requestId: request.requestId,
    };

    if (candidates.count === 0) {
      const rule: DecisionRule = !pool
        ? 'unknown-pool'
        : subsetGiven && this.config.subsetMode === 'strict'
          ? candidates.subsetCounts.entries === 0
            ? 'empty-subset'
            : 'subset-unmatched'
          : 'no-ready-endpoints';
      return this.decide(facts, 503, rule, [], false);
    }

    const n = candidates.count;
    this.ensureScratch(n);
    this.ctx.modelIsAdapter = heldAsAdapter(request.model, candidates.endpoints, n);
    this.ctx.bestCachedTokens = this.lookup.rekey(request.model, this.ctx.modelIsAdapter, this.ctx.bestCachedTokens);
    policy.price(this.ctx, candidates, this.keys, this.waits);
    for (let i = 0; i < n; i++) if ((this.keys[i] as number) >= policy.limitBand) counts.full++;
    this.ranking.rank(this.keys, candidates.tiers, n, this.listSizes, this.rng);
    const bestKey = this.keys[this.ranking.overall.index[0] as number] as number;
    if (sheddable && policy.shouldShed(bestKey, this.waits, n)) {
      return this.decide(facts, 429, 'shed', [], true);
    }

    chooseList(
      {
        maxEndpoints: this.config.maxEndpoints,
        crossZoneFallbacks: this.config.crossZoneFallbacks,
        ranking: this.ranking,
        keys: this.keys,
        tiers: candidates.tiers,
        address: this.addressOf,
      },
      this.chosen,
    );
    const entries = this.entriesOf(this.chosen);
    const primary = entries[0] as DecisionEntry;
    const rule: DecisionRule = primary.full ? 'last-resort' : primary.zone === origin.zone ? 'local' : 'spill';
    const overloaded = rule !== 'local';
    const flow = this.config.flowControl;
    const hold = flow.enabled && shouldHold(this.pricedView(n, policy.limitBand), flow.holdAboveMs);
    const record = this.decide(facts, 'routed', rule, entries, overloaded);
    record.model = request.model;
    record.promptTokens = promptTokens;
    // The work it puts ahead of the next requests there (the prefill backlog): what the primary does
    // not cache of its prompt, or a typical prompt (`rates.*.promptTokens`) when it has none we can read.
    record.prefillTokens =
      promptTokens > 0 ? Math.max(0, promptTokens - this.ctx.cachedTokens(primary.endpoint)) : this.typicalPromptTokens(request.model);
    record.maxTokens = usableMaxTokens(request.maxTokens);
    record.hold = hold;
    return record;
  }

  /** A typical prompt of the model (config `rates`). */
  private typicalPromptTokens(model: string): number {
    return this.configuredRates(model)?.promptTokens ?? this.config.rates.default.promptTokens;
  }

  /** The model's own configured rates, if any: the model is the client's word, so only a configured model's own count (no prototype keys). */
  private configuredRates(model: string): SchedulerConfig['rates']['models'][string] | undefined {
    const models = this.config.rates.models;
    return Object.hasOwn(models, model) ? models[model] : undefined;
  }

  /** This pick's keys and waits as the hold rule reads them (one object, refreshed per pick). */
  private pricedView(count: number, limitBand: number): PricedCandidates {
    const view = this.priced;
    view.count = count;
    view.keys = this.keys;
    view.waits = this.waits;
    view.tiers = this.candidates.tiers;
    view.limitBand = limitBand;
    return view;
  }

  /**
   * Picked: the EPP sent this decision's destination. The primary is charged with the request
   * (in-flight and unsampled accounting, the anti-herding signal; refused only at the fleet's caps)
   * and the prefix index learns what it now caches. Safe to call twice; ignores decisions that were
   * not routed.
   */
  commit(decision: Decision, now: number): void {
    const record = decision as DecisionRecord;
    if (record.status !== 'routed' || record.committed) return;
    const primary = record.primary;
    if (!primary) return;
    record.committed = true;
    record.hooks = this.chargeHooks;
    const charged = this.fleet.charge(record, primary, now);
    this.learn(primary, record);
    if (charged) this.shared.committed(record, primary, now);
  }

  /**
   * Started: the request's response began at `now` (its headers came with a success status). It
   * stays charged to the endpoint that served it (reportServed moved it there) until `release`, or,
   * without one, until the endpoint's samples account for it or its bound passes (prompt and output
   * limit at the endpoint's rates: config `charges`); `listener` hears when. Peers learn it. Ignored
   * for a request not charged, or started already.
   */
  start(decision: Decision, now: number, listener?: ChargeListener): void {
    const record = decision as DecisionRecord;
    const endpoint = record.chargedTo;
    if (endpoint === undefined || record.started) return;
    const prefill = this.configuredRates(record.model)?.prefillTokensPerS ?? this.config.rates.default.prefillTokensPerS;
    record.listener = listener;
    this.fleet.startCharge(record, now, now + chargeBoundMs(this.config.charges, endpoint, prefill, record.promptTokens, record.maxTokens));
    // Every move and prefix placement the blocks serve happens before the response starts.
    record.prefixHashes = undefined;
    this.shared.started(record);
  }

  /**
   * The request is over at `now` (when known: peers learn it): its completion was seen, or its
   * stream ended before its response started (client gone, gateway error, immediate response). Its
   * charge ends as a real signal: a sample that counted it over-reports by one until the next.
   * Idempotent; a charge already ended (by samples, at its bound) stays ended.
   */
  release(decision: Decision, now?: number): void {
    const record = decision as DecisionRecord;
    if (record.chargedTo === undefined) return;
    this.fleet.releaseCharge(record);
    record.listener = undefined;
    this.shared.released(record, now);
  }

  /** Ends the charges whose bound has passed at `now` (picks do it too); returns how many. For the EPP's timer. */
  expireCharges(now: number): number {
    return this.fleet.expireCharges(now);
  }

  /**
   * The gateway reported which endpoint served the request (picking v2 step 7). When it is not the
   * primary, the primary failed: it is penalised for `penaltyMs`, and the request's accounting and
   * prefix entries move to the endpoint that served it (when that is no pod this EPP knows, the
   * charge ends: nothing it sees carries the request). `target` is a decision, or the primary's
   * address when the caller kept only that. Only the first report of a decision counts.
   */
  reportServed(target: Decision | string, served: string | undefined, now: number): ServedOutcome {
    const record = typeof target === 'string' ? undefined : (target as DecisionRecord);
    if (record?.served !== undefined) return record.served === record.primary?.address ? 'primary' : 'fallback';
    // The usual case, without parsing: the gateway served the primary and names it by its canonical key.
    if (record?.primary !== undefined && served === record.primary.address) {
      record.served = served;
      return 'primary';
    }
    const servedAddress = served === undefined ? undefined : parseEndpointAddress(served.split(',')[0]?.trim() ?? '');
    if (!servedAddress) return 'unparsable';
    const pool = this.fleet.pool(this.pool);
    let primaries: readonly Endpoint[];
    let primaryKey: string | undefined;
    if (record) {
      const primary = record.primary;
      primaries = primary ? [primary] : [];
      primaryKey = primary?.address;
    } else {
      primaryKey = parseEndpointAddress((target as string).trim())?.key;
      primaries = primaryKey !== undefined && pool ? pool.routableAt(primaryKey) : [];
    }
    if (primaryKey === undefined) return 'no-primary';
    if (record) record.served = servedAddress.key;
    if (servedAddress.key === primaryKey) return 'primary';

    this.penalise(primaries, now);
    const servedEndpoint = pool?.routableAt(servedAddress.key)[0];
    if (record && record.chargedTo !== undefined && record.chargedTo !== servedEndpoint) {
      if (servedEndpoint === undefined) {
        // Served where this EPP sees no pod: nothing it knows carries the request, and the primary never ran it.
        this.fleet.forgetCharge(record);
        this.shared.endedWithoutCompletion(record);
      } else {
        this.fleet.releaseCharge(record);
        if (this.fleet.charge(record, servedEndpoint, now)) {
          this.learn(servedEndpoint, record);
          this.shared.moved(record, servedEndpoint, now);
        } else this.shared.released(record, now);
      }
    }
    return 'fallback';
  }

  /**
   * The primary failed outright (passive health): the response status was 5xx, or the gateway
   * reported a connection failure for it. Like a primary the gateway did not serve, it is
   * penalised for `penaltyMs`. The caller reports a decision once (a second report only extends
   * the penalty). Returns whether an endpoint was penalised.
   */
  reportFailed(decision: Decision, now: number): boolean {
    const primary = (decision as DecisionRecord).primary;
    if (primary === undefined || this.config.penaltyMs <= 0) return false;
    this.penalise([primary], now);
    return true;
  }

  /**
   * Housekeeping, for the EPP to call now and then (the Gateway API Inference Extension's EPP, now in
   * llm-d, purges every 2 min): forgets the
   * prefix entries of pods that were deleted or left the pool, and expired penalties.
   */
  prune(now: number): void {
    this.penalties.prune(now);
    const pool = this.fleet.pool(this.pool);
    const gone: Endpoint[] = [];
    for (const endpoint of this.index.endpoints()) {
      if (endpoint.deleted || !pool || this.fleet.get(this.pool, endpoint.zone, endpoint.pod) !== endpoint) gone.push(endpoint);
    }
    for (const endpoint of gone) {
      this.index.drop(endpoint);
      this.penalties.forget(endpoint);
    }
    // KV data of pods deleted from the fleet, or never known to it and silent for a minute.
    const forget: [string, string][] = [];
    for (const kvPod of this.kv.pods()) {
      const endpoint = this.fleet.get(this.pool, kvPod.zone, kvPod.pod);
      if (endpoint?.deleted === true || (endpoint === undefined && now - kvPod.lastSeenAt > KV_UNKNOWN_POD_TTL_MS))
        forget.push([kvPod.zone, kvPod.pod]);
    }
    for (const [zone, pod] of forget) this.kv.forget(zone, pod);
    this.origins.prune(pool);
  }

  private penalise(endpoints: readonly Endpoint[], now: number): void {
    if (this.config.penaltyMs <= 0) return;
    for (const endpoint of endpoints) {
      this.penalties.penalise(endpoint, now + this.config.penaltyMs);
      this.shared.penalised(endpoint, now + this.config.penaltyMs);
    }
    this.origins.invalidate();
  }

  /** Starts a pick's context (excluded endpoints left out; a fail-open pick turns them back in). */
  private setContext(pool: PoolView, now: number, model: string, promptTokens: number, blocks: number): void {
    const ctx = this.ctx;
    ctx.now = now;
    ctx.pickSeq++;
    ctx.pool = pool;
    ctx.topologyVersion = this.fleet.topologyVersion;
    ctx.model = model;
    ctx.modelIsAdapter = false;
    ctx.promptTokens = promptTokens;
    ctx.bestCachedTokens = 0;
    ctx.prefixBlocks = blocks;
    ctx.includeExcluded = false;
  }

  /** Step 1: the candidates, seen from the pick's origin, with its remote shortlist refreshed when it is due. */
  private collect(pool: PoolView, subset: SubsetHint | undefined, prefixDepth: number): void {
    const ctx = this.ctx;
    const { network, shortlist } = this.origin;
    const useShortlist = (subset === undefined || this.config.subsetMode === 'locality') && this.config.remote.refreshMs > 0;
    const version = ctx.topologyVersion;
    if (useShortlist) shortlist.refresh(pool, network, version, ctx.now, this.shortlistLimits);
    const options: CollectOptions = {
      network,
      subsetMode: this.config.subsetMode,
      now: ctx.now,
      topologyVersion: version,
      readinessSilenceMs: this.config.gaps.readinessSilenceMs,
      keepLastLocal: this.config.penaltyFailOpen,
      includeExcluded: ctx.includeExcluded,
      shortlist: useShortlist ? shortlist : undefined,
      prefixHolders: prefixDepth > 0 ? this.index.bestHolders() : undefined,
      prefixHolderBudget: this.config.remote.shortlist,
      kvHolders: this.lookup.precise ? this.lookup.holders(this.config.remote.shortlist) : undefined,
    };
    this.candidates.collect(pool, subset, options);
    if (useShortlist && this.candidates.count === 0 && this.candidates.eligible > 0) {
      // Everything listed at the last scan has left or been excluded since: look again.
      this.scan(pool);
      this.candidates.collect(pool, subset, options);
    }
  }

  private scan(pool: PoolView): void {
    const { network, shortlist } = this.origin;
    shortlist.rescan(pool, network, this.ctx.topologyVersion, this.ctx.now, this.config.remote.shortlist);
  }

  private entriesOf(chosen: readonly number[]): DecisionEntry[] {
    const candidates = this.candidates;
    const policy = this.origin.policy;
    const limit = policy.limitBand;
    const first = chosen[0] as number;
    const primaryLocal = candidates.tiers[first] === TIER_LOCAL;
    // Everything eligible is past its limits: the whole list is the last resort.
    const overloaded = (this.keys[first] as number) >= limit;
    const entries: DecisionEntry[] = [];
    for (let position = 0; position < chosen.length; position++) {
      const i = chosen[position] as number;
      const endpoint = candidates.endpoints[i] as Endpoint;
      const tier = candidates.tiers[i] as Tier;
      const key = this.keys[i] as number;
      const local = tier === TIER_LOCAL;
      const full = key >= limit;
      let reason: EntryReason;
      if (overloaded) reason = 'last-resort';
      else if (position === 0) reason = local ? 'local-best' : 'spill';
      else if (local) reason = primaryLocal ? 'local' : 'local-fallback';
      else reason = primaryLocal ? 'cross-zone-fallback' : 'spill';
      entries.push({
        endpoint,
        address: endpoint.address as string,
        zone: endpoint.zone,
        reason,
        key,
        full,
        cost: policy.explain(this.ctx, endpoint, tier),
      });
    }
    return entries;
  }

  private ensureScratch(count: number): void {
    if (count <= this.keys.length) return;
    let size = this.keys.length;
    while (size < count) size *= 2;
    this.keys = new Float64Array(size);
    this.waits = new Float64Array(size);
  }

  private learn(endpoint: Endpoint, record: DecisionRecord): void {
    const hashes = record.prefixHashes;
    if (hashes) this.learnBlocks(endpoint, hashes);
  }

  /** Records that `endpoint` now caches these blocks (chain order: inserted tail first). */
  private learnBlocks(endpoint: Endpoint, hashes: readonly number[]): void {
    const prefix = this.config.prefix;
    const cache = endpoint.metrics?.cache;
    const capacity =
      prefix.autoTune && cache && cache.numBlocks > 0
        ? Math.max(1, Math.floor((cache.numBlocks * cache.blockSize) / prefix.blockTokens))
        : prefix.lruCapacity;
    this.index.insert(endpoint, hashes, hashes.length, capacity);
  }

  private hashPrompt(request: PickRequest): number {
    const prompt = request.prompt;
    if (!this.usesPrefix || typeof prompt !== 'string' || prompt.length < this.blockChars) return 0;
    const seed = prefixSeed(request.model, request.cacheSalt);
    return hashPromptBlocks(prompt, seed, this.blockChars, this.config.prefix.maxBlocks, this.hashes);
  }

  /** The decision record, with what the request and the candidates add to it (request id, stale subset entries). */
  private decide(
    facts: PickFacts,
    status: Decision['status'],
    rule: DecisionRule,
    entries: readonly DecisionEntry[],
    localOverloaded: boolean,
  ): DecisionRecord {
    let destination = '';
    for (let i = 0; i < entries.length; i++) destination += (i === 0 ? '' : ',') + (entries[i]?.address as string);
    const primary = entries[0]?.endpoint;
    const routed = status === 'routed';
    const blocks = facts.prefixBlocks;
    const record = new DecisionRecord(facts, {
      status,
      rule,
      entries,
      destination,
      localOverloaded,
      prefixMatched: primary ? this.index.matchOf(primary) : 0,
      prefixHashes: routed && blocks > 0 ? copyHashes(this.hashes, blocks) : undefined,
    });
    const id = facts.requestId;
    if (id !== undefined) record.requestId = id.length > MAX_REQUEST_ID_CHARS ? detached(id.slice(0, MAX_REQUEST_ID_CHARS)) : id;
    if (primary !== undefined && this.lookup.precise) {
      record.prefixSource = this.lookup.sourceOf(primary);
      if (record.prefixSource !== 'approximate') record.kvMatchedTokens = this.lookup.preciseTokensOf(primary);
    }
    record.subsetUnmatchedEntries = this.candidates.subsetUnmatched;
    this.lookup.end();
    this.candidates.clear();
    return record;
  }
}

/** KV data of a pod the fleet has never known is kept this long after its last batch or snapshot. */
const KV_UNKNOWN_POD_TTL_MS = 60_000;

/** Whether any of the first `count` endpoints runs or is loading `model` as a LoRA adapter. */
function heldAsAdapter(model: string, endpoints: readonly Endpoint[], count: number): boolean {
  for (let i = 0; i < count; i++) {
    const lora = endpoints[i]?.metrics?.lora;
    if (lora !== undefined && (lora.running.includes(model) || lora.waiting.includes(model))) return true;
  }
  return false;
}

/** The first `count` hashes as an on-heap array of doubles (see DecisionRecord.prefixHashes). */
function copyHashes(hashes: Float64Array, count: number): number[] {
  const out: number[] = [];
  for (let i = 0; i < count; i++) out.push(hashes[i] as number);
  return out;
}
