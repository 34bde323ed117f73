import type { Msg, NatsConnection, Subscription } from '@nats-io/nats-core';
import {
  decodeStateBatch,
  encodeStateBatch,
  parseStateSubject,
  statePoolFilter,
  stateSyncFilter,
  type StateBatch,
  type StateEntry,
  type StateSubjectParts,
} from '@spillway/events';
import type { SharedState } from '@spillway/scheduler';
import type { Logger } from 'pino';
import type { SharedStateCounters, StateRejectReason } from './counters.js';
import type { ChannelContext } from './context.js';
import { stateBatches } from './batches.js';
import { entryBytes } from './outbox.js';

/** A snapshot part aims at this size (several parts per warm-start answer; NATS's default max payload is 1 MiB). */
const SNAPSHOT_PART_BYTES = 512 * 1024;
const LOG_EVERY_MS = 60_000;

/**
 * Takes in the pool's other EPPs' batches (`spillway.state.<pool>.*.*`, its own ignored): each is
 * decoded, checked against the subject it came on (an EPP may publish only its own zone's subjects,
 * so the subject vouches for the origin), and folded into the scheduler's state. Bad batches are
 * dropped whole, counted by reason and logged at most once a minute per reason.
 */
export class StateReceiver {
  /** Told when a batch of a peer arrived on its own subject and was applied (the warm start waits for this). */
  onPeerHeard: ((zone: string, epp: string) => void) | undefined;
  /** Told after every batch applied. */
  onApplied: (() => void) | undefined;
  private subscription: Subscription | undefined;
  private readonly lastLogged = new Map<string, number>();
  private readonly nc: NatsConnection;
  private readonly self: StateSubjectParts;
  private readonly counters: SharedStateCounters;
  private readonly logger: Logger;
  private readonly now: () => number;

  constructor(
    context: ChannelContext,
    private readonly shared: SharedState,
  ) {
    this.nc = context.nc;
    this.self = context.self;
    this.counters = context.counters;
    this.logger = context.logger;
    this.now = context.now;
  }

  start(): void {
    this.subscription = this.nc.subscribe(statePoolFilter(this.self.pool), {
      callback: (error, msg) => (error ? undefined : this.onBatch(msg)),
    });
  }

  /** Applies one batch; exposed for warm start, whose snapshot parts arrive on an inbox. Whether it was applied. */
  apply(batch: StateBatch, subject: string): boolean {
    const result = this.shared.apply(batch, this.now(), this.self.epp);
    if (result.outcome === 'own') return false;
    if (result.outcome !== 'applied') {
      this.reject(subject, result.outcome, `${result.entries} entries from ${batch.epp}`);
      return false;
    }
    this.counters.batchesIn++;
    this.counters.entriesIn += result.entries;
    this.onApplied?.();
    this.counters.gaps += result.gap;
    this.counters.entriesIgnored += result.ignored;
    this.counters.peersEvicted += result.evicted;
    if (result.evicted > 0)
      this.note(
        'peer-evicted',
        { subject, peer: batch.epp, zone: batch.zone, evicted: result.evicted },
        'forgot peers to make room for a new one',
      );
    if (result.resynced) {
      this.counters.resyncs++;
      this.note(
        'resync',
        { subject, peer: batch.epp, zone: batch.zone, seq: batch.seq },
        "took up a peer's sequence afresh after consecutive refusals",
      );
    }
    return true;
  }

  /** Whether `epp` of `zone` is a peer now: heard on its own subject (warm-start answers are taken only from such peers). */
  knowsPeer(zone: string, epp: string): boolean {
    return this.shared.knowsPeer(zone, epp);
  }

  async close(): Promise<void> {
    const subscription = this.subscription;
    this.subscription = undefined;
    if (subscription !== undefined && !this.nc.isClosed()) subscription.unsubscribe();
  }

  private onBatch(msg: Msg): void {
    const parts = parseStateSubject(msg.subject);
    if (parts === undefined || parts.epp === this.self.epp) return;
    const decoded = decodeStateBatch(msg.data, parts);
    if (!decoded.ok) return this.reject(msg.subject, decoded.reason, decoded.detail);
    // Snapshots answer a warm-start request on its inbox; on a batch subject one would be a replay of state.
    if (decoded.batch.snapshot !== undefined)
      return this.reject(msg.subject, 'misplaced-snapshot', `snapshot part from ${decoded.batch.epp}`);
    if (this.apply(decoded.batch, msg.subject)) this.onPeerHeard?.(decoded.batch.zone, decoded.batch.epp);
  }

