import type { KvDecodeResult } from '@spillway/events';
import { emptyBlockTierCounts, type BlockTierCounts } from './block-tiers.js';

/** Why a relayed KV batch or a KV snapshot was refused whole. */
export type KvRejectReason = Extract<KvDecodeResult, { ok: false }>['reason'];
export const KV_REJECT_REASONS: readonly KvRejectReason[] = ['oversized', 'not-msgpack', 'invalid', 'too-many-keys', 'subject-mismatch'];

/**
 * The KV subscription's and the request path's KV figures as plain numbers, bumped where things
 * happen; Prometheus reads them when it scrapes (telemetry/kv-metrics.ts), so the hot paths never touch
 * prom-client.
 */
export class KvCounters {
  /** Relayed batches handed to the block index. */
  batchesApplied = 0;
  /** Block keys in those batches (stored and removed). */
  keysApplied = 0;
  /** Snapshots (stream kind `kv`) handed to the block index, replayed or live. */
  snapshotsApplied = 0;
  /** What applied batches say of the blocks stored: by tier, credited or tallied, and batches by data-parallel rank. */
  readonly blockTiers: BlockTierCounts = emptyBlockTierCounts();
  readonly rejected: Record<KvRejectReason, number> = {
    oversized: 0,
    'not-msgpack': 0,
    invalid: 0,
    'too-many-keys': 0,
    'subject-mismatch': 0,
  };
  /** Requests tokenized, by where their token ids came from: a cached prefix and the tail, or the whole prompt. */
  tokenizedPartly = 0;
  tokenizedFresh = 0;
  /** Requests of a model with a tokenizer not tokenized: the tokenizer failed, or the prompt is too long. */
  tokenizeSkipped = 0;
  /** Requests of a model with a tokenizer not tokenized because no pod has reported KV blocks (nothing to match). */
  tokenizeNoData = 0;
  /** Times a tokenizer's composition rule disagreed with tokenizing a whole conversation (its chat prefix cache is then off). */
  compositionFailures = 0;

  reject(reason: KvRejectReason): void {
    this.rejected[reason]++;
  }
}
