import type { Endpoint } from '@spillway/fleet';
import type { CandidateSet } from './candidates.js';
import type { SchedulerConfig, ServiceRates } from './config.js';
import { estimateLoad, isSuspect, type LoadEstimate } from './load.js';
import type { CacheIndexSource } from './kv-lookup.js';
import { TIER_LOCAL, type Tier, type ZoneNetwork } from './network.js';
import { BAND, type EntryCost, type PricingContext, type PricingPolicy } from './pricing.js';

const SUSPECT = BAND;
const FULL = 2 * BAND;
const EXCLUDED = 4 * BAND;

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
  // Components of the last priced endpoint (read by explain).
  private waitMs = 0;
  private prefillMs = 0;
  private loraMs = 0;
  private rttMs = 0;
  private biasMs = 0;
  private uncertaintyMs = 0;
  private cachedTokens = 0;
  private cacheIndex: CacheIndexSource = 'approximate';
  private stale = false;
  private suspect = false;
  private full = false;
  private excluded = false;

  constructor(
    private readonly config: SchedulerConfig,
    private readonly network: ZoneNetwork,
    private readonly staleAfterMs: number,
  ) {
    this.defaults = config.rates.default;
    for (const [model, rates] of Object.entries(config.rates.models)) this.perModel.set(model, { ...this.defaults, ...rates });
  }

  price(ctx: PricingContext, candidates: CandidateSet, keys: Float64Array, waits: Float64Array): void {
    const endpoints = candidates.endpoints;
    const tiers = candidates.tiers;
    for (let i = 0; i < candidates.count; i++) {
      keys[i] = this.priceOne(ctx, endpoints[i] as Endpoint, tiers[i] as Tier, true);
      waits[i] = this.waitMs;
    }
  }

  baseKey(ctx: PricingContext, endpoint: Endpoint, tier: Tier): number {
    return this.priceOne(ctx, endpoint, tier, false);
  }

  shouldShed(_bestKey: number, waits: Float64Array, count: number): boolean {
    let lowest = Number.POSITIVE_INFINITY;
    for (let i = 0; i < count; i++) if ((waits[i] as number) < lowest) lowest = waits[i] as number;
    return lowest > this.config.shedAboveMs;
  }

  explain(ctx: PricingContext, endpoint: Endpoint, tier: Tier): EntryCost {
    const key = this.priceOne(ctx, endpoint, tier, true);
    this.cacheIndex = ctx.cacheSource(endpoint);
    return this.components(key);
  }

  /** The request-independent components (no prompt: no prefill, no LoRA), for views of the pool. */
  explainBase(ctx: PricingContext, endpoint: Endpoint, tier: Tier): EntryCost {
    return this.components(this.priceOne(ctx, endpoint, tier, false));
  }

  /** The components of the endpoint priced last, whose key is `key`. */
  private components(key: number): EntryCost {
    return {
      totalMs: round(key % BAND),
      waitMs: round(this.waitMs),
      prefillMs: round(this.prefillMs),
      loraMs: round(this.loraMs),
      rttMs: round(this.rttMs),
      biasMs: round(this.biasMs),
      uncertaintyMs: round(this.uncertaintyMs),
      cachedTokens: this.cachedTokens,
      cacheIndex: this.cacheIndex,
      stale: this.stale,
      suspect: this.suspect,
      full: this.full,
      excluded: this.excluded,
    };
  }

  /** The key of one endpoint; with `forRequest` false, only its request-independent part. */
  private priceOne(ctx: PricingContext, endpoint: Endpoint, tier: Tier, forRequest: boolean): number {
    const rates = this.ratesFor(ctx.model);
    const load = estimateLoad(endpoint, ctx.now, this.load);
    const measured = endpoint.metrics?.rates;
    const prefillTokensPerS = rates.prefillTokensPerS;

    // Requests this EPP picked just before this one may still be prefilling when it arrives: what is
    // left of their prefills shares the steps ahead of its own (each takes about a typical time to
    // first token, so a pick made that long ago no longer counts).
    let typicalPrompt = rates.promptTokens;
    if (measured !== undefined && measured.requestsPerS > 0 && measured.promptTokensPerS > 0) typicalPrompt = measured.promptTokensPerS / measured.requestsPerS;
    const typicalPrefillMs = (typicalPrompt * (1 - (measured?.prefixHitRate ?? 0)) * 1000) / prefillTokensPerS;
    const recentMs = measured?.ttftMs ?? 2 * typicalPrefillMs;
    const recentPicks = ctx.recentPicks(endpoint, recentMs);
    // Waiting requests of a backlogged endpoint wait for others to finish: the queue drains at its
    // measured completion rate (floored, so one slow window does not look unbounded). Otherwise
    // they only wait for the next step to admit them: one step each at most (its inter-token time).
    const requestsPerS = load.backlogged && measured !== undefined && measured.requestsPerS > 0 ? Math.max(measured.requestsPerS, rates.requestsPerS / 4) : rates.requestsPerS;
    const perWaitingMs = load.backlogged ? 1000 / requestsPerS : (measured?.itlMs ?? typicalPrefillMs);
    this.waitMs = load.waiting * perWaitingMs + recentPicks * typicalPrefillMs;

    this.stale = load.ageMs > this.staleAfterMs;
    this.uncertaintyMs = this.stale ? Math.min(this.config.gaps.maxUncertaintyMs, ((load.ageMs - this.staleAfterMs) / 1000) * this.config.gaps.uncertaintyMsPerS) : 0;
    this.suspect = this.stale && isSuspect(endpoint, ctx.pool, ctx.now, this.staleAfterMs, load.ageMs);
    const full = this.config.full;
    this.full = (load.waiting > 0 && load.kvCacheUsage >= full.kvCacheUsage) || load.waiting >= full.waitingRequests;
    this.excluded = ctx.includeExcluded && ctx.isExcluded(endpoint);
    this.rttMs = this.network.rttMs(ctx.pool, endpoint.zone, ctx.topologyVersion);
    this.biasMs = tier === TIER_LOCAL ? 0 : this.config.zoneBiasMs;

    if (forRequest) {
      const cached = ctx.cachedTokens(endpoint);
      this.cachedTokens = cached;
      // Prompt tokens that another candidate has cached are avoidable work here: computing them
      // again also stalls the endpoint's running requests and delays every request queued behind
      // it, so under load they cost more than this request's own wait (and a miss also evicts
      // someone else's cached prefix). Tokens no candidate has cached cost the same anywhere.
      const uncached = ctx.promptTokens - cached;
      const avoidable = Math.max(0, ctx.bestCachedTokens - cached);
      const running = endpoint.metrics?.runningRequests ?? 0;
      const weights = this.config.avoidablePrefill;
      const externality = weights.batchWeight * running + weights.queueWeight * load.waiting;
      this.prefillMs = ((uncached + avoidable * externality) * 1000) / prefillTokensPerS;
      this.loraMs = ctx.modelIsAdapter ? this.loraCost(endpoint, ctx.model, rates, requestsPerS) : 0;
    } else {
      this.cachedTokens = 0;
      this.cacheIndex = 'approximate';
      this.prefillMs = 0;
      this.loraMs = 0;
    }
    const band = (this.suspect ? SUSPECT : 0) + (this.full ? FULL : 0) + (this.excluded ? EXCLUDED : 0);
    return band + this.waitMs + this.prefillMs + this.loraMs + this.rttMs + this.biasMs + this.uncertaintyMs;
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

  private ratesFor(model: string): ServiceRates {
    return this.perModel.get(model) ?? this.defaults;
  }
}

function round(ms: number): number {
  return Math.round(ms * 100) / 100;
}
