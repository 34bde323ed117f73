import type { Endpoint } from '@spillway/fleet';
import {
  KV_CLEARED,
  KV_STORED,
  kvBlockKeys,
  kvCreditable,
  KvStoredRuns,
  type KvBatch,
  type KvKnown,
  type KvSnapshotEvent,
} from '@spillway/events';

/**
 * The precise block index (precise prefix-cache routing, docs/kv-events.md "The EPP's block
 * index"): which pod holds which KV-cache block, as the model servers themselves report it (the
 * collector relays their block events as content keys, `spillway.kv.…` batches, and a periodic
 * `kv` snapshot per pod). Pure: the clock is handed in.
 *
 * - block key -> the pods holding it (one pod, or an array of them: most blocks have one holder);
 * - pod -> its keys, a Map in recency order (its LRU), for removals, `cleared` and eviction;
 * - per pod: block size, the last relay `seq` applied, whether it is *blind* (a sequence gap
 *   lost deltas: what was known is dropped and nothing is believed until a `cleared` or snapshot),
 *   and whether its data is *partial*: the pod may hold blocks the index does not know (the relay
 *   said so, `known.complete` false, or the index's own view has a hole), so the lookup prices it
 *   by both prefix indexes (kv-lookup.ts).
 *
 * Bounded in bytes: every (pod, block) entry is charged `KV_ENTRY_BYTES` (measured: two Map entries
 * and the boxed 53-bit key cost 50–100 bytes with V8's power-of-two tables), so the default
 * 256 MiB holds ~3.3 M entries, e.g. 100 pods × 30,000 blocks. Past the bound, the pod holding the
 * most blocks loses its least recently stored ones; a pod past `maxBlocksPerPod` loses its own
 * oldest (both counted). At most `maxPods` pods are tracked (batches for more are dropped, counted).
 */
export const KV_ENTRY_BYTES = 80;
const POD_BYTES = 512;

export interface KvIndexOptions {
  /** Estimated bytes the index may hold (entries × KV_ENTRY_BYTES + pods × 512). Default 256 MiB. */
  readonly maxBytes?: number;
  /** Blocks one pod may hold in the index; a flooding pod loses its oldest. Default 131,072. */
  readonly maxBlocksPerPod?: number;
  /** Pods tracked at once. Default 4,096. */
  readonly maxPods?: number;
  /** Snapshots dated more than this after their receive time are refused (as the fleet refuses events). Default 5 s. */
  readonly maxClockSkewMs?: number;
}

export interface KvIndexStats {
  /** Pods with KV data (not blind). */
  readonly pods: number;
  /** Of those, pods whose data is partial (`KvPod.partial`): priced by both prefix indexes. */
  readonly partialPods: number;
  /** (pod, block) entries held. */
  readonly blocks: number;
  /** Estimated bytes held. */
  readonly bytes: number;
  /** Sequence gaps seen (each blinds its pod until a `cleared` or snapshot). */
  readonly gaps: number;
  /** Batches and snapshots not applied: stale or duplicate seq, another pool, too many pods, future-dated. */
  readonly droppedBatches: number;
  /** Requests looked up with token ids, and those where some pod held at least their first block. */
  readonly lookups: number;
  readonly hits: number;
  /** Entries evicted for the byte bound or a pod's cap (a flooding pod). */
  readonly evicted: number;
  /**
   * Stored keys not credited because their batch says they are on another tier than the GPU or
   * have extra keys (`kvCreditable`). The collector never relays such blocks as keys; another
   * publisher that does is not believed.
   */
  readonly uncredited: number;
  readonly snapshots: number;
  readonly batches: number;
}

