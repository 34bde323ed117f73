import { parseEndpointAddress } from '@spillway/events';
import type { Endpoint, Fleet, PoolView } from '@spillway/fleet';
import { Scratch } from './buffers.js';
import { schedulerConfigSchema, type SchedulerConfig, type SchedulerConfigInput } from './config.js';
import { DecisionRecord, type Decision, type DecisionCounts, type DecisionRule } from './decision.js';
import { hashPromptBlocks, prefixSeed } from './hash.js';
import { buildList, RankedGroup } from './list.js';
import { PenaltyBox } from './penalties.js';
import { PrefixIndex } from './prefix-index.js';
import { RemoteShortlist } from './remote.js';
import { seededRng, type Rng } from './rng.js';
import { isSaturated, type SaturationLimits } from './saturation.js';
import { defaultScorers, maxTotal, scoreGroup, type ScoringContext, type WeightedScorer } from './scorers.js';
import { SubsetResolver, type SubsetCounts, type SubsetHint } from './subset.js';
import { TIER_LOCAL, ZoneTiers } from './tiers.js';
import { TopK } from './top-k.js';

export interface SchedulerOptions {
  readonly fleet: Fleet;
  /** The InferencePool this EPP serves. */
  readonly pool: string;
  /** The EPP's own zone and region (its flags): they define local and the remote tiers. */
  readonly zone: string;
  readonly region?: string | undefined;
  /** Validated with schedulerConfigSchema; defaults fill the rest. */
  readonly config?: SchedulerConfigInput;
  /** Random tie-breaking; defaults to a PRNG seeded with `seed` (default 1). */
  readonly rng?: Rng;
  readonly seed?: number;
  /** Replaces the default weighted scorers (built from config.weights). */
  readonly scorers?: readonly WeightedScorer[];
}

export interface PickRequest {
  /** Target model after rewrite: seeds the prefix hashes and drives LoRA affinity. */
  readonly model: string;
  /** Text for prefix-cache affinity: the prompt, or the JSON of chat messages. */
  readonly prompt?: string | undefined;
  /** `x-gateway-inference-objective`; its priority comes from config.objectives. */
  readonly objective?: string | undefined;
  /** Overrides the objective's priority (simulations, tests). */
  readonly priority?: number | undefined;
  /** The gateway's subset hint; undefined when absent (not the same as an empty list). */
  readonly subset?: SubsetHint | undefined;
  /** Optional cache salt (separates tenants' prefix entries as the model servers do). */
  readonly cacheSalt?: string | undefined;
}

/** What reportServed concluded. */
export type ServedOutcome = 'primary' | 'fallback' | 'unparsable' | 'no-primary';

type MutableCounts = { -readonly [K in keyof DecisionCounts]: DecisionCounts[K] };

/**
 * Zone-aware picking (DESIGN §5). Pure: no I/O, `now` is always handed in, randomness comes from
 * the injected RNG. One instance per (EPP, pool).
 *
 * Per request the EPP calls:
 *   const d = scheduler.pick(request, now)      // never throws for bad input; d.status routed | 429 | 503
 *   if (d.status === 'routed') scheduler.commit(d, now)   // once the destination is sent
 *   scheduler.reportServed(d, servedAddress, now)         // when the response carries the served endpoint
 *   scheduler.reportFailed(d, now)                         // when the primary answered 5xx or could not be reached
 *   scheduler.release(d)                                   // when the stream ends, however it ends (idempotent)
 */
export class Scheduler {
  readonly config: SchedulerConfig;
  readonly zone: string;
  readonly region: string | undefined;
  readonly pool: string;
  private readonly fleet: Fleet;
  private readonly rng: Rng;
  private readonly scorers: readonly WeightedScorer[];
  private readonly tierSpan: number;
  private readonly limits: SaturationLimits;
  private readonly blockChars: number;
  private readonly usesPrefix: boolean;

  private readonly tiers: ZoneTiers;
  private readonly penalties = new PenaltyBox();
  private readonly index = new PrefixIndex();
  private readonly subsets = new SubsetResolver();
  private readonly shortlist = new RemoteShortlist();

