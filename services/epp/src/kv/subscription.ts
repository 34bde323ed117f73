import type { NatsConnection, Subscription } from '@nats-io/nats-core';
import { decodeKvBatch, kvPoolFilter, type KvBatch } from '@spillway/events';
import type { Logger } from 'pino';
import { countAppliedBatch } from './block-tiers.js';
import type { KvCounters, KvRejectReason } from './counters.js';

const LOG_EVERY_MS = 60_000;

/** Where relayed batches go: the scheduler's precise block index. */
export interface KvBatchSink {
  applyKvBatch(batch: KvBatch, receivedAtMs: number): void;
}

export interface KvSubscriptionParts {
  readonly nc: NatsConnection;
  readonly pool: string;
  /** Where decoded batches go: the scheduler's block index. */
  readonly sink: KvBatchSink;
  readonly counters: KvCounters;
  readonly logger: Logger;
  readonly now?: () => number;
}

/**
 * Takes in the pool's KV-cache block events (`spillway.kv.<pool>.<zone>.<pod>`, core NATS, from
 * every zone's collector): each batch is decoded within its bounds, checked against the subject it
 * came on (a collector may publish only its own zone's subjects, so the subject vouches for the
 * pod) and handed to the block index, which tracks sequence gaps itself. Bad batches are dropped
 * whole, counted by reason and logged at most once a minute per reason. The NATS client
 * re-subscribes by itself after a reconnect; what was missed meanwhile shows as a sequence gap.
 */
export class KvSubscription {
  private subscription: Subscription | undefined;
  private readonly lastLogged = new Map<KvRejectReason, number>();

  private readonly nc: NatsConnection;
  private readonly pool: string;
  private readonly sink: KvBatchSink;
  private readonly counters: KvCounters;
  private readonly logger: Logger;
  private readonly now: () => number;

  constructor(parts: KvSubscriptionParts) {
    this.nc = parts.nc;
    this.pool = parts.pool;
    this.sink = parts.sink;
    this.counters = parts.counters;
    this.logger = parts.logger;
    this.now = parts.now ?? Date.now;
  }

  start(): void {
    this.subscription = this.nc.subscribe(kvPoolFilter(this.pool), {
      callback: (error, msg) => (error ? undefined : this.onMessage(msg.subject, msg.data)),
    });
  }

  /** One message as it came off the wire; exposed so tests can feed the exact bytes. */
  onMessage(subject: string, data: Uint8Array): void {
    const decoded = decodeKvBatch(subject, data);
    if (!decoded.ok) return this.reject(subject, decoded.reason, decoded.detail);
    const batch = decoded.batch;
    this.sink.applyKvBatch(batch, this.now());
    this.counters.batchesApplied++;
    for (const event of batch.events) if (event.length === 2) this.counters.keysApplied += event[1].length;
    countAppliedBatch(batch, this.counters.blockTiers);
  }

  async close(): Promise<void> {
    const subscription = this.subscription;
    this.subscription = undefined;
    if (subscription !== undefined && !this.nc.isClosed()) subscription.unsubscribe();
  }

  private reject(subject: string, reason: KvRejectReason, detail: string): void {
    this.counters.reject(reason);
    const now = this.now();
    const last = this.lastLogged.get(reason);
    if (last !== undefined && now - last < LOG_EVERY_MS) return;
    this.lastLogged.set(reason, now);
    // The subject is attacker-chosen: cut, like the detail.
    this.logger.warn(
      { subject: subject.slice(0, 300), reason, detail: detail.slice(0, 300), rejected: this.counters.rejected[reason] },
      'dropped a KV block batch',
    );
  }
}
