import type { KvBatch, KvSnapshotEvent } from '@spillway/events';

/** The block index's figures, as the scheduler reports them (`scheduler.kvIndexStats`). */
export interface KvIndexStats {
  readonly pods: number;
  readonly blocks: number;
  readonly bytes: number;
  readonly gaps: number;
  readonly droppedBatches: number;
  readonly lookups: number;
  readonly hits: number;
}

/** What the EPP's KV parts need of the scheduler's precise block index. */
export interface KvIndex {
  applyKvBatch(batch: KvBatch, receivedAtMs: number): void;
  applyKvSnapshot(event: KvSnapshotEvent, receivedAtMs: number): void;
  readonly kvIndexStats: KvIndexStats;
}