  // Per-pick scratch, reused.
  private readonly local: Endpoint[] = [];
  private readonly remote: Endpoint[] = [];
  private remoteTiers = new Uint8Array(64);
  private nLocal = 0;
  private nRemote = 0;
  private penalised = 0;
  private ignorePenalties = false;
  private pickNow = 0;
  private view: PoolView | undefined = undefined;
  private readonly seen = new Set<Endpoint>();
  private readonly subsetCounts: SubsetCounts = { entries: 0, ignored: 0, unmatched: 0 };
  private readonly hashes: Float64Array;
  /** Prompt blocks the best holder has (0: no prefix match at all). */
  private prefixDepth = 0;
  private readonly prefixMatch = (endpoint: Endpoint): number => (this.prefixDepth === 0 ? 0 : this.index.matchOf(endpoint));
  private readonly scratch = new Scratch();
  private readonly topA = new TopK();
  private readonly topB = new TopK();
  private readonly localUnsaturated = new RankedGroup();
  private readonly localSaturated = new RankedGroup();
  private readonly remoteUnsaturated = new RankedGroup();
  private readonly remoteSaturated = new RankedGroup();
  private readonly visitLocality = (endpoint: Endpoint): void => this.visitSubset(endpoint, true);
  private readonly visitStrict = (endpoint: Endpoint): void => this.visitSubset(endpoint, false);

  constructor(options: SchedulerOptions) {
    this.config = schedulerConfigSchema.parse(options.config ?? {});
    this.fleet = options.fleet;
    this.pool = options.pool;
    this.zone = options.zone;
    this.region = options.region;
    this.rng = options.rng ?? seededRng(options.seed ?? 1);
    this.scorers = options.scorers ?? defaultScorers(this.config.weights);
    this.tierSpan = maxTotal(this.scorers) + 1;
    this.limits = {
      queueThreshold: this.config.queueThreshold,
      kvThreshold: this.config.kvThreshold,
      staleAfterMs: options.fleet.staleAfterMs,
    };
    this.blockChars = this.config.prefix.blockTokens * this.config.prefix.charsPerToken;
    this.hashes = new Float64Array(this.config.prefix.maxBlocks);
    this.usesPrefix = this.scorers.some((s) => s.scorer.name === 'prefix-cache');
    this.tiers = new ZoneTiers(options.zone, options.region);
  }

  /** An objective's priority from config; unknown or absent objectives are 0. */
  priorityOf(objective: string | undefined): number {
    if (objective === undefined || !Object.hasOwn(this.config.objectives, objective)) return 0;
    return this.config.objectives[objective]?.priority ?? 0;
  }

  isPenalised(endpoint: Endpoint, now: number): boolean {
    return this.penalties.isPenalised(endpoint, now);
  }

  isSaturated(endpoint: Endpoint, now: number): boolean {
    return isSaturated(endpoint, now, this.limits);
  }

  /** Blocks held by the prefix index over all endpoints (a gauge for the EPP). */
  get prefixIndexBlocks(): number {
    return this.index.size;
  }

  pick(request: PickRequest, now: number): Decision {
    const priority = request.priority ?? this.priorityOf(request.objective);
    const sheddable = priority < 0;
    const pool = this.fleet.pool(this.pool);
    const subsetGiven = request.subset !== undefined;

    const blocks = this.hashPrompt(request);
    this.prefixDepth = blocks > 0 ? this.index.prepare(this.hashes, blocks) : 0;

    this.ignorePenalties = false;
    let eligibleLocal = 0;
    let eligible = 0;
    if (pool) {
      eligible = this.collect(pool, request, now);
      if (eligible === 0 && this.penalised > 0 && this.config.penaltyFailOpen) {
        this.ignorePenalties = true;
        eligible = this.collect(pool, request, now);
      }
      eligibleLocal = this.nLocal;
    } else {
      this.nLocal = this.nRemote = this.penalised = 0;
      this.subsetCounts.entries = this.subsetCounts.ignored = this.subsetCounts.unmatched = 0;
    }
    const counts: MutableCounts = {
      eligible,
      eligibleLocal,
      examined: this.nLocal + this.nRemote,
      saturated: 0,
      subsetEntries: this.subsetCounts.entries,
      subsetIgnored: this.subsetCounts.ignored,
      subsetUnmatched: this.subsetCounts.unmatched,
      penalised: this.penalised,
    };

    if (eligible === 0) {
      const rule: DecisionRule = !pool
        ? 'unknown-pool'
        : subsetGiven && this.config.subsetMode === 'strict'
          ? this.subsetCounts.entries === 0
            ? 'empty-subset'
            : 'subset-unmatched'
          : 'no-ready-endpoints';
      return this.decide(503, rule, [], priority, sheddable, false, subsetGiven, counts, blocks, now);
    }

    const context: ScoringContext = {
      model: request.model,
      now,
      prefixBlocks: blocks,
      prefixMatch: this.prefixMatch,
    };
    counts.saturated = this.rankLocal(context) + this.rankRemote(context);
    const outcome = buildList({
      maxEndpoints: this.config.maxEndpoints,
      crossZoneFallbacks: this.config.crossZoneFallbacks,
      sheddable,
      localUnsaturated: this.localUnsaturated,
      localSaturated: this.localSaturated,
      remoteUnsaturated: this.remoteUnsaturated,
      remoteSaturated: this.remoteSaturated,
    });
    const status = outcome.rule === 'shed' ? 429 : 'routed';
    return this.decide(status, outcome.rule, outcome.entries, priority, sheddable, outcome.localOverloaded, subsetGiven, counts, blocks, now);
  }

