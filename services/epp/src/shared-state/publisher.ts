import type { NatsConnection } from '@nats-io/nats-core';
import {
  encodeStateBatch,
  MAX_STATE_BATCH_BYTES,
  stateSubjectFor,
  type StateBatch,
  type StateEntry,
  type StateSubjectParts,
} from '@spillway/events';
import type { SharedStateCounters } from './counters.js';
import type { ChannelContext } from './context.js';
import { stateBatches } from './batches.js';
import type { StateOutbox } from './outbox.js';

/** A batch aims at this size, well below the 1 MiB bound, so one large pick never pushes it over. */
const TARGET_BATCH_BYTES = 256 * 1024;

/**
 * Sends this EPP's entries to its peers on `spillway.state.<pool>.<zone>.<epp-id>`: whatever the
 * outbox holds when a batch is due (a few ms after the first entry, or at once past N entries),
 * split into batches every receiver accepts (batches.ts), each with the next sequence number. An EPP with nothing to say
 * sends an empty batch every `heartbeatMs` so its peers keep it (and its requests) alive.
 */
export class StatePublisher {
  /** The last sequence number published (snapshots carry it). */
  seq = 0;
  private readonly subject: string;
  private lastSentAt = Number.NEGATIVE_INFINITY;
  private heartbeat: NodeJS.Timeout | undefined;
  private connected = true;

  private readonly nc: NatsConnection;
  private readonly origin: StateSubjectParts;
  private readonly counters: SharedStateCounters;
  private readonly now: () => number;

  constructor(
    context: ChannelContext,
    private readonly outbox: StateOutbox,
    private readonly heartbeatMs: number,
  ) {
    this.nc = context.nc;
    this.origin = context.self;
    this.counters = context.counters;
    this.now = context.now;
    this.subject = stateSubjectFor(this.origin);
  }

  start(): void {
    this.outbox.onDue = () => this.flush();
    this.heartbeat = setInterval(
      () => {
        if (this.now() - this.lastSentAt >= this.heartbeatMs * 0.9) this.flush();
      },
      Math.max(10, this.heartbeatMs / 2),
    );
    this.heartbeat.unref();
    void this.followStatus();
  }

  /** Publishes what waits (an empty batch when nothing does: a heartbeat). */
  flush(): void {
    const entries = this.outbox.take();
    if (!this.connected || this.nc.isClosed()) {
      // Entries sent after a reconnect would be old news; the peers' samples have moved on. The
      // sequence number moves on all the same, so the peers count the batch as missed.
      this.counters.dropped['not-connected'] += entries.length;
      if (entries.length > 0) this.seq++;
      return;
    }
    const max = Math.min(MAX_STATE_BATCH_BYTES, this.nc.info?.max_payload ?? MAX_STATE_BATCH_BYTES);
    for (const batch of stateBatches(entries, TARGET_BATCH_BYTES)) this.publish(batch, max);
  }

  close(): void {
    if (this.heartbeat !== undefined) clearInterval(this.heartbeat);
    this.heartbeat = undefined;
    this.outbox.close();
    if (!this.nc.isClosed() && this.outbox.size > 0) this.flush();
  }

  private publish(entries: StateEntry[], maxBytes: number): void {
    const batch: StateBatch = {
      v: 1,
      pool: this.origin.pool,
      zone: this.origin.zone,
      epp: this.origin.epp,
      seq: this.seq + 1,
      sentAt: this.now(),
      entries,
    };
    const data = encodeStateBatch(batch);
    if (data.byteLength > maxBytes) {
      // One entry alone past the bound (a prompt of tens of thousands of blocks): not sent, and
      // counted by the peers as a missed batch.
      this.counters.dropped.oversized += entries.length;
      this.seq = batch.seq;
      return;
    }
    try {
      this.nc.publish(this.subject, data);
    } catch {
      this.counters.dropped['publish-failed'] += entries.length;
      this.seq = batch.seq;
      return;
    }
    this.seq = batch.seq;
    this.lastSentAt = batch.sentAt;
    this.counters.batchesOut++;
    this.counters.entriesOut += entries.length;
    this.counters.bytesOut += data.byteLength;
  }

  /** While the connection is down, batches are dropped rather than queued in the client. */
  private async followStatus(): Promise<void> {
    for await (const status of this.nc.status()) {
      if (status.type === 'disconnect') this.connected = false;
      else if (status.type === 'reconnect') this.connected = true;
    }
  }
}
