import { z } from 'zod';
import { parseEndpointAddress } from './address.js';
import { kvKnownSchema, MAX_KV_INFO_TEXT, MAX_KV_RANK } from './kv.js';

/**
 * The v1 event contract (docs/events.md). Unknown fields are stripped (forward compatible); every
 * field present is range-checked, and one bad field rejects the whole event.
 */
const name = z.string().min(1).max(253);
const count = z.number().int().nonnegative().max(Number.MAX_SAFE_INTEGER);
const epochMs = z.number().finite().nonnegative().max(8.64e15);
const address = z.string().refine((text) => parseEndpointAddress(text) !== undefined, {
  message: 'must be ip:port, or [ipv6]:port, with a port in 1..65535',
});

/** The kinds of contract v1, in subject order (the last subject token). */
export const EVENT_KINDS = ['readiness', 'metrics', 'kv'] as const;

export const ENGINES = ['vllm', 'sglang', 'trtllm', 'triton'] as const;

// Generous ceilings: far above any real server, low enough that a broken counter cannot pass
// off as a rate. A latency of an hour or a window of an hour is already meaningless for picking.
const perSecond = z.number().finite().nonnegative().max(1e9);
const latencyMs = z.number().finite().nonnegative().max(3_600_000);
// A rate a reader divides by (a prompt's prefill time is its uncached tokens over it): never 0.
const positivePerSecond = z.number().finite().positive().max(1e9);

/**
 * Service rates measured at the source (optional part of a metrics event): deltas of the model
 * server's counters and histogram `_sum`/`_count` over the last `windowMs`. The three throughputs
 * come together or not at all; the means are left out when nothing happened in the window.
 * `prefillMs` and `prefillTokensPerS` were added later (optional, so readers from before them
 * strip them and accept the event): the mean prefill time per request (scheduled → first token,
 * vLLM's `request_prefill_time_seconds`) and the uncached prompt tokens prefilled per second of
 * that time; present only when the window observed prefill time.
 */
export const serviceRatesSchema = z.object({
  windowMs: z.number().int().min(1).max(3_600_000),
  promptTokensPerS: perSecond,
  generationTokensPerS: perSecond,
  requestsPerS: perSecond,
  ttftMs: latencyMs.optional(),
  queueMs: latencyMs.optional(),
  itlMs: latencyMs.optional(),
  prefixHitRate: z.number().min(0).max(1).optional(),
  prefillMs: latencyMs.optional(),
  prefillTokensPerS: positivePerSecond.optional(),
});

export const readinessEventSchema = z.object({
  v: z.literal(1),
  kind: z.literal('readiness'),
  pool: name,
  zone: name,
  region: name.optional(),
  pod: name,
  address,
  ready: z.boolean(),
  deleted: z.boolean().optional(),
  engine: z.enum(ENGINES).optional(),
  labels: z.record(z.string().max(253), z.string().max(1024)).optional(),
  observedAt: epochMs,
});

export const metricsEventSchema = z.object({
  v: z.literal(1),
  kind: z.literal('metrics'),
  pool: name,
  zone: name,
  pod: name,
  observedAt: epochMs,
  waitingRequests: count,
  runningRequests: count,
  kvCacheUsage: z.number().min(0).max(1),
  lora: z
    .object({
      running: z.array(name).max(1024),
      waiting: z.array(name).max(1024),
      max: count,
    })
    .optional(),
  cache: z.object({ blockSize: count.min(1), numBlocks: count }).optional(),
  rates: serviceRatesSchema.optional(),
});

/**
 * At most this many block keys in one `kv` snapshot (the newest when a pod holds more): 16384
 * keys are ~280 KB of JSON, far below NATS's default 1 MB `max_payload`.
 */
export const MAX_KV_SNAPSHOT_KEYS = 16384;

/** Ranks and tiers a snapshot describes at most. */
export const MAX_KV_SNAPSHOT_RANKS = 64;
export const MAX_KV_SNAPSHOT_TIERS = 16;

const infoText = z.string().min(1).max(MAX_KV_INFO_TEXT);
const u32 = z.number().int().min(0).max(0xffffffff);

/**
 * One data-parallel rank of the pod as the relay follows it: `blocks` it holds that are in `keys`
 * (a block two ranks hold is one key, counted for both), and the KV-cache group those blocks are
 * of (`group`, `kind`, `window` as the server names it; absent when it names none).
 */
const kvSnapshotRankSchema = z.object({
  rank: z.number().int().min(0).max(MAX_KV_RANK),
  blocks: count,
  group: u32.optional(),
  kind: infoText.optional(),
  window: u32.optional(),
});

/** Blocks the relay follows on one tier (`medium` as the server names it; `GPU` when it names none), summed over ranks. */
const kvSnapshotTierSchema = z.object({ medium: infoText, blocks: count });

/**
 * A pod's whole KV-cache block set (precise prefix-cache routing): the content keys
 * (`kvBlockKeys`, see kv.ts) of the blocks it holds, most recently stored LAST, and `seq`, the
 * relay sequence of the last `spillway.kv` batch folded in. The stream keeps the last one per
 * subject, so a (re)starting EPP replays each pod's latest snapshot and then applies live batches
 * with a larger `seq`. Published by the collector every `--kv-snapshot-interval-ms` per pod with KV
 * events; the fleet view ignores it (it only feeds the block index).
 */
export const kvSnapshotEventSchema = z.object({
  v: z.literal(1),
  kind: z.literal('kv'),
  pool: name,
  zone: name,
  pod: name,
  observedAt: epochMs,
  blockSize: z.number().int().min(1).max(4096),
  seq: count,
  keys: z.array(count).max(MAX_KV_SNAPSHOT_KEYS),
  /** Optional: the ranks feeding `keys`, for visibility. */
  ranks: z.array(kvSnapshotRankSchema).max(MAX_KV_SNAPSHOT_RANKS).optional(),
  /** Optional: every block the relay follows by tier, those not in `keys` included (offload tiers, extra-keyed blocks). */
  tiers: z.array(kvSnapshotTierSchema).max(MAX_KV_SNAPSHOT_TIERS).optional(),
  /**
   * Optional: whether the relay knows every block of the pod (`kvKnownSchema`); `complete` also
   * says that `keys` holds them all (not cut to the newest). Absent: as before, taken as complete.
   */
  known: kvKnownSchema.optional(),
});

export const spillwayEventSchema = z.discriminatedUnion('kind', [readinessEventSchema, metricsEventSchema, kvSnapshotEventSchema]);

export type ReadinessEvent = z.infer<typeof readinessEventSchema>;
export type MetricsEvent = z.infer<typeof metricsEventSchema>;
export type KvSnapshotEvent = z.infer<typeof kvSnapshotEventSchema>;
export type KvSnapshotRank = z.infer<typeof kvSnapshotRankSchema>;
export type KvSnapshotTier = z.infer<typeof kvSnapshotTierSchema>;
export type ServiceRates = z.infer<typeof serviceRatesSchema>;
export type SpillwayEvent = z.infer<typeof spillwayEventSchema>;
export type EventKind = SpillwayEvent['kind'];
export type Engine = (typeof ENGINES)[number];
