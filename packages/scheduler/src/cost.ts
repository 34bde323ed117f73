import type { Endpoint, MetricsSample } from '@spillway/fleet';
import type { CandidateSet } from './candidates.js';
import type { SchedulerConfig, ServiceRates } from './config.js';
import { estimateLoad, isSuspect, type LoadEstimate } from './load.js';
import type { CacheIndexSource } from './kv-lookup.js';
import { TIER_LOCAL, type Tier, type ZoneNetwork } from './network.js';
import { BAND, type EntryCost, type PricingContext, type PricingPolicy } from './pricing.js';

const SUSPECT = BAND;
const FULL = 2 * BAND;
const EXCLUDED = 4 * BAND;

/** A base key and what it was computed from: the sample, the releases since it, the model's rates, the tier. */
interface BaseKeyMemo {
  metrics: MetricsSample;
  released: number;
  rates: ServiceRates;
  tier: Tier;
  key: number;
}

/**
 * The cost policy (picking v2): every candidate priced in milliseconds of the request's expected
 * time to first token there —
 *
 *   wait (queue ahead ÷ service rate, plus the prefills of requests picked just before)
 *   + prefill (uncached prompt tokens ÷ prefill rate; the precise block index says what is cached
 *     when the request has token ids and the pod KV data, else the approximate prefix index)
 *   + LoRA adapter load when the endpoint lacks the adapter
 *   + round trip from the EPP's zone + zoneBiasMs outside it
 *   + uncertainty when the sample is stale.
 *
 * Rates come from the endpoint's own measurements (the metrics event's `rates`) and fall back to
 * per-model defaults. Endpoints that are suspect, full, or excluded (fail-open pass) are pushed
 * into bands behind every ordinary endpoint, in that order.
 */
export class CostPolicy implements PricingPolicy {
  readonly limitBand = FULL;
  private readonly load: LoadEstimate = { waiting: 0, backlogged: false, kvCacheUsage: 0, ageMs: 0 };
  private readonly defaults: ServiceRates;
  private readonly perModel = new Map<string, ServiceRates>();
  private ratesModel: string | undefined = undefined;
  private modelRates: ServiceRates;
  /** Expected wait of the endpoint priced last (price reads it for the shed rule). */
  private waitMs = 0;
  /** Components of the endpoint priced last with `explain` (explain reads them). */
  private readonly parts = {
    waitMs: 0,
    prefillMs: 0,
    loraMs: 0,
    rttMs: 0,
    biasMs: 0,
    uncertaintyMs: 0,
    cachedTokens: 0,
    cacheIndex: 'approximate' as CacheIndexSource,
    stale: false,
    suspect: false,
    full: false,
    excluded: false,
  };
  private readonly batchWeight: number;
  private readonly queueWeight: number;
  /** Base keys by endpoint, with the inputs they were computed from (see baseKey). */
  private readonly memos = new Map<Endpoint, BaseKeyMemo>();
  private memoVersion = -1;

  constructor(
    private readonly config: SchedulerConfig,
    private readonly network: ZoneNetwork,
    private readonly staleAfterMs: number,
  ) {
    this.defaults = config.rates.default;
    this.modelRates = this.defaults;
    this.batchWeight = config.avoidablePrefill.batchWeight;
    this.queueWeight = config.avoidablePrefill.queueWeight;
    for (const [model, rates] of Object.entries(config.rates.models)) this.perModel.set(model, { ...this.defaults, ...rates });
  }

  price(ctx: PricingContext, candidates: CandidateSet, keys: Float64Array, waits: Float64Array): void {
    const endpoints = candidates.endpoints;
    const tiers = candidates.tiers;
    for (let i = 0; i < candidates.count; i++) {
      keys[i] = this.priceOne(ctx, endpoints[i] as Endpoint, tiers[i] as Tier, true, false);
      waits[i] = this.waitMs;
    }
  }