/** One pod's blocks as the index knows them. */
export class KvPod {
  /** Keys in recency order (least recent first). */
  readonly keys = new Map<number, true>();
  blockSize = 0;
  /** The relay seq of the last batch or snapshot applied; -1 before any. */
  seq = -1;
  /** Deltas were lost: nothing is believed until a `cleared` or snapshot. */
  blind = false;
  /** The relay's latest word (`known.complete` false): it may not know every block the pod holds. Absent: it vouches for all. */
  relayPartial = false;
  /**
   * This index's own view has a hole: it began from a snapshot that was not complete (cut to its
   * newest keys, or of a partial relay), or it evicted the pod's blocks for its bounds. Healed by a
   * `cleared` (the view starts again from empty) or a complete snapshot.
   */
  holed = false;
  /** When the relay's continuous view of the pod began (`known.since`); -1 when it said nothing. */
  knownSince = -1;
  lastSeenAt = 0;
  // Per-lookup match (see KvBlockIndex.prepare): valid when matchEpoch is the index's epoch.
  match = 0;
  matchEpoch = -1;
  /** The fleet's record of this pod, resolved by the lookup when it first matches (re-resolved once deleted). */
  endpoint: Endpoint | undefined = undefined;

  constructor(
    readonly zone: string,
    readonly pod: string,
  ) {}

  /** The pod may hold blocks this index does not know: their absence here is not a miss. */
  get partial(): boolean {
    return this.relayPartial || this.holed;
  }
}

type Holders = KvPod | KvPod[];

export class KvBlockIndex {
  readonly maxBytes: number;
  readonly maxBlocksPerPod: number;
  readonly maxPods: number;
  readonly maxClockSkewMs: number;
  private readonly zones = new Map<string, Map<string, KvPod>>();
  private readonly blocks = new Map<number, Holders>();
  private podCount = 0;
  private entries = 0;
  /** Pods per block size, so a lookup hashes the prompt once per size actually in use. */
  private readonly sizes = new Map<number, number>();
  private readonly counters = { gaps: 0, droppedBatches: 0, lookups: 0, hits: 0, evicted: 0, uncredited: 0, snapshots: 0, batches: 0 };

  // Per-lookup scratch: the prompt's keys per block size, and the pods matched.
  private epoch = 0;
  private readonly keyScratch = new Map<number, number[]>();
  /** Pods holding at least the first block of the prepared prompt (in no particular order). */
  readonly matched: KvPod[] = [];
  /** Deepest match of the prepared prompt, in tokens. */
  bestTokens = 0;

  constructor(
    readonly pool: string,
    options: KvIndexOptions = {},
  ) {
    this.maxBytes = options.maxBytes ?? 256 * 1024 * 1024;
    this.maxBlocksPerPod = options.maxBlocksPerPod ?? 131_072;
    this.maxPods = options.maxPods ?? 4096;
    this.maxClockSkewMs = options.maxClockSkewMs ?? 5_000;
  }

  get stats(): KvIndexStats {
    let pods = 0;
    let partialPods = 0;
    for (const zone of this.zones.values())
      for (const pod of zone.values())
        if (!pod.blind && pod.seq >= 0) {
          pods++;
          if (pod.partial) partialPods++;
        }
    return { pods, partialPods, blocks: this.entries, bytes: this.bytes, ...this.counters };
  }

  get bytes(): number {
    return this.entries * KV_ENTRY_BYTES + this.podCount * POD_BYTES;
  }

  /** The pod's entry when it has KV data that can be believed (known and not blind). */
  podOf(zone: string | undefined, pod: string): KvPod | undefined {
    if (zone === undefined) return undefined;
    const entry = this.zones.get(zone)?.get(pod);
    return entry !== undefined && !entry.blind && entry.seq >= 0 ? entry : undefined;
  }

  /** True when some pod has KV data, even none held (otherwise every pod is priced by the approximate index). */
  get hasData(): boolean {
    return this.podCount > 0;
  }

