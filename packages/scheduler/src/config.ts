import { z } from 'zod';
import { flowControlConfigSchema } from './flow-config.js';

/**
 * The scheduler's tunables (picking v2: "fixed semantics, tunable numbers"). Every object is strict
 * so a misspelt key in the EPP's config file is an error naming it, not a silently ignored value.
 * The EPP's zone, region and pool are not here: they come from its flags (SchedulerOptions).
 * Every default is explained in docs/picking.md.
 */
const weight = z.number().finite().min(0).max(1000);
const ms = z.number().finite().min(0).max(3_600_000);
const perSecond = z.number().finite().gt(0).max(1e9);

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
   * full scan at most every `refreshMs` (and when picks make it doubtful) instead of on every pick.
   * `refreshMs: 0` scans on every pick (exact, O(pool)).
   */
  refreshMs: z.number().finite().min(0).max(60_000).default(20),
  /** Remote endpoints kept on the shortlist. */
  shortlist: z.number().int().min(1).max(4096).default(16),
  /**
   * A rescan due by time is spread over the next picks, this many remote pods priced per pick, so
   * no single pick pays for the whole pool; the list in use stays the last complete one meanwhile
   * (a scan still unfinished `refreshMs` after it began is finished at once). 0 scans whole. 64:
   * a base key costs about 0.13 µs, so a pick pays at most ~8 µs for the scan, and the 667 remote
   * pods of a 1,000-pod pool are scanned in 11 picks (2 ms at 5,000 picks/s).
   */
  scanPerPick: z.number().int().min(0).max(1_000_000).default(64),
});

/**
 * Round trips between zones, added to the expected cost of an endpoint outside the EPP's zone.
 * Defaults by region; `rttMs` overrides one pair (`rttMs: { zone-a: { zone-b: 0.6 } }`; a pair given
 * in one direction holds for both).
 */
export const networkConfigSchema = z.strictObject({
  sameRegionMs: ms.default(1),
  crossRegionMs: ms.default(30),
  rttMs: z.record(z.string().min(1).max(253), z.record(z.string().min(1).max(253), ms)).default({}),
});

/**
 * What an endpoint can do when its model server does not report service rates (the optional
 * `rates` of the metrics event). Measured rates replace them as soon as they arrive.
 */
export const serviceRatesSchema = z.strictObject({
  /** Requests a saturated endpoint completes per second: how fast its waiting queue drains. */
  requestsPerS: perSecond.default(10),
  /** Uncached prompt tokens it prefills per second (an 8B model on one H100 does about 25,000). */
  prefillTokensPerS: perSecond.default(20_000),
  /**
   * Prefill's attention: the context position at which a prompt token's attention costs as much as
   * the rest of its prefill. A token at position i costs (1 + i / attentionTokens) times the
   * short-prompt rate, so a 12,000-token document costs about a quarter more per token than a chat
   * message. 0: prefill priced linearly. For an 8B model, a FLOP count gives about 30,000 (16 GFLOP
   * per token against 4 · 4096 · 32 per token of context); the routing simulation's H100
   * calibration 22,857.
   */
  attentionTokens: z.number().finite().min(0).max(10_000_000).default(23_000),
  /** A typical request's prompt, in tokens: the prefill a pick adds to its endpoint's backlog when its own prompt is unknown. */
  promptTokens: z.number().finite().min(0).max(10_000_000).default(500),
  /** Time to load a LoRA adapter the endpoint does not hold. */
  loraLoadMs: ms.default(50),
  /**
   * One engine step of an idle endpoint (a decode of one request; vLLM's step overhead): the unit of
   * batch fill. The prefill rate is for an endpoint stepping at this speed; one measured slower
   * (its inter-token time, see `batch`) prefills slower by the same factor.
   */
  stepMs: z.number().finite().gt(0).max(60_000).default(7),
});

export const ratesConfigSchema = z.strictObject({
  default: serviceRatesSchema.prefault({}),
  /** Per target model (after rewrite); fields left out come from `default`. */
  models: z.record(z.string().min(1).max(253), serviceRatesSchema.partial()).default({}),
});

/**
 * Event gaps are not overload. A sample older than the fleet's staleness limit is *stale*: the
 * endpoint is estimated from it plus this EPP's picks and completions since, and the estimate's age
 * (beyond the limit) adds `uncertaintyMsPerS` ms per second to its expected wait, at most
 * `maxUncertaintyMs`. A stale endpoint whose zone-mates' samples still arrive is *suspect* and ranks
 * after every fresh endpoint of its zone. A pod whose readiness has not been received for
 * `readinessSilenceMs` while its zone-mates' has is dropped until it is.
 */
export const gapsConfigSchema = z.strictObject({
  uncertaintyMsPerS: ms.default(2),
  maxUncertaintyMs: ms.default(4),
  readinessSilenceMs: z.number().int().min(1000).max(86_400_000).default(90_000),
});

