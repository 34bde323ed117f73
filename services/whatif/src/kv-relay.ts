import { KV_CLEARED, KV_REMOVED, KV_STORED, MAX_KV_SNAPSHOT_KEYS, type KvEvent, type KvKnown } from '@spillway/events';

/**
 * What a restarted collector can recover of a server's cache from the server's replay socket
 * (vLLM's `replay_endpoint`, SGLang's the same; TensorRT-LLM has none):
 * - `none`: no replay socket (vLLM's default, `KVEventsConfig.replay_endpoint = None`; TensorRT-LLM):
 *   every pod starts afresh;
 * - `tail`: the server's buffer (vLLM's `buffer_steps`) holds only the batches of the last `tailMs`:
 *   afresh at its oldest batch, then those batches folded in;
 * - `full`: the buffer reaches back to the server's start: nothing is lost.
 */
export type KvReplayMode = 'none' | 'tail' | 'full';
export interface KvReplay {
  readonly mode: KvReplayMode;
  readonly tailMs: number;
}

const NO_REPLAY: KvReplay = { mode: 'none', tailMs: 0 };

/** Server hash -> content key, and the keyed blocks in store order (most recently stored last). */
class BlockMap {
  readonly keyOf = new Map<number, number>();
  readonly held = new Map<number, true>();

  /**
   * Blocks `[from, to)` of a request: their keys, or undefined for an orphan. A run whose parent
   * block is unknown here cannot be chained to a content key (the collector's `orphan`,
   * `services/collector/src/kv-map.ts` `RankKvMap.fold`): a continuation of a prefix stored before
   * the map started.
   */
  stored(hashes: readonly number[], keys: readonly number[], from: number, to: number): number[] | undefined {
    if (from > 0 && !this.keyOf.has(hashes[from - 1] as number)) return undefined;
    const run: number[] = [];
    for (let i = from; i < to && i < keys.length; i++) {
      const key = keys[i] as number;
      this.keyOf.set(hashes[i] as number, key);
      this.held.delete(key);
      this.held.set(key, true);
      run.push(key);
    }
    return run;
  }

  /** The block's key when it was known (and is now forgotten). */
  evicted(hash: number): number | undefined {
    const key = this.keyOf.get(hash);
    if (key === undefined) return undefined;
    this.keyOf.delete(hash);
    this.held.delete(key);
    return key;
  }

  clear(): void {
    this.keyOf.clear();
    this.held.clear();
  }

  copyFrom(other: BlockMap): void {
    this.clear();
    for (const [hash, key] of other.keyOf) this.keyOf.set(hash, key);
    for (const key of other.held.keys()) this.held.set(key, true);
  }
}

/** One server event as its replay buffer keeps it. */
interface LoggedStore {
  readonly at: number;
  readonly hashes: readonly number[];
  readonly keys: readonly number[];
  readonly from: number;
  readonly to: number;
}
type Logged = LoggedStore | { readonly at: number; readonly evicted: number };

/**
 * The server's replay buffer. `full`: what a replay from the server's first batch rebuilds, i.e.
 * a map that never missed an event (bounded by the server's cache, not by the run's length).
 * `tail`: the server's events of the last `tailMs`, in order (vLLM's deque of the last
 * `buffer_steps` batches, `vllm/distributed/kv_events.py` `ZmqEventPublisher`).
 */
class ReplayBuffer {
  readonly everything = new BlockMap();
  private log: Logged[] = [];
  private head = 0;

  constructor(readonly replay: KvReplay) {}

  stored(entry: LoggedStore): void {
    if (this.replay.mode === 'full') this.everything.stored(entry.hashes, entry.keys, entry.from, entry.to);
    else if (this.replay.mode === 'tail') this.append(entry);
  }

  evicted(hash: number, at: number): void {
    if (this.replay.mode === 'full') this.everything.evicted(hash);
    else if (this.replay.mode === 'tail') this.append({ at, evicted: hash });
  }

  /** A restarted server has an empty cache and a new, empty buffer. */
  cleared(): void {
    this.everything.clear();
    this.log = [];
    this.head = 0;
  }

  /** The buffered events a replay requested at `now` returns, oldest first. */
  *tail(now: number): Generator<Logged> {
    this.prune(now);
    for (let i = this.head; i < this.log.length; i++) yield this.log[i] as Logged;
  }

  private append(entry: Logged): void {
    this.log.push(entry);
    this.prune(entry.at);
  }

  private prune(now: number): void {
    const oldest = now - this.replay.tailMs;
    while (this.head < this.log.length && (this.log[this.head] as Logged).at < oldest) this.head++;
    if (this.head > 1024 && this.head * 2 > this.log.length) {
      this.log = this.log.slice(this.head);
      this.head = 0;
    }
  }
}

/**
 * One replica's collector side of KV events in the simulation: what the server's block events
 * become on `spillway.kv.…`. The engine reports blocks entering its prefix cache (with the
 * request, so their content keys are known) and evictions (its own hash only), as vLLM's
 * `BlockStored`/`BlockRemoved` do; the relay remembers server hash -> content key to translate
 * the removals, keeps the pod's block set for snapshots (most recently stored last), and collects
 * the events of the batch being built, in order.
 *
 * A collector that goes down hears nothing; the one that starts in its place knows nothing: its
 * first batch clears the pod at every receiver (`services/collector/src/kv-relay.ts`
 * `PodRelay.publish`), then it recovers what the server's replay buffer holds (`KvReplay`), and
 * a stored run chained to a block it never heard of is an orphan it cannot key.
 *
 * Every batch and snapshot says what the relay knows of the pod (`known`, as `PodRelay.apply`
 * and `services/collector/src/kv-known.ts` `PodKnowledge` decide it): complete while it has
 * followed the server from its start (the simulation's start, a full replay, a restarted server's
 * empty cache); partial from a restart without a full replay until the server's cache turns over —
 * it stored as many blocks as it holds (`turnoverBlocks`, the engine's `numBlocks`, which the
 * collector reads from the server's metrics) since the last orphan (`RankKvMap.storedSinceUnknown`).
 */