  /**
   * Ranks the remote shortlist, whose scan prices every remote pod every `refreshMs`. Between two
   * samples of a pod its base key stays what it was as long as nothing charged or released it and
   * the sample stays fresh (picks since the sample and a stale sample's age are what make it move
   * with time): such keys are kept per endpoint and reused, checked against every input they came
   * from. The memo is emptied whenever the topology changes, so it never holds pods that left.
   */
  baseKey(ctx: PricingContext, endpoint: Endpoint, tier: Tier): number {
    const metrics = endpoint.metrics;
    if (metrics === undefined || ctx.includeExcluded || endpoint.unsampledPicks !== 0 || ctx.now - metrics.receivedAt > this.staleAfterMs) {
      return this.priceOne(ctx, endpoint, tier, false, false);
    }
    if (ctx.topologyVersion !== this.memoVersion) {
      this.memos.clear();
      this.memoVersion = ctx.topologyVersion;
    }
    const rates = this.ratesFor(ctx.model);
    let memo = this.memos.get(endpoint);
    if (
      memo !== undefined &&
      memo.metrics === metrics &&
      memo.released === endpoint.releasedSinceSample &&
      memo.rates === rates &&
      memo.tier === tier
    ) {
      return memo.key;
    }
    const key = this.priceOne(ctx, endpoint, tier, false, false);
    if (memo === undefined) {
      memo = { metrics, released: endpoint.releasedSinceSample, rates, tier, key };
      this.memos.set(endpoint, memo);
    } else {
      memo.metrics = metrics;
      memo.released = endpoint.releasedSinceSample;
      memo.rates = rates;
      memo.tier = tier;
      memo.key = key;
    }
    return key;
  }

  shouldShed(_bestKey: number, waits: Float64Array, count: number): boolean {
    let lowest = Number.POSITIVE_INFINITY;
    for (let i = 0; i < count; i++) if ((waits[i] as number) < lowest) lowest = waits[i] as number;
    return lowest > this.config.shedAboveMs;
  }

  explain(ctx: PricingContext, endpoint: Endpoint, tier: Tier): EntryCost {
    const key = this.priceOne(ctx, endpoint, tier, true, true);
    this.parts.cacheIndex = ctx.cacheSource(endpoint);
    return this.components(key);
  }

  /** The request-independent components (no prompt: no prefill, no LoRA), for views of the pool. */
  explainBase(ctx: PricingContext, endpoint: Endpoint, tier: Tier): EntryCost {
    return this.components(this.priceOne(ctx, endpoint, tier, false, true));
  }

  /** The components of the endpoint priced last (with `explain`), whose key is `key`. */
  private components(key: number): EntryCost {
    const parts = this.parts;
    return {
      totalMs: round(key % BAND),
      waitMs: round(parts.waitMs),
      prefillMs: round(parts.prefillMs),
      loraMs: round(parts.loraMs),
      rttMs: round(parts.rttMs),
      biasMs: round(parts.biasMs),
      uncertaintyMs: round(parts.uncertaintyMs),
      cachedTokens: parts.cachedTokens,
      cacheIndex: parts.cacheIndex,
      stale: parts.stale,
      suspect: parts.suspect,
      full: parts.full,
      excluded: parts.excluded,
    };
  }