  /**
   * Applies one relayed batch (decoded and validated by `decodeKvBatch`). Its stored keys are
   * credited unless the batch's description of them (`stored` runs) says they cannot serve a
   * request from GPU memory: another tier, or extra keys (docs/kv-events.md). The other
   * descriptions (rank, group, LoRA name, skipped tallies) are for visibility and change nothing here.
   */
  applyBatch(batch: KvBatch, receivedAtMs: number): 'applied' | 'dropped' | 'gap' {
    if (batch.pool !== this.pool) return this.drop();
    const pod = this.podFor(batch.zone, batch.pod);
    if (pod === undefined) return this.drop();
    pod.lastSeenAt = receivedAtMs;
    // A batch that starts with `cleared` starts the pod afresh whatever its seq (a collector whose
    // sequence restarted lower); any other batch at or below the last seq is a duplicate.
    const fresh = batch.events[0]?.[0] === KV_CLEARED;
    if (pod.seq >= 0 && batch.seq <= pod.seq && !fresh) return this.drop();
    this.counters.batches++;
    let outcome: 'applied' | 'gap' = 'applied';
    if (pod.seq >= 0 && batch.seq > pod.seq + 1 && !pod.blind && !fresh) {
      // Deltas were lost (a removal among them would make the index claim blocks the pod no longer has).
      this.counters.gaps++;
      this.clearPod(pod);
      pod.blind = true;
      outcome = 'gap';
    }
    pod.seq = batch.seq;
    this.setBlockSize(pod, batch.blockSize);
    const runs = batch.stored === undefined ? undefined : new KvStoredRuns(batch.stored);
    for (const event of batch.events) {
      // Every stored event takes its run, whatever becomes of it, so the runs stay in step.
      const info = event[0] === KV_STORED ? runs?.next() : undefined;
      if (event[0] === KV_CLEARED) {
        this.clearPod(pod);
        pod.blind = false;
        pod.holed = false;
      } else if (pod.blind) {
        continue;
      } else if (event[0] === KV_STORED) {
        if (!kvCreditable(info)) {
          this.counters.uncredited += event[1].length;
          continue;
        }
        // Tail first, so the chain's parents are the most recent: LRU eviction takes tails before heads.
        const keys = event[1];
        for (let i = keys.length - 1; i >= 0; i--) this.hold(pod, keys[i] as number);
      } else {
        for (const key of event[1]) this.release(pod, key);
      }
    }
    this.takeKnown(pod, batch.known);
    this.enforceBounds(pod);
    return outcome;
  }

  /**
   * Replaces a pod's set with its snapshot, unless what the index knows is newer (a larger seq,
   * and not blind) or the same (an equal seq) — except that a complete snapshot of the same seq
   * heals a view with a hole. A snapshot dated too far in the future is refused, as the fleet refuses events.
   */
  applySnapshot(event: KvSnapshotEvent, receivedAtMs: number): 'applied' | 'dropped' | 'future' {
    if (event.observedAt > receivedAtMs + this.maxClockSkewMs) {
      this.counters.droppedBatches++;
      return 'future';
    }
    if (event.pool !== this.pool) return this.drop();
    const pod = this.podFor(event.zone, event.pod);
    if (pod === undefined) return this.drop();
    pod.lastSeenAt = receivedAtMs;
    if (pod.seq >= 0 && !pod.blind && event.seq <= pod.seq) {
      const heals = event.seq === pod.seq && pod.holed && event.known?.complete === true;
      if (!heals) return this.drop();
    }
    this.counters.snapshots++;
    this.clearPod(pod);
    pod.blind = false;
    this.takeKnown(pod, event.known);
    // What a snapshot leaves out (cut to its newest keys, or unknown to a partial relay) is a hole in this view.
    pod.holed = pod.relayPartial;
    pod.seq = event.seq;
    this.setBlockSize(pod, event.blockSize);
    const keys = event.keys;
    // Oldest first: the snapshot lists the most recently stored last.
    const first = Math.max(0, keys.length - this.maxBlocksPerPod);
    for (let i = first; i < keys.length; i++) this.hold(pod, keys[i] as number);
    this.enforceBounds(pod);
    return 'applied';
  }

