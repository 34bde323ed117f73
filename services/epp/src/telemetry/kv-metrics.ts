import { Counter, Gauge, Histogram, type Registry } from 'prom-client';
import { mirrorCounter } from './counter-mirror.js';
import { KV_REJECT_REASONS, type KvCounters } from '../kv/counters.js';
import type { KvIndexStats } from '@spillway/scheduler';
import type { TokenCache } from '../kv/token-cache.js';

export interface KvMetricSources {
  readonly counters: KvCounters;
  stats(): KvIndexStats;
  /** The prompt-prefix cache; undefined when no tokenizer is configured. */
  readonly cache: TokenCache | undefined;
}

/** Seconds: tokenizing a prompt takes from ~10 µs (a cached prefix, a short tail) to tens of ms (a 100k-token prompt). */
const TOKENIZE_BUCKETS = [0.00001, 0.000025, 0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1];

/**
 * The precise prefix-cache routing metrics (docs/metrics.md): the scheduler's block index, the KV
 * subscription, and the request path's tokenization. Counters and gauges read their sources when
 * scraped; the histogram is observed per tokenized request. Returns the histogram's children.
 */
export function registerKvMetrics(
  registry: Registry,
  sources: KvMetricSources,
): { tokenized(outcome: 'prefix-cached' | 'full', seconds: number): void } {
  const registers = [registry];
  const { counters } = sources;
  new Gauge({
    name: 'spillway_kv_index_pods',
    help: 'Pods the precise block index holds KV-cache blocks of.',
    registers,
    collect() {
      this.set(sources.stats().pods);
    },
  });
  new Gauge({
    name: 'spillway_kv_index_partial_pods',
    help: "Of those, pods whose KV data is partial: their relay did not follow the server from an empty cache (a collector that started after it without a full replay) or this index's view has a hole (an incomplete snapshot, blocks evicted for its bounds). They are priced by both prefix indexes, the larger counting.",
    registers,
    collect() {
      this.set(sources.stats().partialPods);
    },
  });
  new Gauge({
    name: 'spillway_kv_index_blocks',
    help: 'KV-cache blocks the precise block index holds, over every pod (a block two pods hold counts twice).',
    registers,
    collect() {
      this.set(sources.stats().blocks);
    },
  });
  new Gauge({
    name: 'spillway_kv_index_bytes',
    help: 'Estimated memory of the precise block index, bytes (bounded: the least recently stored blocks go first).',
    registers,
    collect() {
      this.set(sources.stats().bytes);
    },
  });
  const indexEvents: Counter<'event'> = new Counter({
    name: 'spillway_kv_index_events_total',
    help: "The block index's bookkeeping: sequence gaps seen in a pod's batches (gap; the pod is not believed until its next snapshot or clear), batches and snapshots it did not apply: stale, duplicate, future-dated, past the pod bound (dropped), entries evicted for the byte bound or a flooding pod's cap (evicted), prefix lookups with token ids (lookup) and those where some pod held the first block (hit), stored keys not credited because their batch describes them as off the GPU or extra-keyed (uncredited).",
    labelNames: ['event'] as const,
    registers,
    collect: () => collectIndexEvents(),
  });
  const collectIndexEvents = mirrorCounter(indexEvents, [
    [{ event: 'gap' }, () => sources.stats().gaps],
    [{ event: 'dropped' }, () => sources.stats().droppedBatches],
    [{ event: 'evicted' }, () => sources.stats().evicted],
    [{ event: 'lookup' }, () => sources.stats().lookups],
    [{ event: 'hit' }, () => sources.stats().hits],
    [{ event: 'uncredited' }, () => sources.stats().uncredited],
  ]);
  const batches: Counter<'result'> = new Counter({
    name: 'spillway_kv_batches_total',
    help: 'KV block batches received on spillway.kv.<pool>.>: applied to the block index, or rejected whole (see spillway_kv_batches_rejected_total).',
    labelNames: ['result'] as const,
    registers,
    collect: () => collectBatches(),
  });
  const collectBatches = mirrorCounter(batches, [
    [{ result: 'applied' }, () => counters.batchesApplied],
    [{ result: 'rejected' }, () => KV_REJECT_REASONS.reduce((n, r) => n + counters.rejected[r], 0)],
  ]);
  const rejected: Counter<'reason'> = new Counter({
    name: 'spillway_kv_batches_rejected_total',
    help: 'KV block batches refused whole, by reason: larger than 1 MiB (oversized), not msgpack, not the documented layout or an unknown event tag (invalid), more than 8192 keys (too-many-keys), a payload naming another pod than its subject (subject-mismatch).',
    labelNames: ['reason'] as const,
    registers,
    collect: () => collectRejected(),
  });
  const collectRejected = mirrorCounter(
    rejected,
    KV_REJECT_REASONS.map((reason) => [{ reason }, () => counters.rejected[reason]] as [{ reason: string }, () => number]),
  );
  const keys: Counter = new Counter({
    name: 'spillway_kv_batch_keys_total',
    help: 'Block keys (stored and removed) in applied KV batches.',
    registers,
    collect: () => collectKeys(),
  });
  const collectKeys = mirrorCounter(keys, [[{}, () => counters.keysApplied]]);
  // What the relayed batches say of the blocks the servers stored (their optional descriptions); labels are the counts' own keys.
  const tiers = counters.blockTiers;
  const storedBlocks: Counter<'tier' | 'credited'> = new Counter({
    name: 'spillway_kv_stored_blocks_total',
    help: 'Blocks the model servers reported stored, as the relayed batches describe them: by tier (gpu; cpu: host memory, CPU offload, a TensorRT-LLM cache level past 0; disk; other; unsaid: no tier said, e.g. a collector from before descriptions), relayed as keys the block index credits (credited="true") or only counted (credited="false": another tier, another KV-cache group, extra keys, a parent never seen, ...).',
    labelNames: ['tier', 'credited'] as const,
    registers,
    collect: () => collectStoredBlocks(),
  });
  const collectStoredBlocks = mirrorCounter(
    storedBlocks,
    (Object.keys(tiers.credited) as Array<keyof typeof tiers.credited>).flatMap((tier) => [
      [{ tier, credited: 'true' }, () => tiers.credited[tier]] as [{ tier: string; credited: string }, () => number],
      [{ tier, credited: 'false' }, () => tiers.tallied[tier]] as [{ tier: string; credited: string }, () => number],
    ]),
  );
  const rankBatches: Counter<'rank'> = new Counter({
    name: 'spillway_kv_rank_batches_total',
    help: 'Relayed KV batches applied, by the data-parallel rank of the model server they say they relay (0-7, 8+ for the higher ones, none when a batch says none): a rank whose count stops growing is not reporting.',
    labelNames: ['rank'] as const,
    registers,
    collect: () => collectRankBatches(),
  });
  const collectRankBatches = mirrorCounter(
    rankBatches,
    (Object.keys(tiers.rankBatches) as Array<keyof typeof tiers.rankBatches>).map(
      (rank) => [{ rank }, () => tiers.rankBatches[rank]] as [{ rank: string }, () => number],
    ),
  );
  const snapshots: Counter = new Counter({
    name: 'spillway_kv_snapshots_total',
    help: "Pods' KV snapshots (stream kind kv) applied to the block index, replayed or live.",
    registers,
    collect: () => collectSnapshots(),
  });
  const collectSnapshots = mirrorCounter(snapshots, [[{}, () => counters.snapshotsApplied]]);
  const requests: Counter<'tokens'> = new Counter({
    name: 'spillway_kv_tokenized_requests_total',
    help: 'Requests of a model with a tokenizer, by where their token ids came from: a cached prompt prefix and the tail tokenized (prefix-cached), the whole prompt tokenized (full), not tokenized because the tokenizer failed or the prompt is too long (skipped), or not tokenized because no pod has reported KV blocks yet (no-kv-data).',
    labelNames: ['tokens'] as const,
    registers,
    collect: () => collectRequests(),
  });
  const collectRequests = mirrorCounter(requests, [
    [{ tokens: 'prefix-cached' }, () => counters.tokenizedPartly],
    [{ tokens: 'full' }, () => counters.tokenizedFresh],
    [{ tokens: 'skipped' }, () => counters.tokenizeSkipped],
    [{ tokens: 'no-kv-data' }, () => counters.tokenizeNoData],
  ]);
  const failures: Counter = new Counter({
    name: 'spillway_kv_tokenizer_composition_failures_total',
    help: "Times joining a cached conversation prefix and its tail disagreed with tokenizing the whole conversation (checked on the first and every 16th cache miss); the tokenizer's chat prefix cache is then turned off.",
    registers,
    collect: () => collectFailures(),
  });
  const collectFailures = mirrorCounter(failures, [[{}, () => counters.compositionFailures]]);
  const cache = sources.cache;
  if (cache !== undefined) {
    new Gauge({
      name: 'spillway_kv_token_cache_bytes',
      help: 'Bytes held by the prompt-prefix token cache (bounded by --token-cache-bytes).',
      registers,
      collect() {
        this.set(cache.bytes);
      },
    });
    const lookups: Counter<'result'> = new Counter({
      name: 'spillway_kv_token_cache_lookups_total',
      help: 'Prompt-prefix token cache lookups: hit (the prefix was tokenized before) or miss; and entries evicted for space (evicted).',
      labelNames: ['result'] as const,
      registers,
      collect: () => collectLookups(),
    });
    const collectLookups = mirrorCounter(lookups, [
      [{ result: 'hit' }, () => cache.hits],
      [{ result: 'miss' }, () => cache.misses],
      [{ result: 'evicted' }, () => cache.evictions],
    ]);
  }
  const seconds = new Histogram({
    name: 'spillway_kv_tokenize_seconds',
    help: "Time to tokenize a request's prompt on the request path, by where its token ids came from (prefix-cached, full).",
    labelNames: ['tokens'] as const,
    buckets: TOKENIZE_BUCKETS,
    registers,
  });
  const cached = seconds.labels({ tokens: 'prefix-cached' });
  const full = seconds.labels({ tokens: 'full' });
  return { tokenized: (outcome, s) => (outcome === 'full' ? full : cached).observe(s) };
}
