import { STATE_PENALTY, STATE_PICK, STATE_PLACEMENT, STATE_RELEASE, type StateBatch, type StateEntry } from '@spillway/events';
import type { Endpoint, Fleet } from '@spillway/fleet';
import type { DecisionRecord } from './decision.js';
import type { PenaltyBox } from './penalties.js';
import type { PrefixIndex } from './prefix-index.js';
import { SHARED_STATE_DEFAULTS } from './sharing-config.js';

/**
 * State shared between the EPPs of a pool (active-active picking): each EPP tells the others what
 * it picked, what finished, where it sent which prompt blocks and whom it penalised, and folds what
 * they tell it into the same structures as its own — the fleet's in-flight accounting, the prefix
 * index, the penalty box — so the EPPs of a pool pick as one picker that runs in many places.
 *
 * Pure like the rest of the scheduler: the EPP (or a simulation) moves entries between EPPs; here
 * they are produced (`Outbox`) and applied (`apply`), with the time of every call handed in.
 *
 * Correctness under loss: a remote pick loads its endpoint only until the first sample that
 * postdates it, exactly like a local pick, so a lost release or a dead peer leaves no phantom load
 * beyond the next sample. Every remote in-flight entry is also forgotten `remoteEntryTtlMs` after it
 * arrived, and a peer silent for `peerTimeoutMs` (it sends heartbeats) is forgotten with all its
 * entries. Prefix placements outlive their peer: they say what an endpoint caches, not who sent it.
 *
 * Clocks: a batch's times are its origin's clock. They are translated by the batch's `sentAt`:
 * an entry stamped `t` is taken to have happened `sentAt − t` (clamped to [0, remoteEntryTtlMs])
 * before the batch was received, on this EPP's clock. Clock skew between EPPs therefore never
 * matters; the channel's transit time (milliseconds) makes remote entries look that much younger.
 */
/** The scheduler's parts shared state reads and writes. */
export interface SharedStateLinks {
  readonly fleet: Fleet;
  readonly pool: string;
  readonly index: PrefixIndex;
  readonly penalties: PenaltyBox;
  /** Inserts blocks into the prefix index for an endpoint, sized as the scheduler sizes it. */
  readonly learn: (endpoint: Endpoint, hashes: readonly number[]) => void;
  /** Penalties change eligibility: the scheduler drops its cached remote shortlist. */
  readonly onPenalty: () => void;
}

export interface SharedStateOptions {
  /** Where this EPP's own entries go; none: it shares nothing (it may still apply others'). */
  readonly outbox?: SharedStateOutbox | undefined;
  /** A remote in-flight entry is forgotten this long after it arrived (default: SHARED_STATE_DEFAULTS). */
  readonly remoteEntryTtlMs?: number;
  /** A peer with no batch for this long is forgotten with its entries (default: SHARED_STATE_DEFAULTS; peers send heartbeats). */
  readonly peerTimeoutMs?: number;
  /** Most peers tracked at once (default: SHARED_STATE_DEFAULTS); batches from further ones are refused. */
  readonly maxPeers?: number;
  /** Most in-flight entries tracked per peer (default 65,536); further picks are ignored. */
  readonly maxEntriesPerPeer?: number;
  /**
   * Most in-flight entries tracked over all peers (default 262,144, about 40 MB): with `maxPeers`
   * and `maxEntriesPerPeer` alone, many hostile peers could make an EPP hold millions.
   */
  readonly maxRemoteEntries?: number;
  /** A remote penalty lasts at most this long from when it arrived (default 60 s). */
  readonly maxPenaltyMs?: number;
}

/** Receives this EPP's entries, in order, as the scheduler makes them (the EPP's publisher buffers and batches them). */
export interface SharedStateOutbox {
  push(entry: StateEntry): void;
}

/** What applying one batch did, for the caller's metrics. */
export interface SharedApplyResult {
  /** `applied`, or why the whole batch was refused. */
  readonly outcome: 'applied' | 'replayed' | 'too-many-peers' | 'own';
  /** Batches of this peer missed before this one (by sequence number). */
  readonly gap: number;
  readonly entries: number;
  /** Entries naming an endpoint this EPP does not know, a release of a request it does not hold, or past a peer's bound. */
  readonly ignored: number;
}

