import type { Endpoint, PrefillAhead, PrefillRate } from '@spillway/fleet';
import type { CandidateSet } from './candidates.js';
import type { SchedulerConfig, ServiceRates } from './config.js';
import { estimateLoad, isSuspect, type LoadEstimate } from './load.js';
import type { CacheIndexSource } from './kv-lookup.js';
import { TIER_LOCAL, type Tier, type ZoneNetwork } from './network.js';
import { BAND, type EntryCost, type PricingContext, type PricingPolicy } from './pricing.js';
import { slotsOf, stepSlowdown, ZoneFiguresCache, type ZoneFigures } from './zone-figures.js';

const SUSPECT = BAND;
const FULL = 2 * BAND;
const EXCLUDED = 4 * BAND;

/**
 * A base key's parts that stay put between two samples of its pod, and what they were computed from:
 * the sample (by its receive time: the fleet updates the sample object in place), the releases
 * since it, the model's rates, the tier, the zone's measured speed. The prefill backlog and
 * displacement move with time and with the rest of the zone: they are added afresh, from the step
 * and time per token kept here.
 */
interface BaseKeyMemo {
  sampledAt: number;
  released: number;
  rates: ServiceRates;
  tier: Tier;
  zoneSpeed: number;
  zoneTrust: number;
  stepMs: number;
  chunkTokens: number;
  msPerToken: number;
  rest: number;
}