  /** The relay's word on what it knows of the pod (absent: from a relay before the field, which vouched for every block). */
  private takeKnown(pod: KvPod, known: KvKnown | undefined): void {
    pod.relayPartial = known?.complete === false;
    pod.knownSince = known?.since ?? -1;
  }

  /** Forgets a pod and its blocks (deleted from the fleet, or gone silent). */
  forget(zone: string, pod: string): void {
    const byPod = this.zones.get(zone);
    const entry = byPod?.get(pod);
    if (byPod === undefined || entry === undefined) return;
    this.clearPod(entry);
    this.setBlockSize(entry, 0);
    byPod.delete(pod);
    if (byPod.size === 0) this.zones.delete(zone);
    this.podCount--;
  }

  /** Every pod the index tracks (for pruning). */
  *pods(): IterableIterator<KvPod> {
    for (const zone of this.zones.values()) yield* zone.values();
  }

  /**
   * Readies a lookup for a prompt's token ids: hashes them once per block size in use, then walks
   * the keys block by block through the holders, so every pod's longest leading match is known
   * (`matchTokensOf`) in O(blocks matched × holders). Returns the deepest match in tokens.
   */
  prepare(tokenIds: ArrayLike<number>, seed: number): number {
    this.epoch = (this.epoch + 1) | 0;
    const epoch = this.epoch;
    const matched = this.matched;
    matched.length = 0;
    this.bestTokens = 0;
    this.counters.lookups++;
    if (this.entries === 0) return 0;
    let best = 0;
    for (const blockSize of this.sizes.keys()) {
      let keys = this.keyScratch.get(blockSize);
      if (keys === undefined) {
        keys = [];
        this.keyScratch.set(blockSize, keys);
      }
      kvBlockKeys(tokenIds, blockSize, { seed, out: keys });
      if (keys.length === 0) continue;
      const start = matched.length;
      // Level 0: every holder of the first block (of this block size) starts a match.
      this.visit(this.blocks.get(keys[0] as number), blockSize, 0, epoch, matched);
      let live = matched.length - start;
      for (let level = 1; level < keys.length && live > 0; level++) {
        const holders = this.blocks.get(keys[level] as number);
        if (holders === undefined) break;
        live = 0;
        if (holders instanceof KvPod) {
          if (holders.matchEpoch === epoch && holders.match === level) {
            holders.match = level + 1;
            live = 1;
          }
        } else {
          for (const pod of holders) {
            if (pod.matchEpoch === epoch && pod.match === level) {
              pod.match = level + 1;
              live++;
            }
          }
        }
      }
      for (let i = start; i < matched.length; i++) {
        const pod = matched[i] as KvPod;
        const tokens = pod.match * blockSize;
        if (tokens > best) best = tokens;
      }
    }
    if (matched.length > 0) this.counters.hits++;
    this.bestTokens = best;
    return best;
  }

  /** Tokens of the prepared prompt this pod caches (0 unless it holds the first block). */
  matchTokensOf(pod: KvPod): number {
    return pod.matchEpoch === this.epoch ? pod.match * pod.blockSize : 0;
  }

  private visit(holders: Holders | undefined, blockSize: number, level: number, epoch: number, out: KvPod[]): void {
    if (holders === undefined) return;
    if (holders instanceof KvPod) {
      this.start(holders, blockSize, level, epoch, out);
      return;
    }
    for (const pod of holders) this.start(pod, blockSize, level, epoch, out);
  }

  private start(pod: KvPod, blockSize: number, level: number, epoch: number, out: KvPod[]): void {
    if (pod.blockSize !== blockSize || pod.blind) return;
    pod.matchEpoch = epoch;
    pod.match = level + 1;
    out.push(pod);
  }

  private drop(): 'dropped' {
    this.counters.droppedBatches++;
    return 'dropped';
  }

