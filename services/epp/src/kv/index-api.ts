import type { KvBatch, KvSnapshotEvent } from '@spillway/events';
import type { KvIndexStats } from '@spillway/scheduler';

/** What the EPP's KV parts need of the scheduler's precise block index (the Scheduler has these). */
export interface KvIndex {
  applyKvBatch(batch: KvBatch, receivedAtMs: number): void;
  applyKvSnapshot(event: KvSnapshotEvent, receivedAtMs: number): void;
  readonly kvIndexStats: KvIndexStats;
}