export class KvRelay {
  private readonly map = new BlockMap();
  private readonly buffer: ReplayBuffer;
  private events: KvEvent[] = [];
  private down = false;
  /** The latest time the relay heard of (evictions come without one). */
  private clock = 0;
  /** Sequence of the last batch taken (a lost batch still used its number: receivers see the gap). */
  seq = 0;
  /** Per receiver, when its last batch is delivered: core NATS keeps one publisher's order. */
  readonly deliveredAt: number[] = [];
  /** Stored runs the collector could not key since its start (tests and reports). */
  orphans = 0;
  /** When the relay's continuous view began, and whether it names every block the server holds. */
  private since = 0;
  private complete = true;
  /** Blocks the server stored since the last orphan or fresh start (its cache turned over at `turnoverBlocks`). */
  private storedSinceUnknown = 0;

  constructor(
    replay: KvReplay = NO_REPLAY,
    /** The server's cache size in blocks. */
    private readonly turnoverBlocks = Number.POSITIVE_INFINITY,
  ) {
    this.buffer = new ReplayBuffer(replay);
  }

  /** What the relay knows of the pod's cache, as its batches say it. */
  known(): KvKnown {
    return { since: this.since, complete: this.complete };
  }

  /** As a snapshot says it: complete only when its keys are every block (not cut to the newest). */
  snapshotKnown(): KvKnown {
    return { since: this.since, complete: this.complete && this.map.held.size <= MAX_KV_SNAPSHOT_KEYS };
  }

  /** Blocks `hashes[i]` with content keys `keys[i]` entered the server's cache, parent first. */
  stored(hashes: readonly number[], keys: readonly number[], from: number, to: number, at = this.clock): void {
    this.clock = Math.max(this.clock, at);
    this.buffer.stored({ at, hashes, keys, from, to });
    if (!this.down) this.fold(hashes, keys, from, to);
  }

  /** The server evicted the block it hashes as `hash`. */
  evicted(hash: number): void {
    this.buffer.evicted(hash, this.clock);
    if (!this.down) this.forget(hash);
  }

  /** The server (re)started with an empty cache: a relay that hears it knows every block from here on. */
  cleared(): void {
    this.buffer.cleared();
    if (this.down) return;
    this.map.clear();
    this.events = [[KV_CLEARED]];
    this.complete = true;
    this.storedSinceUnknown = 0;
  }

  /** The collector stops: what it had not relayed is lost with it. */
  collectorDown(): void {
    this.down = true;
    this.events = [];
  }

  /**
   * A new collector starts at `now`: afresh (its first batch clears the pod), then the server's
   * replay: everything (`full`), the buffered tail folded as live events (`tail`), or nothing.
   */
  collectorUp(now: number): void {
    this.down = false;
    this.clock = Math.max(this.clock, now);
    this.map.clear();
    this.orphans = 0;
    this.events = [[KV_CLEARED]];
    // Only a replay from the server's first batch names every block it holds.
    this.since = now;
    this.complete = this.buffer.replay.mode === 'full';
    this.storedSinceUnknown = 0;
    if (this.buffer.replay.mode === 'full') {
      this.map.copyFrom(this.buffer.everything);
      if (this.map.held.size > 0) this.events.push([KV_STORED, [...this.map.held.keys()]]);
    } else if (this.buffer.replay.mode === 'tail') {
      for (const e of this.buffer.tail(now)) {
        if ('evicted' in e) this.forget(e.evicted);
        else this.fold(e.hashes, e.keys, e.from, e.to);
      }
    }
  }

  /** The events since the last take, with the batch's sequence number; undefined when there are none (or the collector is down). */
  take(now = this.clock): { seq: number; events: KvEvent[] } | undefined {
    this.clock = Math.max(this.clock, now);
    if (this.down || this.events.length === 0) return undefined;
    const events = this.events;
    this.events = [];
    this.seq++;
    return { seq: this.seq, events };
  }

  /** The pod's blocks for a snapshot, newest last, at most MAX_KV_SNAPSHOT_KEYS. */
  snapshotKeys(): number[] {
    const keys = [...this.map.held.keys()];
    return keys.length > MAX_KV_SNAPSHOT_KEYS ? keys.slice(keys.length - MAX_KV_SNAPSHOT_KEYS) : keys;
  }

  private forget(hash: number): void {
    const key = this.map.evicted(hash);
    if (key === undefined) return;
    const last = this.events[this.events.length - 1];
    if (last !== undefined && last[0] === KV_REMOVED) last[1].push(key);
    else this.events.push([KV_REMOVED, [key]]);
  }

  private fold(hashes: readonly number[], keys: readonly number[], from: number, to: number): void {
    const run = this.map.stored(hashes, keys, from, to);
    if (run === undefined) {
      this.orphans++;
      this.storedSinceUnknown = 0;
      return;
    }
    this.storedSinceUnknown += run.length;
    if (!this.complete && this.storedSinceUnknown >= this.turnoverBlocks) this.complete = true;
    if (run.length === 0) return;
    const last = this.events[this.events.length - 1];
    if (last !== undefined && last[0] === KV_STORED) last[1].push(...run);
    else this.events.push([KV_STORED, run]);
  }
}