  private podFor(zone: string, name: string): KvPod | undefined {
    let byPod = this.zones.get(zone);
    let pod = byPod?.get(name);
    if (pod !== undefined) return pod;
    if (this.podCount >= this.maxPods) return undefined;
    if (byPod === undefined) {
      byPod = new Map();
      this.zones.set(zone, byPod);
    }
    pod = new KvPod(zone, name);
    byPod.set(name, pod);
    this.podCount++;
    return pod;
  }

  private setBlockSize(pod: KvPod, blockSize: number): void {
    if (pod.blockSize === blockSize) return;
    // Keys of another block size can never match this pod's new blocks.
    if (pod.keys.size > 0) this.clearPod(pod);
    if (pod.blockSize > 0) {
      const left = (this.sizes.get(pod.blockSize) ?? 1) - 1;
      if (left <= 0) {
        this.sizes.delete(pod.blockSize);
        this.keyScratch.delete(pod.blockSize);
      } else this.sizes.set(pod.blockSize, left);
    }
    pod.blockSize = blockSize;
    if (blockSize > 0) this.sizes.set(blockSize, (this.sizes.get(blockSize) ?? 0) + 1);
  }

  /** Marks `key` held by `pod`, as its most recent block. */
  private hold(pod: KvPod, key: number): void {
    const keys = pod.keys;
    if (keys.delete(key)) {
      keys.set(key, true);
      return;
    }
    keys.set(key, true);
    this.entries++;
    const holders = this.blocks.get(key);
    if (holders === undefined) this.blocks.set(key, pod);
    else if (holders instanceof KvPod) this.blocks.set(key, [holders, pod]);
    else holders.push(pod);
  }

  private release(pod: KvPod, key: number): void {
    if (!pod.keys.delete(key)) return;
    this.entries--;
    this.unhold(pod, key);
  }

  private unhold(pod: KvPod, key: number): void {
    const holders = this.blocks.get(key);
    if (holders === undefined) return;
    if (holders instanceof KvPod) {
      if (holders === pod) this.blocks.delete(key);
      return;
    }
    const at = holders.indexOf(pod);
    if (at < 0) return;
    holders[at] = holders[holders.length - 1] as KvPod;
    holders.pop();
    if (holders.length === 1) this.blocks.set(key, holders[0] as KvPod);
  }

  private clearPod(pod: KvPod): void {
    for (const key of pod.keys.keys()) this.unhold(pod, key);
    this.entries -= pod.keys.size;
    pod.keys.clear();
  }

  private evictOldest(pod: KvPod, count: number): void {
    const keys = pod.keys;
    // The pod still holds what it loses here: its absence is no longer a miss.
    if (count > 0 && keys.size > 0) pod.holed = true;
    for (let n = 0; n < count && keys.size > 0; n++) {
      const oldest = keys.keys().next().value as number;
      keys.delete(oldest);
      this.entries--;
      this.unhold(pod, oldest);
      this.counters.evicted++;
    }
  }

  private enforceBounds(pod: KvPod): void {
    if (pod.keys.size > this.maxBlocksPerPod) this.evictOldest(pod, pod.keys.size - this.maxBlocksPerPod);
    if (this.bytes <= this.maxBytes) return;
    // Over the byte bound: the pod holding the most blocks gives up its oldest, until under 98% of it
    // (a margin, so the next batch does not rescan the pods at once).
    const target = Math.floor(this.maxBytes * 0.98);
    while (this.bytes > target && this.entries > 0) {
      let largest: KvPod | undefined;
      for (const candidate of this.pods()) if (largest === undefined || candidate.keys.size > largest.keys.size) largest = candidate;
      if (largest === undefined) break;
      const excess = Math.ceil((this.bytes - target) / KV_ENTRY_BYTES);
      this.evictOldest(largest, Math.max(1, Math.min(excess, largest.keys.size - Math.floor(largest.keys.size / 2))));
    }
  }
}
