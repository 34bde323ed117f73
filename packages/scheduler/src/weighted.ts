import type { Endpoint } from '@spillway/fleet';
import type { CandidateSet } from './candidates.js';
import type { SchedulerConfig } from './config.js';
import { isSuspect } from './load.js';
import { TIER_LOCAL, TIER_OTHER, type Tier } from './network.js';
import { BAND, type EntryScore, type PricingContext, type PricingPolicy } from './pricing.js';
import { effectiveQueue, maxTotal, scoreGroup, type ScoringContext, type WeightedScorer } from './scorers.js';
import { Scratch } from './buffers.js';

/**
 * The weighted policy: the scorers of the Gateway API Inference Extension's EPP (now in llm-d; the
 * reference EPP below) (queue 2, KV 2, prefix 3, LoRA 1), each in
 * [0, 1], summed with weights, higher is better — with v1's zone rule on top: the local zone first
 * while any local endpoint is unsaturated, then remote zones nearest first, saturated endpoints
 * last. Expressed as keys (lower is better) so the list is built exactly as for the cost policy:
 *
 *   band 0 local unsaturated < 1 remote unsaturated < 2 local saturated < 3 remote saturated,
 *   another region behind its own region within a band, then (maxTotal − score).
 *
 * Saturated: waiting + unsampled picks ≥ queueThreshold or KV use ≥ kvThreshold. A stale sample
 * alone is not saturation (event gaps are not overload); a suspect endpoint counts as saturated.
 * In strict mode with a subset of one zone this is the reference EPP's pick among the subset.
 */
export class WeightedPolicy implements PricingPolicy {
  readonly limitBand = 2 * BAND;
  private readonly span: number;
  private readonly scratch = new Scratch();
  private readonly single: Endpoint[] = [];
  private readonly singleArrays = { scorer: new Float64Array(1), scores: new Float64Array(1) };

  constructor(
    private readonly config: SchedulerConfig,
    private readonly scorers: readonly WeightedScorer[],
    private readonly staleAfterMs: number,
  ) {
    this.span = maxTotal(scorers) + 1;
  }

  price(ctx: PricingContext, candidates: CandidateSet, keys: Float64Array, _waits: Float64Array): void {
    const n = candidates.count;
    const s = this.scratch;
    s.ensure(n);
    scoreGroup(this.scorers, this.scoring(ctx), candidates.endpoints, n, s);
    for (let i = 0; i < n; i++) {
      keys[i] = this.key(ctx, candidates.endpoints[i] as Endpoint, candidates.tiers[i] as Tier, s.scores[i] as number);
    }
  }

  baseKey(ctx: PricingContext, endpoint: Endpoint, tier: Tier): number {
    // The queue scorer normalises over a group, which one endpoint alone does not have: rank the
    // shortlist by the same inputs, unnormalised.
    const weights = this.config.weights;
    const queue = Math.min(1, effectiveQueue(endpoint) / this.config.queueThreshold);
    const kv = endpoint.metrics?.kvCacheUsage ?? 1;
    const score = weights.queue * (1 - queue) + weights.kvCache * (1 - kv);
    return this.key(ctx, endpoint, tier, score);
  }

  shouldShed(bestKey: number): boolean {
    return bestKey >= this.limitBand;
  }

  explain(ctx: PricingContext, endpoint: Endpoint, _tier: Tier): EntryScore {
    this.single[0] = endpoint;
    scoreGroup(this.scorers, this.scoring(ctx), this.single, 1, this.singleArrays);
    this.single.length = 0;
    const ageMs = endpoint.metrics ? ctx.now - endpoint.metrics.receivedAt : Number.POSITIVE_INFINITY;
    return {
      score: Math.round((this.singleArrays.scores[0] as number) * 1000) / 1000,
      saturated: this.saturated(endpoint),
      stale: ageMs > this.staleAfterMs,
      suspect: isSuspect(endpoint, ctx.pool, ctx.now, this.staleAfterMs, ageMs),
      excluded: ctx.includeExcluded && ctx.isExcluded(endpoint),
    };
  }

  private key(ctx: PricingContext, endpoint: Endpoint, tier: Tier, score: number): number {
    const ageMs = endpoint.metrics ? ctx.now - endpoint.metrics.receivedAt : Number.POSITIVE_INFINITY;
    const behind = this.saturated(endpoint) || isSuspect(endpoint, ctx.pool, ctx.now, this.staleAfterMs, ageMs);
    let band = (behind ? 2 : 0) + (tier === TIER_LOCAL ? 0 : 1);
    if (ctx.includeExcluded && ctx.isExcluded(endpoint)) band += 4;
    return band * BAND + (tier === TIER_OTHER ? this.span : 0) + (this.span - 1 - score);
  }

  private saturated(endpoint: Endpoint): boolean {
    const metrics = endpoint.metrics;
    if (metrics === undefined) return false;
    return effectiveQueue(endpoint) >= this.config.queueThreshold || metrics.kvCacheUsage >= this.config.kvThreshold;
  }

  private scoring(ctx: PricingContext): ScoringContext {
    return { model: ctx.model, now: ctx.now, prefixBlocks: ctx.prefixBlocks, prefixMatch: ctx.prefixMatch };
  }
}