/** Housekeeping results. */
export interface SharedExpiry {
  /** Remote in-flight entries forgotten for age. */
  readonly expired: number;
  /** Peers forgotten for silence, and the in-flight entries that went with them. */
  readonly peersForgotten: number;
  readonly peerEntriesForgotten: number;
}

/** One peer as this EPP sees it (for metrics and the operator's view). */
export interface SharedPeer {
  readonly epp: string;
  readonly zone: string;
  readonly lastSeenAt: number;
  readonly lastSeq: number;
  readonly inFlight: number;
}

interface RemoteEntry {
  readonly endpoint: Endpoint;
  /** On this EPP's clock (translated). */
  readonly pickedAt: number;
  readonly expiresAt: number;
}

interface Peer {
  readonly epp: string;
  zone: string;
  lastSeenAt: number;
  lastSeq: number;
  /** Request id -> entry, in arrival order (so expiry stops at the first live one). */
  readonly entries: Map<number, RemoteEntry>;
}

/** Hashes per placement entry in a snapshot: keeps each well inside a batch's bounds. */
const PLACEMENT_SLICE = 8192;
const NO_HASHES: readonly number[] = [];

export class SharedState {
  readonly outbox: SharedStateOutbox | undefined;
  readonly remoteEntryTtlMs: number;
  readonly peerTimeoutMs: number;
  private readonly maxPeers: number;
  private readonly maxEntriesPerPeer: number;
  private readonly maxRemoteEntries: number;
  /** In-flight entries over all peers. */
  private remoteEntries = 0;
  private readonly maxPenaltyMs: number;
  private readonly peers = new Map<string, Peer>();
  /** This EPP's committed requests not yet released, by id (for warm-start snapshots). */
  private readonly own = new Map<number, DecisionRecord>();
  private nextId = 1;

  private readonly fleet: Fleet;
  private readonly pool: string;
  private readonly index: PrefixIndex;
  private readonly penalties: PenaltyBox;
  private readonly learn: SharedStateLinks['learn'];
  private readonly onPenalty: () => void;

  constructor(links: SharedStateLinks, options: SharedStateOptions = {}) {
    this.fleet = links.fleet;
    this.pool = links.pool;
    this.index = links.index;
    this.penalties = links.penalties;
    this.learn = links.learn;
    this.onPenalty = links.onPenalty;
    this.outbox = options.outbox;
    this.remoteEntryTtlMs = options.remoteEntryTtlMs ?? SHARED_STATE_DEFAULTS.remoteEntryTtlMs;
    this.peerTimeoutMs = options.peerTimeoutMs ?? SHARED_STATE_DEFAULTS.peerTimeoutMs;
    this.maxPeers = options.maxPeers ?? SHARED_STATE_DEFAULTS.maxPeers;
    this.maxEntriesPerPeer = options.maxEntriesPerPeer ?? 65_536;
    this.maxRemoteEntries = options.maxRemoteEntries ?? 262_144;
    this.maxPenaltyMs = options.maxPenaltyMs ?? 60_000;
  }

  // ---- this EPP's entries ---------------------------------------------------------------------

  /** A decision was committed: its primary carries the request from `now`. */
  committed(record: DecisionRecord, endpoint: Endpoint, now: number): void {
    const outbox = this.outbox;
    if (outbox === undefined) return;
    const id = this.nextId++;
    record.shareId = id;
    this.own.set(id, record);
    outbox.push([
      STATE_PICK,
      id,
      endpoint.zone,
      endpoint.pod,
      now,
      (record.prefixHashes as number[] | undefined) ?? (NO_HASHES as number[]),
    ]);
  }

  /** The request finished; `now` undefined: its release time is not known (the charge's time stands in). */
  released(record: DecisionRecord, now: number | undefined): void {
    const outbox = this.outbox;
    if (outbox === undefined || record.shareId === 0) return;
    this.own.delete(record.shareId);
    outbox.push([STATE_RELEASE, record.shareId, now ?? record.chargedAt]);
  }

