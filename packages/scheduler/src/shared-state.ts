import {
  RELEASED_WITHOUT_COMPLETION,
  STATE_PENALTY,
  STATE_PICK,
  STATE_PLACEMENT,
  STATE_RELEASE,
  STATE_STARTED,
  type StateBatch,
  type StateEntry,
} from '@spillway/events';
import { Charge, CHARGE_BYTES, type Endpoint, type Fleet } from '@spillway/fleet';
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
 * beyond the next sample. A remote request that never starts is forgotten `remoteEntryTtlMs` after
 * it arrived; a started one is a charge like this EPP's own (the endpoint's samples end it, or this
 * EPP's own bound for it); a peer silent for `peerTimeoutMs` (it sends heartbeats) is forgotten
 * with all its entries. Prefix placements outlive their peer: they say what an endpoint caches,
 * not who sent it.
 *
 * Clocks: a batch's times are its origin's clock. They are translated by the batch's `sentAt`:
 * an entry stamped `t` is taken to have happened `sentAt − t` (clamped to [0, remoteEntryTtlMs])
 * before the batch was received, on this EPP's clock. Clock skew between EPPs therefore never
 * matters; the channel's transit time (milliseconds) makes remote entries look that much younger.
 *
 * A peer's claims are bounded by what it could know: its penalties last at most this EPP's own
 * `penaltyMs` and go when the peer is forgotten; its started requests last at most the bound this
 * EPP derives itself (from their prompt and output limit, at its rates and its cap), and go with it; prefix placements (`[4, ...]`) are taken from
 * warm-start answers only (a live batch says where its picks went, with their blocks); a peer is
 * identified by its zone and id, so a batch on one zone's subjects cannot touch another zone's
 * peers; the peer table evicts the silent and holds at most `maxPeersPerZone` per zone, so made-up
 * ids cannot lock out a real EPP; and a sequence number cannot be pushed arbitrarily ahead.
 */
export interface SharedStateOptions {
  /** Where this EPP's own entries go; none: it shares nothing (it may still apply others'). */
  readonly outbox?: SharedStateOutbox | undefined;
  /** A remote in-flight entry is forgotten this long after it arrived (default: SHARED_STATE_DEFAULTS). */
  readonly remoteEntryTtlMs?: number;
  /** A peer with no batch for this long is forgotten with its entries (default: SHARED_STATE_DEFAULTS; peers send heartbeats). */
  readonly peerTimeoutMs?: number;
  /**
   * Most peers tracked at once (default: SHARED_STATE_DEFAULTS). A new peer beyond it makes room: peers silent past
   * `peerTimeoutMs` go first, then the longest-silent peer of the zone that holds the most.
   */
  readonly maxPeers?: number;
  /**
   * Most peers tracked per zone (default 32): a new peer of a full zone replaces that zone's
   * longest-silent one. One zone's publish rights (made-up EPP ids) can then neither fill the
   * table for the other zones nor keep a real, restarted EPP of its own zone out.
   */
  readonly maxPeersPerZone?: number;
  /** Most in-flight entries tracked per peer (default 65,536); further picks are ignored. */
  readonly maxEntriesPerPeer?: number;
  /**
   * Most in-flight entries tracked over all peers (default 262,144, about 40 MB): with `maxPeers`
   * and `maxEntriesPerPeer` alone, many hostile peers could make an EPP hold millions.
   */
  readonly maxRemoteEntries?: number;
}

/** The scheduler's structures a SharedState folds peers' entries into. */
export interface SharedStateParts {
  readonly fleet: Fleet;
  readonly pool: string;
  readonly index: PrefixIndex;
  readonly penalties: PenaltyBox;
  /** Inserts blocks into the prefix index for an endpoint, sized as the scheduler sizes it. */
  readonly learn: (endpoint: Endpoint, hashes: readonly number[]) => void;
  /** Penalties change eligibility: the scheduler drops its cached remote shortlist. */
  readonly onPenalty: () => void;
  /** How long a started request may stay charged to `endpoint` (charge-bound.ts, at this EPP's rates and cap). */
  readonly boundMs: (endpoint: Endpoint, promptTokens: number, maxTokens: number | undefined) => number;
  /** Tokens per hashed block (the scheduler's `prefix.blockTokens`): a peer's pick's prefill estimate. */
  readonly blockTokens: () => number;
}