  reject(subject: string, reason: StateRejectReason, detail: string): void {
    this.counters.reject(reason);
    this.note(
      reason,
      { subject, reason, detail: detail.slice(0, 300), rejected: this.counters.rejected[reason] },
      'dropped a shared-state batch',
    );
  }

  /** A warning, at most once a minute per kind (a flood of forged batches must not flood the log too). */
  private note(kind: string, fields: Record<string, unknown>, message: string): void {
    const now = this.now();
    const last = this.lastLogged.get(kind);
    if (last !== undefined && now - last < LOG_EVERY_MS) return;
    this.lastLogged.set(kind, now);
    this.logger.warn(fields, message);
  }
}

/**
 * Answers the pool's other EPPs' warm-start requests (`spillway.state.<pool>.*.*.sync`) with a
 * snapshot of this EPP's state — its own requests in flight, every prefix placement it knows, its
 * penalties — in parts of at most SNAPSHOT_PART_BYTES, the last flagged, at most `maxBytes` in all.
 * At most `maxPerS` requests a second are answered: a snapshot costs a scan of the prefix index.
 */
export class SyncResponder {
  private subscription: Subscription | undefined;
  private tokens: number;
  private refilledAt: number;

  private readonly nc: NatsConnection;
  private readonly self: StateSubjectParts;
  private readonly counters: SharedStateCounters;
  private readonly logger: Logger;
  private readonly now: () => number;

  constructor(
    context: ChannelContext,
    private readonly shared: SharedState,
    /** The last sequence number this EPP published: snapshots carry it. */
    private readonly lastSeq: () => number,
    private readonly limits: { maxBytes: number; maxPerS: number },
  ) {
    this.nc = context.nc;
    this.self = context.self;
    this.counters = context.counters;
    this.logger = context.logger;
    this.now = context.now;
    this.tokens = Math.max(1, limits.maxPerS);
    this.refilledAt = this.now();
  }

  start(): void {
    this.subscription = this.nc.subscribe(stateSyncFilter(this.self.pool), {
      callback: (error, msg) => (error ? undefined : this.onRequest(msg)),
    });
  }

  async close(): Promise<void> {
    const subscription = this.subscription;
    this.subscription = undefined;
    if (subscription !== undefined && !this.nc.isClosed()) subscription.unsubscribe();
  }

  private onRequest(msg: Msg): void {
    const from = parseStateSubject(msg.subject);
    if (from === undefined || !from.sync || from.epp === this.self.epp || msg.reply === undefined) return;
    // The request is a batch with no entries from the subject's EPP; `want: in-flight` (the operator's view) skips the placements.
    const request = decodeStateBatch(msg.data, from);
    if (!request.ok) {
      this.counters.reject(request.reason);
      return;
    }
    if (!this.take()) {
      this.counters.syncThrottled++;
      return;
    }
    const now = this.now();
    const placements = request.batch.want !== 'in-flight';
    const parts = snapshotParts(this.shared.snapshot(now, placements), this.limits.maxBytes);
    try {
      parts.forEach((entries, i) => {
        const batch: StateBatch = {
          v: 1,
          pool: this.self.pool,
          zone: this.self.zone,
          epp: this.self.epp,
          seq: this.lastSeq(),
          sentAt: now,
          entries,
          snapshot: { last: i === parts.length - 1 },
        };
        msg.respond(encodeStateBatch(batch));
      });
      this.counters.syncAnswered++;
      this.logger.info(
        { peer: from.epp, zone: from.zone, parts: parts.length, entries: parts.reduce((n, p) => n + p.length, 0) },
        'answered a warm-start request',
      );
    } catch (error) {
      this.logger.warn({ err: error, peer: from.epp }, 'could not answer a warm-start request');
    }
  }

  /** A token bucket of `maxPerS` requests a second. */
  private take(): boolean {
    const now = this.now();
    this.tokens = Math.min(Math.max(1, this.limits.maxPerS), this.tokens + ((now - this.refilledAt) / 1000) * this.limits.maxPerS);
    this.refilledAt = now;
    if (this.tokens < 1) return false;
    this.tokens -= 1;
    return true;
  }
}

/**
 * Snapshot entries in parts of about SNAPSHOT_PART_BYTES, each a batch every receiver accepts
 * (batches.ts), at most `maxBytes` in all (the rest left out); always one part at least.
 */
export function snapshotParts(entries: readonly StateEntry[], maxBytes: number): StateEntry[][] {
  let total = 0;
  let kept = 0;
  while (kept < entries.length && total + entryBytes(entries[kept] as StateEntry) <= maxBytes) {
    total += entryBytes(entries[kept] as StateEntry);
    kept++;
  }
  return stateBatches(kept === entries.length ? entries : entries.slice(0, kept), SNAPSHOT_PART_BYTES);
}
