import type { Endpoint } from '@spillway/fleet';
import type { ScorerWeights } from './config.js';

/**
 * The queue the endpoint really has: the sample's waiting requests plus the picks this EPP made
 * that the sample cannot have seen. Counting those picks as waiting is pessimistic (some will have
 * started running) and that is the point: a burst between two samples spreads over endpoints
 * instead of piling onto the one that looked best at the last sample.
 */
export function effectiveQueue(endpoint: Endpoint): number {
  const metrics = endpoint.metrics;
  return (metrics ? metrics.waitingRequests : 0) + endpoint.unsampledPicks;
}

/** What a scorer may know about the request being picked for. */
export interface ScoringContext {
  /** Target model after rewrite: LoRA affinity compares it with the adapters an endpoint runs. */
  readonly model: string;
  readonly now: number;
  /** Hashed blocks of the prompt (0 when the prompt is shorter than a block or absent). */
  readonly prefixBlocks: number;
  /** Leading prompt blocks this endpoint is believed to cache (O(log blocks)). */
  prefixMatch(endpoint: Endpoint): number;
}

/**
 * One scorer (the shape of Scorer.Score in the Gateway API Inference Extension's EPP, now in llm-d,
 * called the reference EPP below): writes a score in [0, 1] per candidate,
 * higher is better, for `candidates[0..count)` into `out[0..count)`. A group is scored in one call
 * because some formulas (queue depth) normalise over the group.
 */
export interface Scorer {
  readonly name: string;
  score(context: ScoringContext, candidates: readonly Endpoint[], count: number, out: Float64Array): void;
}

export interface WeightedScorer {
  readonly scorer: Scorer;
  readonly weight: number;
}

/**
 * Queue depth, min–max normalised over the group: (max − q) / (max − min), all equal -> 1. The
 * queue includes this EPP's unsampled picks (anti-herding). An endpoint without metrics scores 0.
 */
export const queueScorer: Scorer = {
  name: 'queue',
  score(_context, candidates, count, out) {
    let min = Infinity;
    let max = -Infinity;
    for (let i = 0; i < count; i++) {
      const endpoint = candidates[i] as Endpoint;
      if (endpoint.metrics === undefined) continue;
      const q = effectiveQueue(endpoint);
      if (q < min) min = q;
      if (q > max) max = q;
    }
    const span = max - min;
    for (let i = 0; i < count; i++) {
      const endpoint = candidates[i] as Endpoint;
      if (endpoint.metrics === undefined) out[i] = 0;
      else out[i] = span > 0 ? (max - effectiveQueue(endpoint)) / span : 1;
    }
  },
};

/** KV-cache use: 1 − usage. An endpoint without metrics scores 0. */
export const kvCacheScorer: Scorer = {
  name: 'kv-cache',
  score(_context, candidates, count, out) {
    for (let i = 0; i < count; i++) {
      const metrics = (candidates[i] as Endpoint).metrics;
      out[i] = metrics ? 1 - metrics.kvCacheUsage : 0;
    }
  },
};

/**
 * LoRA affinity (reference formula): 1 when the target model is running, 0.8 when the endpoint has
 * room to load another adapter, 0.6 when it is waiting, else 0.
 */
export const loraScorer: Scorer = {
  name: 'lora',
  score(context, candidates, count, out) {
    const model = context.model;
    for (let i = 0; i < count; i++) {
      const lora = (candidates[i] as Endpoint).metrics?.lora;
      if (lora === undefined) out[i] = 0;
      else if (lora.running.includes(model)) out[i] = 1;
      else if (lora.running.length + lora.waiting.length < lora.max) out[i] = 0.8;
      else if (lora.waiting.includes(model)) out[i] = 0.6;
      else out[i] = 0;
    }
  },
};

/** Approximate prefix-cache affinity: matched leading blocks / prompt blocks; 0 without blocks. */
export const prefixCacheScorer: Scorer = {
  name: 'prefix-cache',
  score(context, candidates, count, out) {
    const total = context.prefixBlocks;
    if (total === 0) {
      out.fill(0, 0, count);
      return;
    }
    for (let i = 0; i < count; i++) out[i] = context.prefixMatch(candidates[i] as Endpoint) / total;
  },
};

/** The default profile (the reference EPP's default scorers plus LoRA), weighted from the config. Weight 0 drops a scorer. */
export function defaultScorers(weights: ScorerWeights): WeightedScorer[] {
  return [
    { scorer: queueScorer, weight: weights.queue },
    { scorer: kvCacheScorer, weight: weights.kvCache },
    { scorer: prefixCacheScorer, weight: weights.prefixCache },
    { scorer: loraScorer, weight: weights.lora },
  ].filter((entry) => entry.weight > 0);
}

/** The reused arrays of a scoring pass, each at least as long as the group. */
export interface ScoreArrays {
  /** One scorer's scores (scratch). */
  readonly scorer: Float64Array;
  /** The weighted sums. */
  readonly scores: Float64Array;
}

/**
 * Weighted sum of scorers over a group, each score clamped to [0, 1] (as the reference EPP does), into
 * `arrays.scores`. Pure arithmetic over reused arrays.
 */
export function scoreGroup(
  scorers: readonly WeightedScorer[],
  context: ScoringContext,
  candidates: readonly Endpoint[],
  count: number,
  arrays: ScoreArrays,
): void {
  const { scorer: scratch, scores: total } = arrays;
  total.fill(0, 0, count);
  for (const { scorer, weight } of scorers) {
    scorer.score(context, candidates, count, scratch);
    for (let i = 0; i < count; i++) {
      const s = scratch[i] as number;
      // NaN (a buggy custom scorer) counts as 0 rather than poisoning the ranking.
      total[i] = (total[i] as number) + weight * (s > 1 ? 1 : s >= 0 ? s : 0);
    }
  }
}

/** Upper bound of a weighted sum, used to order tiers strictly ahead of scores in one key. */
export function maxTotal(scorers: readonly WeightedScorer[]): number {
  let sum = 0;
  for (const { weight } of scorers) sum += weight;
  return sum;
}
