import { KV_CLEARED, KV_REMOVED, KV_STORED, MAX_KV_SNAPSHOT_KEYS, type KvEvent } from '@spillway/events';

/**
 * One replica's collector side of KV events in the simulation: what the server's block events
 * become on `spillway.kv.…`. The engine reports blocks entering its prefix cache (with the
 * request, so their content keys are known) and evictions (its own hash only), as vLLM's
 * `BlockStored`/`BlockRemoved` do; the relay remembers server hash -> content key to translate
 * the removals, keeps the pod's block set for snapshots (most recently stored last), and collects
 * the events of the batch being built, in order.
 */
export class KvRelay {
  private readonly keyOf = new Map<number, number>();
  private readonly held = new Map<number, true>();
  private events: KvEvent[] = [];
  /** Sequence of the last batch taken (a lost batch still used its number: receivers see the gap). */
  seq = 0;
  /** Per receiver, when its last batch is delivered: core NATS keeps one publisher's order. */
  readonly deliveredAt: number[] = [];

  /** Blocks `hashes[i]` with content keys `keys[i]` entered the server's cache, parent first. */
  stored(hashes: readonly number[], keys: readonly number[], from: number, to: number): void {
    const run: number[] = [];
    for (let i = from; i < to && i < keys.length; i++) {
      const key = keys[i] as number;
      this.keyOf.set(hashes[i] as number, key);
      this.held.delete(key);
      this.held.set(key, true);
      run.push(key);
    }
    if (run.length === 0) return;
    const last = this.events[this.events.length - 1];
    if (last !== undefined && last[0] === KV_STORED) last[1].push(...run);
    else this.events.push([KV_STORED, run]);
  }

  /** The server evicted the block it hashes as `hash`. */
  evicted(hash: number): void {
    const key = this.keyOf.get(hash);
    if (key === undefined) return;
    this.keyOf.delete(hash);
    this.held.delete(key);
    const last = this.events[this.events.length - 1];
    if (last !== undefined && last[0] === KV_REMOVED) last[1].push(key);
    else this.events.push([KV_REMOVED, [key]]);
  }

  /** The server (re)started with an empty cache. */
  cleared(): void {
    this.keyOf.clear();
    this.held.clear();
    this.events = [[KV_CLEARED]];
  }

  /** The events since the last take, with the batch's sequence number; undefined when there are none. */
  take(): { seq: number; events: KvEvent[] } | undefined {
    if (this.events.length === 0) return undefined;
    const events = this.events;
    this.events = [];
    this.seq++;
    return { seq: this.seq, events };
  }

  /** The pod's blocks for a snapshot, newest last, at most MAX_KV_SNAPSHOT_KEYS. */
  snapshotKeys(): number[] {
    const keys = [...this.held.keys()];
    return keys.length > MAX_KV_SNAPSHOT_KEYS ? keys.slice(keys.length - MAX_KV_SNAPSHOT_KEYS) : keys;
  }
}