/** Receives this EPP's entries, in order, as the scheduler makes them (the EPP's publisher buffers and batches them). */
export interface SharedStateOutbox {
  push(entry: StateEntry): void;
}

/**
 * Why a whole batch was refused: `replayed`, a sequence number not after the peer's last one;
 * `sequence-jump`, one further ahead of it than the peer could have counted since (docs/sharing.md).
 */
export type SharedRefusal = 'replayed' | 'sequence-jump';

/** What applying one batch did, for the caller's metrics. */
export interface SharedApplyResult {
  /** `applied`, or why the whole batch was refused. */
  readonly outcome: 'applied' | SharedRefusal | 'own';
  /** Batches of this peer missed before this one (by sequence number). */
  readonly gap: number;
  readonly entries: number;
  /**
   * Entries naming an endpoint this EPP does not know, a release or start of a request it does not
   * hold, past a peer's bound, or a prefix placement outside a warm-start answer.
   */
  readonly ignored: number;
  /**
   * The peer's sequence was taken up afresh at this batch: its sequence numbers had been refused
   * RESYNC_AFTER times in a row, consecutively, so its own count, not the one this EPP held, is true.
   */
  readonly resynced: boolean;
  /** Peers forgotten to make room for this batch's (a new peer of a full zone or a full table). */
  readonly evicted: number;
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

/** Estimated bytes of a peer's in-flight entry: the charge, its place in the peer's map. */
const REMOTE_CHARGE_BYTES = CHARGE_BYTES + 64;

/**
 * A peer's request in flight: a charge of its endpoint on this EPP's clock (translated), in its
 * peer's table by id. When the fleet ends it (by samples, at this EPP's bound) it leaves the table.
 */
class RemoteCharge extends Charge {
  /** Forgotten then unless started (a request whose start never came: lost, or it never started). */
  expiresAt: number;
  /** Prompt tokens its endpoint held of it when it was picked (its leading hashed blocks there). */
  cachedTokens = 0;

  constructor(
    private readonly peer: Peer,
    private readonly id: number,
    expiresAt: number,
  ) {
    super();
    this.expiresAt = expiresAt;
  }

  override get bytes(): number {
    return REMOTE_CHARGE_BYTES;
  }