  /** A fallback served the request: its charge moved to `endpoint` at `now`. */
  moved(record: DecisionRecord, endpoint: Endpoint, now: number): void {
    const outbox = this.outbox;
    if (outbox === undefined || record.shareId === 0) return;
    outbox.push([STATE_RELEASE, record.shareId, now]);
    outbox.push([
      STATE_PICK,
      record.shareId,
      endpoint.zone,
      endpoint.pod,
      now,
      (record.prefixHashes as number[] | undefined) ?? (NO_HASHES as number[]),
    ]);
  }

  penalised(endpoint: Endpoint, until: number): void {
    this.outbox?.push([STATE_PENALTY, endpoint.zone, endpoint.pod, until]);
  }

  // ---- other EPPs' entries --------------------------------------------------------------------

  /**
   * Folds one batch of another EPP (`batch.epp`) into this EPP's state, received at `receivedAt`
   * (this EPP's clock). The caller has decoded and validated it and checked its origin against the
   * subject; `self` is this EPP's own id (its own batches are never applied). A snapshot (warm-start
   * reply) is applied like a batch but does not take part in gap counting.
   */
  apply(batch: StateBatch, receivedAt: number, self?: string): SharedApplyResult {
    if (batch.epp === self) return { outcome: 'own', gap: 0, entries: 0, ignored: 0 };
    let peer = this.peers.get(batch.epp);
    if (peer === undefined) {
      if (this.peers.size >= this.maxPeers) return { outcome: 'too-many-peers', gap: 0, entries: batch.entries.length, ignored: 0 };
      peer = { epp: batch.epp, zone: batch.zone, lastSeenAt: receivedAt, lastSeq: -1, entries: new Map() };
      this.peers.set(batch.epp, peer);
    }
    let gap = 0;
    if (batch.snapshot === undefined) {
      // Core NATS keeps one publisher's messages in order, so an old sequence number is a replay.
      if (peer.lastSeq >= 0 && batch.seq <= peer.lastSeq) return { outcome: 'replayed', gap: 0, entries: batch.entries.length, ignored: 0 };
      if (peer.lastSeq >= 0) gap = batch.seq - peer.lastSeq - 1;
      peer.lastSeq = batch.seq;
    } else if (batch.seq > peer.lastSeq) {
      // Batches after the snapshot's are counted from it; earlier ones it already holds.
      peer.lastSeq = batch.seq;
    }
    peer.lastSeenAt = Math.max(peer.lastSeenAt, receivedAt);
    peer.zone = batch.zone;

    const maxAge = this.remoteEntryTtlMs;
    const local = (t: number): number => receivedAt - Math.min(maxAge, Math.max(0, batch.sentAt - t));
    let ignored = 0;
    for (const entry of batch.entries) {
      switch (entry[0]) {
        case STATE_PICK: {
          const endpoint = this.fleet.get(this.pool, entry[2], entry[3]);
          const previous = peer.entries.get(entry[1]);
          if (previous !== undefined) {
            // The same request again: its charge moved (a release came first) or a snapshot repeats it.
            this.drop(peer, entry[1], previous);
          }
          if (endpoint === undefined || peer.entries.size >= this.maxEntriesPerPeer || this.remoteEntries >= this.maxRemoteEntries) {
            ignored++;
            break;
          }
          const pickedAt = local(entry[4]);
          this.fleet.recordPickAt(endpoint, pickedAt);
          peer.entries.set(entry[1], { endpoint, pickedAt, expiresAt: receivedAt + maxAge });
          this.remoteEntries++;
          if (entry[5].length > 0) this.learn(endpoint, entry[5]);
          break;
        }
        case STATE_RELEASE: {
          const held = peer.entries.get(entry[1]);
          if (held === undefined) {
            ignored++;
            break;
          }
          peer.entries.delete(entry[1]);
          this.remoteEntries--;
          this.fleet.releasePick(held.endpoint, held.pickedAt, local(entry[2]));
          break;
        }
        case STATE_PENALTY: {
          const endpoint = this.fleet.get(this.pool, entry[1], entry[2]);
          if (endpoint === undefined) {
            ignored++;
            break;
          }
          const until = receivedAt + Math.min(this.maxPenaltyMs, Math.max(0, entry[3] - batch.sentAt));
          if (until > receivedAt) {
            this.penalties.penalise(endpoint, until);
            this.onPenalty();
          }
          break;
        }
        case STATE_PLACEMENT: {
          const endpoint = this.fleet.get(this.pool, entry[1], entry[2]);
          if (endpoint === undefined) {
            ignored++;
            break;
          }
          // Oldest first on the wire; the index inserts a list tail first, so hand it newest first.
          const hashes = entry[3];
          const reversed: number[] = new Array<number>(hashes.length);
          for (let i = 0; i < hashes.length; i++) reversed[i] = hashes[hashes.length - 1 - i] as number;
          this.learn(endpoint, reversed);
          break;
        }
      }
    }
    return { outcome: 'applied', gap, entries: batch.entries.length, ignored };
  }