/** Hard limits: an endpoint past them cannot admit (`full`) and is listed only when nothing else is eligible. */
export const fullConfigSchema = z.strictObject({
  /**
   * KV-cache use at which an endpoint with requests waiting can admit nothing more. A server whose
   * batch is bounded by its KV cache reports 0.95 and more whenever it is busy; that is load (priced
   * as wait), not a wall, so the default is the cache entirely full.
   */
  kvCacheUsage: z.number().gt(0).max(1).default(1),
  /** Waiting requests at which the engine's queue is full. */
  waitingRequests: z.number().int().min(1).max(1_000_000).default(1000),
});

/**
 * Prompt tokens another candidate has cached are *avoidable* work at an endpoint that has not: they
 * cost their prefill time once for this request, plus that time for each request the endpoint runs
 * (× `batchWeight`: their steps stall) and each request queued behind it (× `queueWeight`: they
 * wait longer). So a cache miss is cheap on an idle endpoint and dear on a busy one, which keeps
 * prefix affinity under load instead of spreading every prompt over every endpoint.
 */
export const avoidablePrefillSchema = z.strictObject({
  batchWeight: z.number().finite().min(0).max(100).default(0.3),
  queueWeight: z.number().finite().min(0).max(100).default(1),
});

/**
 * Batch fill and step slowdown (picking v3, docs/picking.md "Batch fill and step slowdown"). An
 * endpoint's step takes its idle step × (1 + `runningSlowdown` × running ÷ `slots` + `kvSlowdown`
 * × KV use): every running request adds its decode to each step, and a fuller cache means more
 * context read per step; a request waits about half a step to be admitted and one step per chunk
 * of its prompt (`stepTokens` less the running requests' decodes) to prefill. `slots` is also the
 * batch size assumed for a pod not yet seen full (its learnt size caps its running requests and
 * counts for its zone's use). The idle step is measured (the endpoint's inter-token time, divided
 * by that slowdown), trusted in proportion to the decode tokens behind the reading up to
 * `stepTrustTokens` (a quiet pod's few tokens say little), else `rates.*.stepMs`.
 */
export const batchConfigSchema = z.strictObject({
  slots: z.number().int().min(1).max(1_000_000).default(256),
  runningSlowdown: z.number().finite().min(0).max(100).default(1.5),
  kvSlowdown: z.number().finite().min(0).max(100).default(2.75),
  stepTokens: z.number().int().min(1).max(10_000_000).default(8192),
  stepTrustTokens: z.number().finite().min(1).max(1e12).default(10_000),
});

/**
 * The prefill backlog (docs/picking.md, "The prefill backlog"): the requests charged to an endpoint
 * in the last `horizonMs` (at most `maxCharges` of them), this EPP's and its peers', each with its
 * own uncached prompt, worked off one after the other at the endpoint's prefill rate. What is left
 * of that work is wait for the next request. When the latest sample shows a queue, `queueHead` of
 * the prefill of the request just ahead of it (the one being served then) counts too.
 */
export const backlogConfigSchema = z.strictObject({
  horizonMs: z.number().finite().min(0).max(600_000).default(2000),
  maxCharges: z.number().int().min(0).max(100_000).default(256),
  queueHead: z.number().finite().min(0).max(1).default(0.5),
});

/**
 * Displacement (docs/picking.md, "Displacement"): a request sent to another zone takes room that
 * zone needs for its own traffic. An endpoint outside the EPP's zone costs `weight` × its step ×
 * (the zone's use)^`exponent` more, where use is the share of the zone's batch slots its requests
 * fill: nothing while the zone has headroom, and steeply more as its own demand fills it, so spill
 * goes where there is room and does not push the receiving zone's own requests out.
 */
export const displacementConfigSchema = z.strictObject({
  weight: z.number().finite().min(0).max(1000).default(8),
  exponent: z.number().finite().min(0).max(64).default(2),
});

/**
 * A request's charge after its response has begun (docs/picking.md, "A request's charge"). Behind
 * the shipped Envoy config the EPP sees no completion, so a started request stays charged to the
 * endpoint that served it until a sample accounts for it or this bound passes: `slack` × (the
 * endpoint's measured queue time + the prompt at the model's prefill rate + the output limit at the
 * endpoint's measured inter-token time), within [`minMs`, `maxMs`]. The caps bound what charges hold.
 */
export const chargesConfigSchema = z
  .strictObject({
    /** Output tokens assumed when the body sets no limit (`max_tokens`, `max_completion_tokens`, `max_output_tokens`). */
    defaultMaxTokens: z.number().int().min(1).max(10_000_000).default(1024),
    /** Time per output token when the endpoint reports no inter-token time. */
    interTokenMs: z.number().finite().gt(0).max(60_000).default(30),
    slack: z.number().finite().min(1).max(100).default(2),
    minMs: z.number().finite().min(0).max(86_400_000).default(2_000),
    maxMs: z.number().finite().min(1).max(86_400_000).default(600_000),
    /** Requests charged to one endpoint at most; a new one past it ends the endpoint's oldest started charge. */
    maxPerEndpoint: z.number().int().min(1).max(1_000_000).default(4_096),
    /** Estimated bytes all charges hold at most (own requests about 2 KiB each, a peer's about 0.2 KiB). */
    maxBytes: z
      .number()
      .int()
      .min(1024 * 1024)
      .max(16 * 1024 * 1024 * 1024)
      .default(128 * 1024 * 1024),
  })
  .superRefine((value, ctx) => {
    if (value.maxMs < value.minMs) ctx.addIssue({ code: 'custom', path: ['maxMs'], message: `must be at least minMs (${value.minMs})` });
  });