  override chargeEnded(): void {
    this.peer.state.remoteEnded(this.peer, this.id);
  }
}

interface Peer {
  readonly epp: string;
  readonly zone: string;
  /** `zone/epp` with the zone's length in front: the peer's source name in the penalty box. */
  readonly key: string;
  lastSeenAt: number;
  lastSeq: number;
  /** The last refused sequence number and how many consecutive ones were refused in a row (re-sync). */
  refusedSeq: number;
  refusedRun: number;
  /** Request id -> its charge, in arrival order. */
  readonly entries: Map<number, RemoteCharge>;
  readonly state: SharedState;
}

/** Consecutive sequence numbers refused in a row after which a peer's sequence is taken up afresh. */
export const RESYNC_AFTER = 3;
/**
 * A peer's sequence number may run ahead of the last one seen by this many, plus one per
 * millisecond since that one (a batch per millisecond is far beyond what an EPP sends; batches it
 * could not send while disconnected still take their numbers).
 */
export const MAX_SEQ_AHEAD = 1024;

/** The peer heard from least recently. */
function stalest(peers: Iterable<Peer>): Peer | undefined {
  let found: Peer | undefined;
  for (const peer of peers) if (found === undefined || peer.lastSeenAt < found.lastSeenAt) found = peer;
  return found;
}

/** Token counts a started entry carries at most (the batch's bound: a larger one would fail the batch). */
const MAX_SHARED_TOKENS = 1_000_000_000;

/** `[5, id, startedAt, promptTokens, maxTokens]` of a started request (maxTokens 0: its body set none). */
function startedEntry(id: number, record: DecisionRecord): StateEntry {
  const prompt = Math.min(MAX_SHARED_TOKENS, Math.round(Math.max(0, record.promptTokens)));
  return [STATE_STARTED, id, record.startedAt, prompt, Math.min(MAX_SHARED_TOKENS, record.maxTokens ?? 0)];
}

/** Hashes per placement entry in a snapshot: keeps each well inside a batch's bounds. */
const PLACEMENT_SLICE = 8192;
const NO_HASHES: readonly number[] = [];

export class SharedState {
  readonly outbox: SharedStateOutbox | undefined;
  readonly remoteEntryTtlMs: number;
  readonly peerTimeoutMs: number;
  private readonly maxPeers: number;
  private readonly maxPeersPerZone: number;
  private readonly maxEntriesPerPeer: number;
  private readonly maxRemoteEntries: number;
  /** In-flight entries over all peers. */
  private remoteEntries = 0;
  /** A peer's penalty lasts at most this long from its receipt: this EPP's own `penaltyMs` (0: peers' penalties are ignored). */
  penaltyLimitMs = 0;
  /** Peers by zone, then by id. */
  private readonly zones = new Map<string, Map<string, Peer>>();
  private peerTotal = 0;
  /** This EPP's committed requests not yet released, by id (for warm-start snapshots). */
  private readonly own = new Map<number, DecisionRecord>();
  private nextId = 1;

  private readonly fleet: Fleet;
  private readonly pool: string;
  private readonly index: PrefixIndex;
  private readonly penalties: PenaltyBox;
  private readonly learn: SharedStateParts['learn'];
  private readonly onPenalty: () => void;
  private readonly boundMs: SharedStateParts['boundMs'];
  private readonly blockTokensOf: () => number;