  /**
   * The EPP sent this decision's destination: charge the primary with the request (in-flight and
   * unsampled accounting, the anti-herding signal) and teach the prefix index what it now caches.
   * Safe to call twice; ignores decisions that were not routed.
   */
  commit(decision: Decision, now: number): void {
    const record = decision as DecisionRecord;
    if (record.status !== 'routed' || record.committed) return;
    const primary = record.primary;
    if (!primary) return;
    record.committed = true;
    this.fleet.recordPick(primary, now);
    record.chargedTo = primary;
    record.chargedAt = now;
    this.learn(primary, record);
  }

  /** The request finished (completed, failed or cancelled). Idempotent. */
  release(decision: Decision): void {
    const record = decision as DecisionRecord;
    const charged = record.chargedTo;
    if (!charged) return;
    record.chargedTo = undefined;
    this.fleet.releasePick(charged, record.chargedAt);
  }

  /**
   * The gateway reported which endpoint served the request (DESIGN §5 step 7). When it is not the
   * primary, the primary failed: it is penalised for `penaltyMs`, and the request's accounting and
   * prefix entries move to the endpoint that served it. `target` is a decision, or the primary's
   * address when the caller kept only that. Only the first report of a decision counts.
   */
  reportServed(target: Decision | string, served: string | undefined, now: number): ServedOutcome {
    const record = typeof target === 'string' ? undefined : (target as DecisionRecord);
    if (record?.served !== undefined) return record.served === record.primary?.address ? 'primary' : 'fallback';
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

    if (this.config.penaltyMs > 0) for (const primary of primaries) this.penalties.penalise(primary, now + this.config.penaltyMs);
    const servedEndpoint = pool?.routableAt(servedAddress.key)[0];
    if (record && servedEndpoint && record.chargedTo !== undefined && record.chargedTo !== servedEndpoint) {
      this.fleet.releasePick(record.chargedTo, record.chargedAt);
      this.fleet.recordPick(servedEndpoint, now);
      record.chargedTo = servedEndpoint;
      record.chargedAt = now;
      this.learn(servedEndpoint, record);
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
    this.penalties.penalise(primary, now + this.config.penaltyMs);
    return true;
  }

  /**
   * Housekeeping, for the EPP to call now and then (the reference purges every 2 min): forgets the
   * prefix entries of pods that were deleted or left the pool, and expired penalties.
   */
  prune(now: number): void {
    this.penalties.active(now);
    const pool = this.fleet.pool(this.pool);
    const gone: Endpoint[] = [];
    for (const endpoint of this.index.endpoints()) {
      if (endpoint.deleted || !pool || this.fleet.get(this.pool, endpoint.zone, endpoint.pod) !== endpoint) gone.push(endpoint);
    }
    for (const endpoint of gone) {
      this.index.drop(endpoint);
      this.penalties.forget(endpoint);
    }
  }

  private learn(endpoint: Endpoint, record: DecisionRecord): void {
    const hashes = record.prefixHashes;
    if (!hashes) return;
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

  /** Gathers the candidates into `local` and `remote`; returns the eligible count. */
  private collect(pool: PoolView, request: PickRequest, now: number): number {
    this.nLocal = 0;
    this.nRemote = 0;
    this.penalised = 0;
    this.pickNow = now;
    this.view = pool;
    this.seen.clear();
    const subset = request.subset;
    const strict = this.config.subsetMode === 'strict';
    if (subset !== undefined) {
      this.subsets.resolve(pool, subset, strict ? this.visitStrict : this.visitLocality, this.subsetCounts);
    } else {
      this.subsetCounts.entries = this.subsetCounts.ignored = this.subsetCounts.unmatched = 0;
      for (const endpoint of pool.readyInZone(this.zone)) this.addLocal(endpoint);
    }
    this.view = undefined;
    if (subset !== undefined && strict) return this.nLocal + this.nRemote;
    return this.nLocal + this.collectRemoteFromView(pool, now);
  }

  /** A subset entry's endpoint. In locality mode only local ones count: remote ones come from the view. */
  private visitSubset(endpoint: Endpoint, localOnly: boolean): void {
    const tier = this.tiers.tierOf(this.view as PoolView, endpoint.zone, this.fleet.topologyVersion);
    if (localOnly && tier !== TIER_LOCAL) return;
    if (this.seen.has(endpoint)) return;
    this.seen.add(endpoint);
    if (tier === TIER_LOCAL) this.addLocal(endpoint);
    else this.addRemote(endpoint, tier);
  }

  private addLocal(endpoint: Endpoint): void {
    if (!this.ignorePenalties && this.penalties.isPenalised(endpoint, this.pickNow)) {
      this.penalised++;
      return;
    }
    this.local[this.nLocal++] = endpoint;
  }

  private addRemote(endpoint: Endpoint, tier: number): void {
    if (!this.ignorePenalties && this.penalties.isPenalised(endpoint, this.pickNow)) {
      this.penalised++;
      return;
    }
    if (this.nRemote >= this.remoteTiers.length) {
      const grown = new Uint8Array(this.remoteTiers.length * 2);
      grown.set(this.remoteTiers);
      this.remoteTiers = grown;
    }
    this.remoteTiers[this.nRemote] = tier;
    this.remote[this.nRemote++] = endpoint;
  }

  /**
   * Remote candidates from the EPP's own view (no subset, or locality mode). Returns the remote
   * eligible count, exact from the zone indexes even though only a shortlist is scored.
   */
  private collectRemoteFromView(pool: PoolView, now: number): number {
    const version = this.fleet.topologyVersion;
    let remoteReady = 0;
    for (const zone of pool.readyZones()) if (zone !== this.zone) remoteReady += pool.readyInZone(zone).size;
    if (remoteReady === 0) return 0;

    const remote = this.config.remote;
    if (remote.refreshMs === 0 || this.ignorePenalties) {
      // Exact: every remote pod (also the rare fail-open pass, which must see penalised ones).
      const penalisedBefore = this.penalised;
      for (const zone of pool.readyZones()) {
        const tier = this.tiers.tierOf(pool, zone, version);
        if (tier === TIER_LOCAL) continue;
        for (const endpoint of pool.readyInZone(zone)) this.addRemote(endpoint, tier);
      }
      return remoteReady - (this.penalised - penalisedBefore);
    }

    if (this.shortlist.stale(now, remote.refreshMs, this.limits, this.penalties)) {
      this.shortlist.scan(pool, this.tiers, version, now, remote.shortlist, this.limits, this.penalties, this.scorers, this.tierSpan, this.rng);
    }
    this.addRemoteList(pool, this.shortlist.unsaturated, version);
    this.addRemoteList(pool, this.shortlist.saturated, version);
    // The remote pods holding the longest prefix of this prompt compete too, shortlisted or not
    // (at most a shortlist's worth, so a prompt every pod has seen costs no more than the shortlist).
    const best = this.prefixDepth > 0 ? this.index.bestHolders() : undefined;
    if (best) {
      let budget = remote.shortlist;
      for (const endpoint of best) {
        if (budget-- <= 0) break;
        if (!endpoint.ready || endpoint.deleted || this.seen.has(endpoint)) continue;
        const tier = this.tiers.tierOf(pool, endpoint.zone, version);
        if (tier === TIER_LOCAL) continue;
        this.seen.add(endpoint);
        if (!this.penalties.isPenalised(endpoint, now)) this.addRemote(endpoint, tier);
      }
    }
    const penalisedRemote = this.countPenalisedRemote(pool, now, version);
    this.penalised += penalisedRemote;
    return remoteReady - penalisedRemote;
  }

  private addRemoteList(pool: PoolView, list: readonly Endpoint[], version: number): void {
    for (const endpoint of list) {
      if (!endpoint.ready || endpoint.deleted || this.seen.has(endpoint)) continue;
      const tier = this.tiers.tierOf(pool, endpoint.zone, version);
      if (tier === TIER_LOCAL) continue;
      this.seen.add(endpoint);
      if (!this.penalties.isPenalised(endpoint, this.pickNow)) this.addRemote(endpoint, tier);
    }
  }

  private countPenalisedRemote(pool: PoolView, now: number, version: number): number {
    if (this.penalties.size === 0) return 0;
    let count = 0;
    for (const endpoint of this.penalties.active(now)) {
      if (!endpoint.ready || endpoint.deleted || endpoint.address === undefined) continue;
      if (this.tiers.tierOf(pool, endpoint.zone, version) !== TIER_LOCAL) count++;
    }
    return count;
  }

  /** Scores and ranks the local group; returns how many were saturated. */
  private rankLocal(context: ScoringContext): number {
    const n = this.nLocal;
    this.localUnsaturated.clear();
    this.localSaturated.clear();
    if (n === 0) return 0;
    const s = this.scratch;
    s.ensure(n);
    scoreGroup(this.scorers, context, this.local, n, s.scorer, s.scores);
    const max = this.config.maxEndpoints;
    this.topA.reset(max);
    this.topB.reset(max);
    let saturated = 0;
    for (let i = 0; i < n; i++) {
      if (isSaturated(this.local[i] as Endpoint, context.now, this.limits)) {
        saturated++;
        this.topB.offer(i, s.scores[i] as number, this.rng);
      } else this.topA.offer(i, s.scores[i] as number, this.rng);
    }
    fill(this.localUnsaturated, this.topA, this.local);
    fill(this.localSaturated, this.topB, this.local);
    return saturated;
  }

  /** Scores and ranks the remote group, nearest tier first; returns how many were saturated. */
  private rankRemote(context: ScoringContext): number {
    const n = this.nRemote;
    this.remoteUnsaturated.clear();
    this.remoteSaturated.clear();
    if (n === 0) return 0;
    const s = this.scratch;
    s.ensure(n);
    scoreGroup(this.scorers, context, this.remote, n, s.scorer, s.scores);
    const max = this.config.maxEndpoints;
    this.topA.reset(max);
    this.topB.reset(max);
    let saturated = 0;
    const span = this.tierSpan;
    for (let i = 0; i < n; i++) {
      const key = (2 - (this.remoteTiers[i] as number)) * span + (s.scores[i] as number);
      if (isSaturated(this.remote[i] as Endpoint, context.now, this.limits)) {
        saturated++;
        this.topB.offer(i, key, this.rng);
      } else this.topA.offer(i, key, this.rng);
    }
    fill(this.remoteUnsaturated, this.topA, this.remote, s.scores);
    fill(this.remoteSaturated, this.topB, this.remote, s.scores);
    return saturated;
  }

  private decide(
    status: Decision['status'],
    rule: DecisionRule,
    entries: Decision['entries'],
    priority: number,
    sheddable: boolean,
    localOverloaded: boolean,
    subsetGiven: boolean,
    counts: DecisionCounts,
    blocks: number,
    now: number,
  ): Decision {
    let destination = '';
    for (let i = 0; i < entries.length; i++) destination += (i === 0 ? '' : ',') + (entries[i]?.address as string);
    const primary = entries[0]?.endpoint;
    const routed = status === 'routed';
    // The local/remote scratch holds endpoint references until the next pick; that is fine, they are the fleet's.
    return new DecisionRecord(
      status,
      rule,
      entries,
      destination,
      priority,
      sheddable,
      localOverloaded,
      this.ignorePenalties,
      subsetGiven,
      counts,
      blocks,
      primary ? this.prefixMatch(primary) : 0,
      now,
      routed && blocks > 0 ? copyHashes(this.hashes, blocks) : undefined,
    );
  }
}

/** The first `count` hashes as an on-heap array of doubles (see DecisionRecord.prefixHashes). */
function copyHashes(hashes: Float64Array, count: number): number[] {
  const out: number[] = [];
  for (let i = 0; i < count; i++) out.push(hashes[i] as number);
  return out;
}

/** Copies a TopK selection into a ranked group; the key is the score unless scores are given. */
function fill(group: RankedGroup, top: TopK, from: readonly Endpoint[], scores?: Float64Array): void {
  for (let i = 0; i < top.size; i++) {
    const index = top.index[i] as number;
    group.push(from[index] as Endpoint, scores ? (scores[index] as number) : (top.key[i] as number));
  }
}