/**
 * The bias fades as the EPP's zone grows fuller than the remote one (docs/picking.md, "The bias"):
 * zones' use is the share of their batch slots their requests fill; at a gap (local use − remote
 * use) up to `from` the bias is whole, from there it falls linearly to nothing at `from + width`.
 * `width: 0` (the default) keeps the bias fixed whatever the gap, so a request leaves its zone only
 * when that is faster by more than `zoneBiasMs` plus the round trip, as the picking contract says.
 * Opt in with `{ from: 0.05, width: 0.1 }` (measured in docs/picking.md): two equally loaded zones'
 * use differs by a few points on noise alone, so their requests stay home, while a zone fuller than
 * its neighbour by 15 points or more spills at the round trip's price alone.
 */
export const zoneBiasFadeSchema = z.strictObject({
  from: z.number().finite().min(0).max(10).default(0),
  width: z.number().finite().min(0).max(10).default(0),
});

export const objectiveSchema = z.strictObject({ priority: z.number().int().min(-1_000_000).max(1_000_000) });

export const schedulerConfigSchema = z.strictObject({
  maxEndpoints: z.number().int().min(1).max(64).default(3),
  crossZoneFallbacks: z.number().int().min(0).max(64).default(1),
  subsetMode: z.enum(['strict', 'locality']).default('strict'),
  /**
   * `cost`: every candidate priced in milliseconds of expected time to first token (picking v2).
   * `weighted`: the weighted scorers of the Gateway API Inference Extension's EPP (now in llm-d, the
   * reference EPP below), with the v1 saturation rule for zones.
   */
  policy: z.enum(['cost', 'weighted']).default('cost'),
  /** The price of leaving the zone: a request leaves only when that is expected to be faster by more than this plus the round trip. */
  zoneBiasMs: ms.default(8),
  zoneBiasFade: zoneBiasFadeSchema.prefault({}),
  avoidablePrefill: avoidablePrefillSchema.prefault({}),
  batch: batchConfigSchema.prefault({}),
  backlog: backlogConfigSchema.prefault({}),
  displacement: displacementConfigSchema.prefault({}),
  /** A sheddable request (priority < 0) gets 429 when the lowest expected wait exceeds this. */
  shedAboveMs: ms.default(1000),
  network: networkConfigSchema.prefault({}),
  rates: ratesConfigSchema.prefault({}),
  gaps: gapsConfigSchema.prefault({}),
  full: fullConfigSchema.prefault({}),
  /** `weighted` policy: saturated when waiting requests (plus this EPP's unsampled picks) reach this. */
  queueThreshold: z.number().int().min(1).max(1_000_000).default(5),
  /** `weighted` policy: saturated when the KV-cache use fraction reaches this. */
  kvThreshold: z.number().gt(0).max(1).default(0.8),
  /** How long a primary that the gateway did not serve (or that failed) counts as not ready. */
  penaltyMs: z.number().int().min(0).max(3_600_000).default(5000),
  /**
   * When penalties alone would leave nothing eligible, ignore them rather than answer 503: a
   * gateway that reports served endpoints in a way we misread must not take the pool down.
   */
  penaltyFailOpen: z.boolean().default(true),
  /** `weighted` policy: scorer weights (the reference EPP's defaults). */
  weights: scorerWeightsSchema.prefault({}),
  objectives: z.record(z.string().min(1).max(253), objectiveSchema).default({}),
  prefix: prefixConfigSchema.prefault({}),
  remote: remoteConfigSchema.prefault({}),
  /** Holding requests when no endpoint has room (flow-config.ts). */
  flowControl: flowControlConfigSchema.prefault({}),
  charges: chargesConfigSchema.prefault({}),
});

export type SchedulerConfig = z.output<typeof schedulerConfigSchema>;
export type SchedulerConfigInput = z.input<typeof schedulerConfigSchema>;
export type ScorerWeights = z.output<typeof scorerWeightsSchema>;
export type SubsetMode = SchedulerConfig['subsetMode'];
export type Policy = SchedulerConfig['policy'];
export type ServiceRates = z.output<typeof serviceRatesSchema>;
export type NetworkConfig = z.output<typeof networkConfigSchema>;
export type ChargesConfig = z.output<typeof chargesConfigSchema>;

/** Validates and fills defaults; throws a ZodError naming the bad field. */
export function parseSchedulerConfig(input: unknown = {}): SchedulerConfig {
  return schedulerConfigSchema.parse(input);
}