  constructor(parts: SharedStateParts, options: SharedStateOptions = {}) {
    this.fleet = parts.fleet;
    this.pool = parts.pool;
    this.index = parts.index;
    this.penalties = parts.penalties;
    this.learn = parts.learn;
    this.onPenalty = parts.onPenalty;
    this.boundMs = parts.boundMs;
    this.blockTokensOf = parts.blockTokens;
    this.outbox = options.outbox;
    this.remoteEntryTtlMs = options.remoteEntryTtlMs ?? SHARED_STATE_DEFAULTS.remoteEntryTtlMs;
    this.peerTimeoutMs = options.peerTimeoutMs ?? SHARED_STATE_DEFAULTS.peerTimeoutMs;
    this.maxPeers = options.maxPeers ?? SHARED_STATE_DEFAULTS.maxPeers;
    this.maxPeersPerZone = options.maxPeersPerZone ?? SHARED_STATE_DEFAULTS.maxPeersPerZone;
    this.maxEntriesPerPeer = options.maxEntriesPerPeer ?? 65_536;
    this.maxRemoteEntries = options.maxRemoteEntries ?? 262_144;
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

  /** The request's response began: peers keep it charged past its stream, bounded by their own rule. */
  started(record: DecisionRecord): void {
    const outbox = this.outbox;
    if (outbox === undefined || record.shareId === 0) return;
    outbox.push(startedEntry(record.shareId, record));
  }

  /**
   * The request's charge ended without a completion (by samples, at its bound): a release whose
   * time, 0, no peer can take for a completion since its latest sample (readers that predate it too).
   */
  endedWithoutCompletion(record: DecisionRecord): void {
    const outbox = this.outbox;
    if (outbox === undefined || record.shareId === 0) return;
    this.own.delete(record.shareId);
    outbox.push([STATE_RELEASE, record.shareId, RELEASED_WITHOUT_COMPLETION]);
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

  /** How many of the peers known now (every zone) have an id before `self`: this EPP's rank in the pool, 0 first. */
  rankOf(self: string): number {
    let rank = 0;
    for (const peers of this.zones.values()) for (const epp of peers.keys()) if (epp !== self && epp < self) rank++;
    return rank;
  }

  /**
   * Folds one batch of another EPP (`batch.epp` of `batch.zone`) into this EPP's state, received at
   * `receivedAt` (this EPP's clock). The caller has decoded and validated it and checked its origin
   * against the subject; `self` is this EPP's own id (its own batches are never applied). A
   * snapshot (warm-start reply) is applied like a batch but takes no part in sequence checks, and
   * only a snapshot may carry prefix placements.
   */
  apply(batch: StateBatch, receivedAt: number, self?: string): SharedApplyResult {
    if (batch.epp === self) return { outcome: 'own', gap: 0, entries: 0, ignored: 0, resynced: false, evicted: 0 };
    let evicted = 0;
    let peer = this.zones.get(batch.zone)?.get(batch.epp);
    if (peer === undefined) {
      evicted = this.makeRoom(batch.zone, receivedAt);
      peer = this.addPeer(batch.zone, batch.epp, receivedAt);
    }
    let gap = 0;
    let resynced = false;
    if (batch.snapshot === undefined) {
      const refusal = this.checkSequence(peer, batch.seq, receivedAt);
      if (refusal === 'resync') resynced = true;
      else if (refusal !== undefined)
        return { outcome: refusal, gap: 0, entries: batch.entries.length, ignored: 0, resynced: false, evicted };
      else if (peer.lastSeq >= 0) gap = batch.seq - peer.lastSeq - 1;
      peer.lastSeq = batch.seq;
      peer.refusedRun = 0;
    }
    peer.lastSeenAt = Math.max(peer.lastSeenAt, receivedAt);
    const ignored = this.applyEntries(peer, batch, receivedAt);
    return { outcome: 'applied', gap, entries: batch.entries.length, ignored, resynced, evicted };
  }

  /**
   * Whether a batch's sequence number may be applied: after the peer's last one, and not further
   * ahead than it could have counted since (MAX_SEQ_AHEAD plus one a millisecond). Core NATS keeps
   * one publisher's messages in order, so anything else is a replay or a forgery — unless it keeps
   * coming: RESYNC_AFTER consecutive numbers refused in a row are the peer's real count (its
   * sequence was pushed ahead by a forged batch, or it restarted its count), taken up afresh.
   */
  private checkSequence(peer: Peer, seq: number, receivedAt: number): SharedRefusal | 'resync' | undefined {
    if (peer.lastSeq < 0) return undefined;
    const ahead = MAX_SEQ_AHEAD + Math.max(0, receivedAt - peer.lastSeenAt);
    let refusal: SharedRefusal | undefined;
    if (seq <= peer.lastSeq) refusal = 'replayed';
    else if (seq - peer.lastSeq > ahead) refusal = 'sequence-jump';
    if (refusal === undefined) return undefined;
    peer.refusedRun = peer.refusedRun > 0 && seq === peer.refusedSeq + 1 ? peer.refusedRun + 1 : 1;
    peer.refusedSeq = seq;
    return peer.refusedRun >= RESYNC_AFTER ? 'resync' : refusal;
  }

  private applyEntries(peer: Peer, batch: StateBatch, receivedAt: number): number {
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
          const charge = new RemoteCharge(peer, entry[1], receivedAt + maxAge);
          // Its prefill, for the backlog: the hashed blocks the endpoint did not hold before it
          // (its start, which says the whole prompt's length, corrects that below).
          const blocks = entry[5];
          const blockTokens = this.blockTokensOf();
          const held = this.index.heldPrefix(endpoint, blocks, blocks.length);
          charge.cachedTokens = held * blockTokens;
          charge.prefillTokens = (blocks.length - held) * blockTokens;
          if (!this.fleet.charge(charge, endpoint, local(entry[4]))) {
            ignored++;
            break;
          }
          peer.entries.set(entry[1], charge);
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
          // Ended without a completion there: the samples say what still runs, never counted as released since one.
          if (entry[2] === RELEASED_WITHOUT_COMPLETION) this.fleet.forgetCharge(held);
          else this.fleet.releaseCharge(held, local(entry[2]));
          break;
        }
        case STATE_STARTED: {
          const held = peer.entries.get(entry[1]);
          const endpoint = held?.chargedTo;
          if (held === undefined || endpoint === undefined) {
            ignored++;
            break;
          }
          // No longer the peer's to keep alive by TTL: started, it ends like this EPP's own.
          held.expiresAt = Number.POSITIVE_INFINITY;
          // Its whole prompt's length: the prefill it brings is that less what the endpoint held
          // (the hashed blocks stop at prefix.maxBlocks; a long document is longer).
          if (entry[3] > 0) held.prefillTokens = Math.max(0, entry[3] - held.cachedTokens);
          const startedAt = local(entry[2]);
          this.fleet.startCharge(held, startedAt, startedAt + this.boundMs(endpoint, entry[3], entry[4] === 0 ? undefined : entry[4]));
          break;
        }
        case STATE_PENALTY: {
          const endpoint = this.fleet.get(this.pool, entry[1], entry[2]);
          if (endpoint === undefined) {
            ignored++;
            break;
          }
          // No longer than this EPP would penalise it itself, and only while the peer is known.
          const until = receivedAt + Math.min(this.penaltyLimitMs, Math.max(0, entry[3] - batch.sentAt));
          if (until > receivedAt) {
            this.penalties.penalise(endpoint, until, peer.key);
            this.onPenalty();
          }
          break;
        }
        case STATE_PLACEMENT: {
          const endpoint = this.fleet.get(this.pool, entry[1], entry[2]);
          // A live batch teaches placements through its picks' blocks; whole placement lists are a warm start's.
          if (endpoint === undefined || batch.snapshot === undefined) {
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
    return ignored;
  }

  /** Room for a new peer of `zone`: the silent go first, then the longest-silent of a full zone (or of the fullest). Returns how many went. */
  private makeRoom(zone: string, now: number): number {
    const peers = this.zones.get(zone);
    if (peers !== undefined && peers.size >= this.maxPeersPerZone) {
      this.forget(stalest(peers.values()) as Peer);
      return 1;
    }
    if (this.peerTotal < this.maxPeers) return 0;
    let evicted = 0;
    for (const zonePeers of this.zones.values()) {
      for (const peer of [...zonePeers.values()]) {
        if (now - peer.lastSeenAt > this.peerTimeoutMs) {
          this.forget(peer);
          evicted++;
        }
      }
    }
    if (this.peerTotal < this.maxPeers) return evicted;
    let fullest: Map<string, Peer> | undefined;
    for (const zonePeers of this.zones.values()) if (fullest === undefined || zonePeers.size > fullest.size) fullest = zonePeers;
    this.forget(stalest((fullest as Map<string, Peer>).values()) as Peer);
    return evicted + 1;
  }

  private addPeer(zone: string, epp: string, now: number): Peer {
    let peers = this.zones.get(zone);
    if (peers === undefined) {
      peers = new Map();
      this.zones.set(zone, peers);
    }
    const peer: Peer = {
      epp,
      zone,
      key: `${zone.length}:${zone}/${epp}`,
      lastSeenAt: now,
      lastSeq: -1,
      refusedSeq: -1,
      refusedRun: 0,
      entries: new Map(),
      state: this,
    };
    peers.set(epp, peer);
    this.peerTotal++;
    return peer;
  }

  /** Forgets remote entries that never started within their time, and peers silent for `peerTimeoutMs`. Call now and then. */
  expire(now: number): SharedExpiry {
    let expired = 0;
    let peersForgotten = 0;
    let peerEntriesForgotten = 0;
    for (const peers of this.zones.values()) {
      for (const peer of [...peers.values()]) {
        if (now - peer.lastSeenAt > this.peerTimeoutMs) {
          peerEntriesForgotten += this.forget(peer);
          peersForgotten++;
          continue;
        }
        // Started entries never expire here (the fleet ends them), so they do not stop the walk.
        for (const [id, entry] of peer.entries) {
          if (entry.expiresAt > now) continue;
          this.drop(peer, id, entry);
          expired++;
        }
      }
    }
    return { expired, peersForgotten, peerEntriesForgotten };
  }

  /** Forgets a peer at once (it said goodbye, or the EPP wants it gone); returns how many in-flight entries went with it. */
  forgetPeer(zone: string, epp: string): number {
    const peer = this.zones.get(zone)?.get(epp);
    return peer === undefined ? 0 : this.forget(peer);
  }

  /** Whether `epp` of `zone` is a peer now: heard on its own subject, or taken in from a snapshot, and not forgotten since. */
  knowsPeer(zone: string, epp: string): boolean {
    return this.zones.get(zone)?.has(epp) === true;
  }

  /** Forgets a peer with its in-flight entries and its penalties. */
  private forget(peer: Peer): number {
    for (const entry of peer.entries.values()) this.fleet.forgetCharge(entry);
    this.remoteEntries -= peer.entries.size;
    const peers = this.zones.get(peer.zone) as Map<string, Peer>;
    peers.delete(peer.epp);
    if (peers.size === 0) this.zones.delete(peer.zone);
    this.peerTotal--;
    if (this.penalties.forgetSource(peer.key)) this.onPenalty();
    return peer.entries.size;
  }

  /** Forgets one in-flight entry of a peer without saying the request finished. */
  private drop(peer: Peer, id: number, entry: RemoteCharge): void {
    peer.entries.delete(id);
    this.remoteEntries--;
    this.fleet.forgetCharge(entry);
  }

  /** @internal The fleet ended a peer's charge itself (its samples, this EPP's bound, a cap): it leaves the peer's table. */
  remoteEnded(peer: Peer, id: number): void {
    if (peer.entries.delete(id)) this.remoteEntries--;
  }

  get peerCount(): number {
    return this.peerTotal;
  }

  peerList(): SharedPeer[] {
    const list: SharedPeer[] = [];
    for (const peers of this.zones.values()) {
      for (const p of peers.values()) {
        list.push({ epp: p.epp, zone: p.zone, lastSeenAt: p.lastSeenAt, lastSeq: p.lastSeq, inFlight: p.entries.size });
      }
    }
    return list;
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
   * What a starting peer needs (warm start): this EPP's own requests in flight and its own
   * penalties in force (not its peers': each peer answers for its own), and every prefix placement
   * it knows (its own and learnt ones: they say what an endpoint caches, whoever sent it there). Times are this EPP's clock, for a batch sent at `now`. Without
   * `placements`, the prefix placements are left out (an operator's view of what is in flight).
   */
  snapshot(now: number, placements = true): StateEntry[] {
    const entries: StateEntry[] = [];
    for (const [id, record] of this.own) {
      const endpoint = record.chargedTo;
      if (endpoint === undefined) continue;
      entries.push([STATE_PICK, id, endpoint.zone, endpoint.pod, record.chargedAt, NO_HASHES as number[]]);
      if (record.started) entries.push(startedEntry(id, record));
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
    for (const [endpoint, until] of this.penalties.ownEntries(now)) entries.push([STATE_PENALTY, endpoint.zone, endpoint.pod, until]);
    return entries;
  }
}
