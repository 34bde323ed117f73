import { KV_STORED, kvCreditable, KvStoredRuns, type KvBatch } from '@spillway/events';

/**
 * What the relayed batches say of the blocks the servers stored, counted for the EPP's metrics
 * (docs/metrics.md): per tier, the blocks relayed as keys the index credits and the blocks only
 * tallied (another tier, another KV-cache group, extra keys, ...); per data-parallel rank, the
 * batches applied. Labels are fixed sets, the keys of the counts' records (what the metrics
 * export): a server's medium is bucketed into a tier, ranks from 8 on are summed as `8+`.
 */
export const KV_TIERS = ['gpu', 'cpu', 'disk', 'other', 'unsaid'] as const;
export type KvTier = (typeof KV_TIERS)[number];

/** Rank labels: 0 to 7, then `8+`, and `none` for batches that say no rank. */
export const RANK_LABELS = ['0', '1', '2', '3', '4', '5', '6', '7', '8+', 'none'] as const;
export type RankLabel = (typeof RANK_LABELS)[number];

function rankLabel(rank: number | undefined): RankLabel {
  if (rank === undefined) return 'none';
  return rank < 8 ? (String(rank) as RankLabel) : '8+';
}

/**
 * The tier of a server's medium: vLLM and SGLang name it (`GPU`; `CPU`, `CPU_PINNED`, `DISK`,
 * `EXTERNAL`), TensorRT-LLM numbers its cache levels (0 is the GPU, 1 host memory); `unsaid` when
 * the relay or the server did not say.
 */
export function tierOf(medium: string | undefined): KvTier {
  if (medium === undefined) return 'unsaid';
  const m = medium.toUpperCase();
  if (m === 'GPU' || m === 'CACHE_LEVEL:0') return 'gpu';
  if (m.startsWith('CPU') || m.startsWith('HOST') || m.startsWith('CACHE_LEVEL:')) return 'cpu';
  if (m.startsWith('DISK')) return 'disk';
  return 'other';
}

export interface BlockTierCounts {
  /**
   * Stored blocks by tier: credited (relayed as keys the block index credits, unless the pod is
   * blind then) or tallied (reported, but only counted: not relayed as keys, or described as not creditable).
   */
  readonly credited: Record<KvTier, number>;
  readonly tallied: Record<KvTier, number>;
  /** Applied batches by the rank they say. */
  readonly rankBatches: Record<RankLabel, number>;
}

export function emptyBlockTierCounts(): BlockTierCounts {
  const zero = (): Record<KvTier, number> => ({ gpu: 0, cpu: 0, disk: 0, other: 0, unsaid: 0 });
  const ranks = Object.fromEntries(RANK_LABELS.map((label) => [label, 0])) as Record<RankLabel, number>;
  return { credited: zero(), tallied: zero(), rankBatches: ranks };
}

/** Counts one applied batch: its stored blocks by tier, and its rank. */
export function countAppliedBatch(batch: KvBatch, counts: BlockTierCounts): void {
  const runs = batch.stored === undefined ? undefined : new KvStoredRuns(batch.stored);
  for (const event of batch.events) {
    if (event[0] !== KV_STORED) continue;
    const info = runs?.next();
    (kvCreditable(info) ? counts.credited : counts.tallied)[tierOf(info?.medium)] += event[1].length;
  }
  if (batch.skipped !== undefined) for (const tally of batch.skipped) counts.tallied[tierOf(tally.medium)] += tally.stored ?? 0;
  counts.rankBatches[rankLabel(batch.rank)]++;
}