  /**
   * The key of one endpoint; with `forRequest` false, only its request-independent part. Its
   * expected wait is left in `waitMs`, and with `explain` every component in `parts`. This runs
   * for every candidate of every pick, so it reads each input once and skips work that cannot
   * change the key (a fresh sample has no uncertainty and is never suspect; the home zone has no
   * round trip); the sum is taken in one fixed order so equal inputs give equal keys.
   */
  private priceOne(ctx: PricingContext, endpoint: Endpoint, tier: Tier, forRequest: boolean, explain: boolean): number {
    const rates = this.ratesFor(ctx.model);
    const load = estimateLoad(endpoint, ctx.now, this.load);
    const metrics = endpoint.metrics;
    const measured = metrics?.rates;
    const prefillTokensPerS = rates.prefillTokensPerS;

    // Requests this EPP picked just before this one may still be prefilling when it arrives: what is
    // left of their prefills shares the steps ahead of its own (each takes about a typical time to
    // first token, so a pick made that long ago no longer counts).
    let typicalPrompt = rates.promptTokens;
    let typicalPrefillMs: number;
    let recentMs: number;
    // Waiting requests of a backlogged endpoint wait for others to finish: the queue drains at its
    // measured completion rate (floored, so one slow window does not look unbounded). Otherwise
    // they only wait for the next step to admit them: one step each at most (its inter-token time).
    let requestsPerS = rates.requestsPerS;
    let perWaitingMs: number;
    if (measured === undefined) {
      typicalPrefillMs = (typicalPrompt * 1000) / prefillTokensPerS;
      recentMs = 2 * typicalPrefillMs;
      perWaitingMs = load.backlogged ? 1000 / requestsPerS : typicalPrefillMs;
    } else {
      if (measured.requestsPerS > 0 && measured.promptTokensPerS > 0) typicalPrompt = measured.promptTokensPerS / measured.requestsPerS;
      typicalPrefillMs = (typicalPrompt * (1 - (measured.prefixHitRate ?? 0)) * 1000) / prefillTokensPerS;
      recentMs = measured.ttftMs ?? 2 * typicalPrefillMs;
      if (load.backlogged && measured.requestsPerS > 0) requestsPerS = Math.max(measured.requestsPerS, rates.requestsPerS / 4);
      perWaitingMs = load.backlogged ? 1000 / requestsPerS : (measured.itlMs ?? typicalPrefillMs);
    }
    const recentPicks = endpoint.unsampledPicks === 0 ? 0 : ctx.recentPicks(endpoint, recentMs);
    const waitMs = load.waiting * perWaitingMs + recentPicks * typicalPrefillMs;

    const stale = load.ageMs > this.staleAfterMs;
    let uncertaintyMs = 0;
    let suspect = false;
    if (stale) {
      const gaps = this.config.gaps;
      uncertaintyMs = Math.min(gaps.maxUncertaintyMs, ((load.ageMs - this.staleAfterMs) / 1000) * gaps.uncertaintyMsPerS);
      suspect = isSuspect(endpoint, ctx.pool, ctx.now, this.staleAfterMs, load.ageMs);
    }
    const limits = this.config.full;
    const full = (load.waiting > 0 && load.kvCacheUsage >= limits.kvCacheUsage) || load.waiting >= limits.waitingRequests;
    const excluded = ctx.includeExcluded && ctx.isExcluded(endpoint);
    const local = tier === TIER_LOCAL;
    const rttMs = local ? 0 : this.network.rttMs(ctx.pool, endpoint.zone, ctx.topologyVersion);
    const biasMs = local ? 0 : this.config.zoneBiasMs;

    let cachedTokens = 0;
    let prefillMs = 0;
    let loraMs = 0;
    if (forRequest) {
      cachedTokens = ctx.cachedTokens(endpoint);
      // Prompt tokens that another candidate has cached are avoidable work here: computing them
      // again also stalls the endpoint's running requests and delays every request queued behind
      // it, so under load they cost more than this request's own wait (and a miss also evicts
      // someone else's cached prefix). Tokens no candidate has cached cost the same anywhere.
      const uncached = ctx.promptTokens - cachedTokens;
      const avoidable = Math.max(0, ctx.bestCachedTokens - cachedTokens);
      const running = metrics?.runningRequests ?? 0;
      const externality = this.batchWeight * running + this.queueWeight * load.waiting;
      prefillMs = ((uncached + avoidable * externality) * 1000) / prefillTokensPerS;
      if (ctx.modelIsAdapter) loraMs = this.loraCost(endpoint, ctx.model, rates, requestsPerS);
    }
    this.waitMs = waitMs;
    if (explain) {
      const parts = this.parts;
      parts.waitMs = waitMs;
      parts.prefillMs = prefillMs;
      parts.loraMs = loraMs;
      parts.rttMs = rttMs;
      parts.biasMs = biasMs;
      parts.uncertaintyMs = uncertaintyMs;
      parts.cachedTokens = cachedTokens;
      parts.cacheIndex = 'approximate';
      parts.stale = stale;
      parts.suspect = suspect;
      parts.full = full;
      parts.excluded = excluded;
    }
    const band = (suspect ? SUSPECT : 0) + (full ? FULL : 0) + (excluded ? EXCLUDED : 0);
    return band + waitMs + prefillMs + loraMs + rttMs + biasMs + uncertaintyMs;
  }

  /**
   * LoRA affinity in the same currency (for a model known to be an adapter, see
   * PricingContext.modelIsAdapter): nothing when the endpoint runs (or is loading) the adapter or
   * reports no LoRA state; a load when it has a free adapter slot; a load plus a
   * request's service time when every slot is taken (an adapter must finish first).
   */
  private loraCost(endpoint: Endpoint, model: string, rates: ServiceRates, requestsPerS: number): number {
    const lora = endpoint.metrics?.lora;
    if (lora === undefined || lora.max === 0) return 0;
    if (lora.running.includes(model) || lora.waiting.includes(model)) return 0;
    if (lora.running.length + lora.waiting.length < lora.max) return rates.loraLoadMs;
    return rates.loraLoadMs + 1000 / requestsPerS;
  }

  /** The model's rates; the last answer is kept, since every candidate of a pick asks for the same model. */
  private ratesFor(model: string): ServiceRates {
    if (model !== this.ratesModel) {
      this.ratesModel = model;
      this.modelRates = this.perModel.get(model) ?? this.defaults;
    }
    return this.modelRates;
  }
}

function round(ms: number): number {
  return Math.round(ms * 100) / 100;
}
