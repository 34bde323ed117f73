import type { Rng } from '@spillway/engine';
import type { StateBatch, StateEntry } from '@spillway/events';
import type { SharedState, SharedStateOutbox } from '@spillway/scheduler';
import { POOL } from './routers.js';

/**
 * The shared-state channel between a run's EPPs (every zone's), modelled as the EPP runs it: each
 * EPP's scheduler pushes its entries (picks, releases, penalties) into an outbox; `batchMs` after
 * the first one the batch leaves, and reaches each other EPP after the delay between the two (half
 * their zones' round trip plus the channel's own jitter), unless it is lost (`lossRate`) or NATS is down; it is applied there through the
 * production `SharedState.apply`. Idle EPPs send heartbeats; every EPP expires old entries and
 * silent peers on the same schedule. A restarted EPP is a new peer and warm-starts from the
 * others' snapshots. The simulation owns the clock and the event queue; this owns the bookkeeping.
 */
export interface SharingOptions {
  readonly batchMs: number;
  /** How long a batch from EPP `from` takes to reach EPP `to` (drawn per batch and receiver). */
  delay(from: number, to: number): number;
  readonly lossRate: number;
  readonly rng: Rng;
  /** Schedules a flush of `peer`'s batch, or the delivery of `batch` to `peer`, at `at`. */
  schedule(at: number, what: 'flush', peer: number): void;
  schedule(at: number, what: 'deliver', peer: number, batch: StateBatch): void;
  /** NATS is up (batches move). */
  up(): boolean;
}

/** The EPP's defaults: heartbeat every second, peers forgotten after 5 s of silence. */
export const HEARTBEAT_MS = 1000;
export const PEER_TIMEOUT_MS = 5000;
export const REMOTE_ENTRY_TTL_MS = 30_000;

interface Peer {
  readonly index: number;
  readonly zone: string;
  id: string;
  entries: StateEntry[];
  flushPending: boolean;
  seq: number;
  lastSentAt: number;
  /** This EPP's current state, or undefined while it has none (never for a live EPP). */
  shared: SharedState | undefined;
}

export class SharingChannel {
  /** The run's clock, set by the simulation before each event. */
  now = 0;
  /** Batches sent, delivered, lost on the way (loss or NATS down). */
  sent = 0;
  delivered = 0;
  lost = 0;
  private readonly peers: Peer[] = [];

  constructor(private readonly options: SharingOptions) {}

  /** Registers EPP `index` of `zone` under `id`; returns the outbox its scheduler writes to. */
  join(index: number, zone: string, id: string): SharedStateOutbox {
    const peer: Peer = {
      index,
      zone,
      id,
      entries: [],
      flushPending: false,
      seq: 0,
      lastSentAt: Number.NEGATIVE_INFINITY,
      shared: undefined,
    };
    this.peers[index] = peer;
    return this.outboxOf(peer);
  }

  /** The EPP's scheduler, once built (its SharedState applies what others send). */
  attach(index: number, shared: SharedState | undefined): void {
    const peer = this.peers[index];
    if (peer) peer.shared = shared;
  }

  /**
   * EPP `index` restarts as `id`: what the old process had not sent is gone, and whatever the old
   * scheduler still pushes (releases of its requests) goes nowhere. Returns the new outbox.
   */
  restart(index: number, id: string): SharedStateOutbox {
    const old = this.peers[index] as Peer;
    const peer: Peer = {
      index,
      zone: old.zone,
      id,
      entries: [],
      flushPending: false,
      seq: 0,
      lastSentAt: Number.NEGATIVE_INFINITY,
      shared: undefined,
    };
    this.peers[index] = peer;
    return this.outboxOf(peer);
  }

  /** A started EPP asks the others for their state (warm start); each answers with its snapshot. */
  warmStart(index: number, now: number): void {
    const peer = this.peers[index];
    if (!peer?.shared || !this.options.up()) return;
    for (const other of this.peers) {
      if (!other?.shared || other === peer) continue;
      peer.shared.apply(
        {
          v: 1,
          pool: POOL,
          zone: other.zone,
          epp: other.id,
          seq: other.seq,
          sentAt: now,
          entries: other.shared.snapshot(now),
          snapshot: { last: true },
        },
        now,
        peer.id,
      );
    }
  }

  /** Sends what EPP `index` has waiting (an empty batch when nothing: a heartbeat). */
  flush(index: number, now: number): void {
    const peer = this.peers[index];
    if (!peer) return;
    peer.flushPending = false;
    const entries = peer.entries;
    peer.entries = [];
    peer.seq++;
    peer.lastSentAt = now;
    this.sent++;
    const batch: StateBatch = { v: 1, pool: POOL, zone: peer.zone, epp: peer.id, seq: peer.seq, sentAt: now, entries };
    const { lossRate, rng } = this.options;
    for (const other of this.peers) {
      if (!other || other === peer) continue;
      if (!this.options.up() || (lossRate > 0 && rng.next() < lossRate)) {
        this.lost++;
        continue;
      }
      this.options.schedule(now + this.options.delay(peer.index, other.index), 'deliver', other.index, batch);
    }
  }

  /** A batch reaches EPP `index` (dropped when NATS went down meanwhile, like events). */
  deliver(index: number, batch: StateBatch, now: number): void {
    const peer = this.peers[index];
    if (!peer?.shared || !this.options.up()) return;
    this.delivered++;
    peer.shared.apply(batch, now, peer.id);
  }

  /** Every second: heartbeats from idle EPPs, expiry of old entries and silent peers. */
  tick(now: number): void {
    for (const peer of this.peers) {
      if (!peer) continue;
      if (!peer.flushPending && now - peer.lastSentAt >= HEARTBEAT_MS) this.flush(peer.index, now);
      peer.shared?.expire(now);
    }
  }

  private outboxOf(peer: Peer): SharedStateOutbox {
    return {
      push: (entry) => {
        // A restarted EPP's old scheduler still releases its requests: nobody sends those.
        if (this.peers[peer.index] !== peer) return;
        peer.entries.push(entry);
        if (peer.flushPending) return;
        peer.flushPending = true;
        this.options.schedule(this.now + this.options.batchMs, 'flush', peer.index);
      },
    };
  }
}