/**
 * The cost policy (picking v3): every candidate priced in milliseconds of the request's expected
 * time to first token there —
 *
 *   wait (the queue ahead: one step per waiting request, or its completion rate once the queue
 *     persists; half a step to be admitted; what is left of the prefills of the requests charged
 *     to it just before, each with its own prompt)
 *   + prefill (uncached prompt tokens at the endpoint's prefill rate, plus one step per chunk: the
 *     step is slower the fuller the batch and the KV cache; the precise block index says what is
 *     cached when the request has token ids and the pod KV data, else the approximate prefix index)
 *   + LoRA adapter load when the endpoint lacks the adapter
 *   + round trip from the EPP's zone + zoneBiasMs outside it (fading as the EPP's zone is fuller than that one)
 *   + displacement outside it (the receiving zone's own demand for the room it takes)
 *   + uncertainty when the sample is stale.
 *
 * Rates come from the endpoint's own measurements (the metrics event's `rates`) and fall back to
 * per-model defaults. Endpoints that are suspect, full, or excluded (fail-open pass) are pushed
 * into bands behind every ordinary endpoint, in that order. docs/picking.md explains every term.
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
  /** Components of the endpoint priced last with `explain` (explain reads them; the step, time per token, backlog and displacement after every pricing). */
  private readonly parts = {
    waitMs: 0,
    prefillMs: 0,
    loraMs: 0,
    rttMs: 0,
    biasMs: 0,
    displacementMs: 0,
    uncertaintyMs: 0,
    stepMs: 0,
    chunkTokens: 1,
    stepTrust: 0,
    running: 0,
    slots: 0,
    kvUse: 0,
    aheadMs: 0,
    aheadTokens: 0,
    prefillMsPerToken: 0,
    zoneUse: 0,
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
  /** Zones' use and measured speed (zone-figures.ts). */
  private readonly zones: ZoneFiguresCache;
  private lastFigures: ZoneFigures | undefined;
  private lastFiguresSeq = -1;
  private lastFiguresZone = '';
  private lastFiguresRates: ServiceRates | undefined;
  /** Fleet.prefillAhead's answer for the endpoint priced last. */
  private readonly ahead: PrefillAhead = { ms: 0, tokens: 0 };
  /** The prefill rate it is asked at (reused: set before each call, so no pick allocates one). */
  private readonly rate: PrefillRate = { msPerToken: 0, attentionTokens: 0, stepMs: 0, chunkTokens: 1 };

  constructor(
    private readonly config: SchedulerConfig,
    private readonly network: ZoneNetwork,
    private readonly staleAfterMs: number,
  ) {
    this.zones = new ZoneFiguresCache(config);
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
   * samples of a pod most of its base key stays what it was as long as nothing charged or released
   * it, the sample stays fresh and its zone's measured speed holds (picks since the sample and a
   * stale sample's age are what make it move with time): that part is kept per endpoint and reused,
   * checked against every input it came from, and what still moves — the prefill backlog, and the
   * displacement its zone's use prices — is added afresh. The memo is emptied whenever the
   * topology changes, so it never holds pods that left.
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
    const figures = this.zoneFigures(ctx, endpoint.zone, rates);
    let memo = this.memos.get(endpoint);
    if (
      memo !== undefined &&
      memo.sampledAt === metrics.receivedAt &&
      memo.released === endpoint.releasedSinceSample &&
      memo.rates === rates &&
      memo.tier === tier &&
      memo.zoneSpeed === figures.speed &&
      memo.zoneTrust === figures.trust
    ) {
      // What moves with time and with the rest of the zone: the prefill backlog, and displacement.
      const aheadMs = ctx.prefillAhead(endpoint, this.rateOf(memo.msPerToken, memo.stepMs, memo.chunkTokens, rates), this.ahead);
      if (tier === TIER_LOCAL) return memo.rest + aheadMs;
      return memo.rest + aheadMs + this.displacementMs(memo.stepMs, figures.use) + this.biasMs(ctx, rates, figures.use);
    }
    const key = this.priceOne(ctx, endpoint, tier, false, false);
    const rest = key - this.parts.aheadMs - this.parts.displacementMs - this.parts.biasMs;
    if (memo === undefined) {
      memo = {
        sampledAt: metrics.receivedAt,
        released: endpoint.releasedSinceSample,
        rates,
        tier,
        zoneSpeed: figures.speed,
        zoneTrust: figures.trust,
        stepMs: this.parts.stepMs,
        chunkTokens: this.parts.chunkTokens,
        msPerToken: this.parts.prefillMsPerToken,
        rest,
      };
      this.memos.set(endpoint, memo);
    } else {
      memo.sampledAt = metrics.receivedAt;
      memo.released = endpoint.releasedSinceSample;
      memo.rates = rates;
      memo.tier = tier;
      memo.zoneSpeed = figures.speed;
      memo.zoneTrust = figures.trust;
      memo.stepMs = this.parts.stepMs;
      memo.chunkTokens = this.parts.chunkTokens;
      memo.msPerToken = this.parts.prefillMsPerToken;
      memo.rest = rest;
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
      displacementMs: round(parts.displacementMs),
      uncertaintyMs: round(parts.uncertaintyMs),
      stepMs: round(parts.stepMs),
      stepTrust: round(parts.stepTrust),
      running: round(parts.running),
      slots: parts.slots,
      kvUse: round(parts.kvUse),
      aheadMs: round(parts.aheadMs),
      aheadTokens: Math.round(parts.aheadTokens),
      prefillMsPerToken: Math.round(parts.prefillMsPerToken * 1e5) / 1e5,
      zoneUse: round(parts.zoneUse),
      cachedTokens: parts.cachedTokens,
      cacheIndex: parts.cacheIndex,
      stale: parts.stale,
      suspect: parts.suspect,
      full: parts.full,
      excluded: parts.excluded,
    };
  }

  /**
   * The key of one endpoint; with `forRequest` false, only its request-independent part (an empty
   * prompt's). Its expected wait is left in `waitMs`, and with `explain` every component in
   * `parts`. This runs for every candidate of every pick, so it reads each input once and skips
   * work that cannot change the key (a fresh sample has no uncertainty and is never suspect; the
   * home zone has no round trip and no displacement); the sum is taken in one fixed order so equal
   * inputs give equal keys.
   */
  private priceOne(ctx: PricingContext, endpoint: Endpoint, tier: Tier, forRequest: boolean, explain: boolean): number {
    const rates = this.ratesFor(ctx.model);
    const load = estimateLoad(endpoint, ctx.now, this.load);
    const metrics = endpoint.metrics;
    const measured = metrics?.rates;
    const batch = this.config.batch;

    // Batch fill: the requests running there now (the sample's, plus picks it cannot have seen,
    // minus those seen finishing since), against its slots, and its KV use.
    const slots = slotsOf(endpoint, batch.slots);
    const sampledRunning = metrics?.runningRequests ?? 0;
    const running = Math.min(slots, Math.max(0, sampledRunning + endpoint.unsampledPicks - endpoint.releasedSinceSample));
    const kvUse = load.kvCacheUsage;
    // The idle step: the configured one at the speed its zone's pods are measured to step, as far
    // as the decode tokens behind that reading can be trusted (zone-figures.ts).
    const figures = this.zoneFigures(ctx, endpoint.zone, rates);
    const stepTrust = figures.trust;
    const idleStepMs = rates.stepMs * (stepTrust * figures.speed + (1 - stepTrust));
    const stepMs = idleStepMs * stepSlowdown(batch, running, kvUse);
    // Prefill runs at the configured rate on an endpoint stepping at the configured speed; one that
    // steps slower (a slower GPU, a bigger model than configured) prefills slower by as much.
    const msPerToken = (1000 / rates.prefillTokensPerS) * (idleStepMs / rates.stepMs);

    // Waiting requests of a backlogged endpoint wait for others to finish: the queue drains at its
    // measured completion rate (floored, so one slow window does not look unbounded). Otherwise
    // they only wait for the next step to admit them: one step each at most.
    let requestsPerS = rates.requestsPerS;
    if (load.backlogged && measured !== undefined && measured.requestsPerS > 0) {
      requestsPerS = Math.max(measured.requestsPerS, rates.requestsPerS / 4);
    }
    const perWaitingMs = load.backlogged ? 1000 / requestsPerS : stepMs;
    // What is left of the prefills of the requests charged there just before (this EPP's and its
    // peers', each with its own uncached prompt and a step per chunk of it), and half a step to be admitted.
    // The prompt is cut into chunks of what a step has left beside the running requests' decodes.
    const chunkTokens = Math.max(1, batch.stepTokens - running);
    const aheadMs = ctx.prefillAhead(endpoint, this.rateOf(msPerToken, stepMs, chunkTokens, rates), this.ahead);
    const waitMs = load.waiting * perWaitingMs + 0.5 * stepMs + aheadMs;

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
    let rttMs = 0;
    let biasMs = 0;
    let zoneUse = 0;
    let displacementMs = 0;
    if (!local) {
      rttMs = this.network.rttMs(ctx.pool, endpoint.zone, ctx.topologyVersion);
      zoneUse = figures.use;
      biasMs = this.biasMs(ctx, rates, zoneUse);
      displacementMs = this.displacementMs(stepMs, zoneUse);
    }

    let cachedTokens = 0;
    let uncached = 0;
    let avoidableWork = 0;
    let loraMs = 0;
    if (forRequest) {
      cachedTokens = ctx.cachedTokens(endpoint);
      // Prompt tokens that another candidate has cached are avoidable work here: computing them
      // again also stalls the endpoint's running requests and delays every request queued behind
      // it, so under load they cost more than this request's own wait (and a miss also evicts
      // someone else's cached prefix). Tokens no candidate has cached cost the same anywhere.
      uncached = Math.max(0, ctx.promptTokens - cachedTokens);
      const avoidable = Math.max(0, ctx.bestCachedTokens - cachedTokens);
      avoidableWork = avoidable * (this.batchWeight * sampledRunning + this.queueWeight * load.waiting);
      if (ctx.modelIsAdapter) loraMs = this.loraCost(endpoint, ctx.model, rates, requestsPerS);
    }
    // Each chunk of the prompt is one step of the batch (one at least: a cached prompt still computes its last block).
    const chunks = Math.max(1, Math.ceil(uncached / chunkTokens));
    // Attention: the uncached tokens attend to everything before them, the cached prefix included.
    const attentionMs = forRequest ? attentionOf(ctx.promptTokens, ctx.promptTokens - uncached, msPerToken, rates.attentionTokens) : 0;
    const prefillMs = (uncached + avoidableWork) * msPerToken + attentionMs + chunks * stepMs;
    this.waitMs = waitMs;
    // Always: what baseKey's memo keeps, and adds afresh.
    const parts = this.parts;
    parts.stepMs = stepMs;
    parts.chunkTokens = chunkTokens;
    parts.prefillMsPerToken = msPerToken;
    parts.aheadMs = aheadMs;
    parts.displacementMs = displacementMs;
    parts.biasMs = biasMs;
    if (explain) {
      parts.waitMs = waitMs;
      parts.prefillMs = prefillMs;
      parts.loraMs = loraMs;
      parts.rttMs = rttMs;
      parts.uncertaintyMs = uncertaintyMs;
      parts.stepTrust = stepTrust;
      parts.running = running;
      parts.slots = slots;
      parts.kvUse = kvUse;
      parts.aheadTokens = this.ahead.tokens;
      parts.zoneUse = zoneUse;
      parts.cachedTokens = cachedTokens;
      parts.cacheIndex = 'approximate';
      parts.stale = stale;
      parts.suspect = suspect;
      parts.full = full;
      parts.excluded = excluded;
    }
    const band = (suspect ? SUSPECT : 0) + (full ? FULL : 0) + (excluded ? EXCLUDED : 0);
    return band + waitMs + prefillMs + loraMs + rttMs + biasMs + displacementMs + uncertaintyMs;
  }

  /**
   * The price of leaving the zone for one whose use is `remoteUse`: `zoneBiasMs`, fading (with
   * `zoneBiasFade`) as the EPP's own zone is fuller than that one. The bias is there so that two
   * zones equally loaded do not trade requests on noise; a zone persistently fuller than its
   * neighbour is not noise, and a fixed bias would only keep it fuller by as much.
   */
  private biasMs(ctx: PricingContext, rates: ServiceRates, remoteUse: number): number {
    const bias = this.config.zoneBiasMs;
    const { from, width } = this.config.zoneBiasFade;
    if (width === 0 || bias === 0) return bias;
    const gap = this.zones.of(ctx.pool, this.network.zone, rates, ctx).use - remoteUse - from;
    if (gap <= 0) return bias;
    return gap >= width ? 0 : bias * (1 - gap / width);
  }

  /** What a request sent to a zone this full displaces there, on an endpoint of this step (config `displacement`). */
  private displacementMs(stepMs: number, zoneUse: number): number {
    const displacement = this.config.displacement;
    if (displacement.weight === 0) return 0;
    return displacement.weight * stepMs * Math.pow(Math.min(zoneUse, MAX_ZONE_USE), displacement.exponent);
  }

  /**
   * The zone's figures; the last answer is kept for the rest of its pick (a pick prices a zone's
   * endpoints one after another, and figures never change within a pick), sparing the per-model
   * and per-zone lookups for every endpoint priced.
   */
  private zoneFigures(ctx: PricingContext, zone: string, rates: ServiceRates): ZoneFigures {
    const last = this.lastFigures;
    if (last !== undefined && ctx.pickSeq === this.lastFiguresSeq && zone === this.lastFiguresZone && rates === this.lastFiguresRates)
      return last;
    const figures = this.zones.of(ctx.pool, zone, rates, ctx);
    this.lastFigures = figures;
    this.lastFiguresSeq = ctx.pickSeq;
    this.lastFiguresZone = zone;
    this.lastFiguresRates = rates;
    return figures;
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

  /** The reused prefill rate: `msPerToken` and the model's attention, a step of `stepMs` per chunk of `chunkTokens`. */
  private rateOf(msPerToken: number, stepMs: number, chunkTokens: number, rates: ServiceRates): PrefillRate {
    this.rate.msPerToken = msPerToken;
    this.rate.stepMs = stepMs;
    this.rate.chunkTokens = chunkTokens;
    this.rate.attentionTokens = rates.attentionTokens;
    return this.rate;
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

/**
 * The attention part of prefilling prompt positions `from` up to `to` (a token at position i costs
 * msPerToken · i / attentionTokens beyond the linear rate; rates.attentionTokens): 0 when off.
 */
function attentionOf(to: number, from: number, msPerToken: number, attentionTokens: number): number {
  if (attentionTokens <= 0 || to <= from) return 0;
  return ((to * to - from * from) * msPerToken) / (2 * attentionTokens);
}

/** A zone over-full by more than this prices as this full (the displacement term stays bounded). */
const MAX_ZONE_USE = 2;

function round(ms: number): number {
  return Math.round(ms * 100) / 100;
}
