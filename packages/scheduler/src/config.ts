import { z } from 'zod';

/**
 * The scheduler's tunables (DESIGN §5 "fixed semantics, tunable numbers"). Every object is strict
 * so a misspelt key in the EPP's config file is an error naming it, not a silently ignored value.
 * The EPP's zone, region and pool are not here: they come from its flags (SchedulerOptions).
 */
const weight = z.number().finite().min(0).max(1000);

export const scorerWeightsSchema = z.strictObject({
  queue: weight.default(2),
  kvCache: weight.default(2),
  prefixCache: weight.default(3),
  lora: weight.default(1),
});

export const prefixConfigSchema = z.strictObject({
  /** Tokens per hashed block; with charsPerToken it gives the block length in characters (16 × 4 = 64). */
  blockTokens: z.number().int().min(1).max(4096).default(16),
  charsPerToken: z.number().int().min(1).max(64).default(4),
  /** Blocks of a prompt that are hashed at most; the rest of a long prompt is not matched. */
  maxBlocks: z.number().int().min(1).max(65536).default(256),
  /** Blocks remembered per endpoint when its metrics do not report its cache size. */
  lruCapacity: z.number().int().min(1).max(10_000_000).default(31_250),
  /** Size each endpoint's index from its `cache.numBlocks` metric when present. */
  autoTune: z.boolean().default(true),
});

export const remoteConfigSchema = z.strictObject({
  /**
   * Without a subset, and in locality mode, remote zones are ranked from a shortlist rebuilt by a
   * full scan at most every `refreshMs` (and when the picks drain it) instead of on every pick.
   * `refreshMs: 0` scans on every pick (exact, O(pool)).
   */
  refreshMs: z.number().finite().min(0).max(60_000).default(20),
  /** Endpoints kept per shortlist (unsaturated, and separately saturated). */
  shortlist: z.number().int().min(1).max(4096).default(16),
});

export const objectiveSchema = z.strictObject({ priority: z.number().int().min(-1_000_000).max(1_000_000) });

export const schedulerConfigSchema = z.strictObject({
  maxEndpoints: z.number().int().min(1).max(64).default(3),
  crossZoneFallbacks: z.number().int().min(0).max(64).default(1),
  subsetMode: z.enum(['strict', 'locality']).default('strict'),
  /** Saturated when waiting requests (plus this EPP's unsampled picks) reach this. */
  queueThreshold: z.number().int().min(1).max(1_000_000).default(5),
  /** Saturated when the KV-cache use fraction reaches this. */
  kvThreshold: z.number().gt(0).max(1).default(0.8),
  /** How long a primary that the gateway did not serve counts as not ready. */
  penaltyMs: z.number().int().min(0).max(3_600_000).default(5000),
  /**
   * When penalties alone would leave nothing eligible, ignore them rather than answer 503: a
   * gateway that reports served endpoints in a way we misread must not take the pool down.
   */
  penaltyFailOpen: z.boolean().default(true),
  weights: scorerWeightsSchema.prefault({}),
  objectives: z.record(z.string().min(1).max(253), objectiveSchema).default({}),
  prefix: prefixConfigSchema.prefault({}),
  remote: remoteConfigSchema.prefault({}),
});

export type SchedulerConfig = z.output<typeof schedulerConfigSchema>;
export type SchedulerConfigInput = z.input<typeof schedulerConfigSchema>;
export type ScorerWeights = z.output<typeof scorerWeightsSchema>;
export type SubsetMode = SchedulerConfig['subsetMode'];

/** Validates and fills defaults; throws a ZodError naming the bad field. */
export function parseSchedulerConfig(input: unknown = {}): SchedulerConfig {
  return schedulerConfigSchema.parse(input);
}