  /** Forgets remote entries past their time and peers silent for `peerTimeoutMs`. Call now and then. */
  expire(now: number): SharedExpiry {
    let expired = 0;
    let peersForgotten = 0;
    let peerEntriesForgotten = 0;
    for (const [epp, peer] of this.peers) {
      if (now - peer.lastSeenAt > this.peerTimeoutMs) {
        peerEntriesForgotten += this.forgetPeer(epp);
        peersForgotten++;
        continue;
      }
      for (const [id, entry] of peer.entries) {
        if (entry.expiresAt > now) break;
        this.drop(peer, id, entry);
        expired++;
      }
    }
    return { expired, peersForgotten, peerEntriesForgotten };
  }

  /** Forgets a peer at once (it said goodbye, or the EPP wants it gone). */
  forgetPeer(epp: string): number {
    const peer = this.peers.get(epp);
    if (peer === undefined) return 0;
    for (const entry of peer.entries.values()) this.fleet.forgetPick(entry.endpoint, entry.pickedAt);
    this.remoteEntries -= peer.entries.size;
    this.peers.delete(epp);
    return peer.entries.size;
  }

  /** Forgets one in-flight entry of a peer without saying the request finished. */
  private drop(peer: Peer, id: number, entry: RemoteEntry): void {
    peer.entries.delete(id);
    this.remoteEntries--;
    this.fleet.forgetPick(entry.endpoint, entry.pickedAt);
  }

  get peerCount(): number {
    return this.peers.size;
  }

  peerList(): SharedPeer[] {
    return [...this.peers.values()].map((p) => ({
      epp: p.epp,
      zone: p.zone,
      lastSeenAt: p.lastSeenAt,
      lastSeq: p.lastSeq,
      inFlight: p.entries.size,
    }));
  }

  /** Remote in-flight entries over all peers. */
  get remoteInFlight(): number {
    return this.remoteEntries;
  }

  /** This EPP's committed, unreleased requests. */
  get ownInFlight(): number {
    return this.own.size;
  }

  /**
   * What a starting peer needs (warm start): this EPP's own requests in flight (not its peers':
   * each peer answers for its own), every prefix placement it knows (its own and learnt ones), and
   * the penalties in force. Times are this EPP's clock, for a batch sent at `now`. Without
   * `placements`, the prefix placements are left out (an operator's view of what is in flight).
   */
  snapshot(now: number, placements = true): StateEntry[] {
    const entries: StateEntry[] = [];
    for (const [id, record] of this.own) {
      const endpoint = record.chargedTo;
      if (endpoint === undefined) continue;
      entries.push([STATE_PICK, id, endpoint.zone, endpoint.pod, record.chargedAt, NO_HASHES as number[]]);
    }
    for (const [endpoint, blocks] of placements ? this.index.placements() : []) {
      if (endpoint.deleted) continue;
      let slice: number[] = [];
      for (const hash of blocks) {
        slice.push(hash);
        if (slice.length === PLACEMENT_SLICE) {
          entries.push([STATE_PLACEMENT, endpoint.zone, endpoint.pod, slice]);
          slice = [];
        }
      }
      if (slice.length > 0) entries.push([STATE_PLACEMENT, endpoint.zone, endpoint.pod, slice]);
    }
    for (const [endpoint, until] of this.penalties.entries(now)) entries.push([STATE_PENALTY, endpoint.zone, endpoint.pod, until]);
    return entries;
  }
}
