import {
  KV_CLEARED,
  KV_REMOVED,
  KV_STORED,
  kvBlockKey,
  kvKeySeed,
  MAX_KV_SNAPSHOT_KEYS,
  VLLM_MEDIUM_GPU,
  type KvBlockInfo,
  type VllmBlockHash,
  type VllmBlockStored,
  type VllmKvEvent,
} from '@spillway/events';
import { blockInfo, relayText, type KvChange } from './kv-info.js';

/** Why part of a model server's batch was not relayed (each counted by the collector). */
export type KvSkipReason =
  /** A BlockStored whose parent block is unknown here: its content keys cannot be chained. */
  | 'orphan'
  /** A BlockStored whose token ids do not cover its blocks exactly. */
  | 'token-mismatch'
  /** Blocks on a medium other than the GPU: kept to follow them, never relayed as cached (docs/kv-events.md "Tiers"). */
  | 'other-medium'
  /** A LoRA block named only by a numeric id: its keys could not be seeded as the EPP seeds them. */
  | 'unnamed-lora'
  /** Blocks of a KV-cache group other than the one prefix matches are made on (a hybrid model's sliding-window or Mamba group). */
  | 'other-group'
  /** Blocks whose content is more than their tokens (multimodal inputs, a cache salt): no request an EPP tokenizes matches them. */
  | 'extra-keys'
  /** The pod's map reached its byte bound: its oldest blocks were forgotten (and relayed as removed). */
  | 'pod-overflow';

/** Told of blocks not relayed as cached: why, how many, what the server said of them, and whether they were removals. */
export type SkipFn = (reason: KvSkipReason, blocks: number, what?: { info?: KvBlockInfo; removed?: boolean }) => void;

/**
 * A block as a rank's map holds it: its content key (-1: not matchable by any request), whether it
 * is relayed as cached, and the tier it is followed on (as the server names it; GPU when it names none).
 */
interface Held {
  key: number;
  relayed: boolean;
  medium: string;
}

/** The medium a held block is counted on: what the server said (cut to a description's length), GPU when it said nothing. */
function tierOf(medium: string | null): string {
  return medium === null ? VLLM_MEDIUM_GPU : (relayText(medium) ?? '(empty)');
}

/** Content key of a block no EPP request can match (extra keys, or chained from such a block). */
const UNMATCHABLE = -1;

/** Bytes one block with a numeric hash costs the relay, estimated: the rank map's entry (a Map slot, the hash, the Held object) and the pod union's entry. */
export const BLOCK_ENTRY_BYTES = 176;

function entryBytes(hash: VllmBlockHash): number {
  const base = BLOCK_ENTRY_BYTES;
  if (typeof hash === 'number') return base;
  if (typeof hash === 'bigint') return base + 16;
  return base + 2 * hash.length;
}

/** True for a medium that is the prefix cache requests are routed on (the GPU; null means it in every engine). */
export function onGpu(medium: string | null): boolean {
  return medium === null || medium === VLLM_MEDIUM_GPU;
}

/** Kinds of KV-cache group whose blocks hold every token of a prefix (vLLM's `kv_cache_spec_kind`). */
function fullAttention(kind: string): boolean {
  return kind.endsWith('full_attention') || kind === 'mla_attention';
}

export interface GroupInfo {
  readonly group: number;
  readonly kind: string | null;
  readonly window: number | null;
}

/** How well a group stands for the prefix cache: a full-attention kind, then a group that says nothing, then the widest window. */
function rank(g: GroupInfo): [number, number, number] {
  const tier = g.kind !== null ? (fullAttention(g.kind) ? 3 : 0) : g.window === null ? 2 : 1;
  return [tier, g.window ?? Number.POSITIVE_INFINITY, -g.group];
}

function better(a: GroupInfo, b: GroupInfo): boolean {
  const ra = rank(a);
  const rb = rank(b);
  for (let i = 0; i < 3; i++) if ((ra[i] as number) !== (rb[i] as number)) return (ra[i] as number) > (rb[i] as number);
  return false;
}

/**
 * Which of a server's KV-cache groups the relay follows. A hybrid model (full attention plus
 * sliding-window or Mamba layers) keeps one group per kind, each with its own blocks under the
 * SAME block hashes; the groups fill and evict independently (a sliding-window group drops old
 * blocks early). An EPP matches a request's tokens against one set of blocks per pod, and the group
 * that holds every block of a cached prefix is the full-attention one, so the relay follows that
 * group only: blocks of the others are skipped (`other-group`), and their removals never remove
 * the followed group's blocks. The group is chosen by what the events say: a full-attention kind
 * (`kv_cache_spec_kind`, lowest index first); without kinds, a group with no sliding window; else
 * the widest window (TensorRT-LLM says only the window). Servers that name no group are one group.
 */
class PrefixGroup {
  private readonly seen = new Map<number, GroupInfo>();
  chosen: GroupInfo | undefined;

  /** Learns a stored event's group; true when the followed group just changed to another one. */
  learn(e: VllmBlockStored): boolean {
    const group = e.group ?? 0;
    const known = this.seen.get(group);
    if (known !== undefined && known.kind === e.groupKind && known.window === e.slidingWindow) return false;
    if (known === undefined && this.seen.size >= 64) return false;
    const info: GroupInfo = { group, kind: e.groupKind, window: e.slidingWindow };
    this.seen.set(group, info);
    if (this.chosen !== undefined && this.chosen.group !== group && !better(info, this.chosen)) return false;
    const moved = this.chosen !== undefined && this.chosen.group !== group;
    this.chosen = info;
    return moved;
  }

  follows(group: number | null): boolean {
    return this.chosen !== undefined && this.chosen.group === (group ?? 0);
  }
}

/** True when a block's extra keys hold anything besides the LoRA name (which seeds the key itself). */
function hasExtraKeys(extra: unknown, loraName: string | null): boolean {
  if (extra === null || extra === undefined) return false;
  if (!Array.isArray(extra)) return true;
  for (const part of extra) if (!(loraName !== null && part === loraName)) return true;
  return false;
}

/**
 * One model-server rank's blocks as the relay knows them: server block hash → content key
 * (`kvBlockKey`, chained from the parent block's key, seeded by the LoRA name), in store order,
 * oldest first. Turns the rank's events (in the common vocabulary of `@spillway/events`) into
 * content-keyed changes: `[1, keys, info]` now cached (with what the server said of the blocks),
 * `[2, keys]` no longer cached, `[3]` the rank's cache is empty; what it does not relay it reports
 * to its `SkipFn`, with the same description. Pure: no I/O, no clock. Bounded by `maxBytes`: past
 * it the oldest blocks are forgotten and reported removed, so receivers never hold a block the
 * relay could no longer report evicted.
 *
 * Blocks on other tiers (CPU offload, disk, remote) are held but not reported cached: a tier move
 * back to the GPU (TensorRT-LLM) then knows their keys, and a GPU block chained to one is keyed.
 */
export class RankKvMap {
  private readonly byHash = new Map<VllmBlockHash, Held>();
  private readonly groups = new PrefixGroup();
  private bytesHeld = 0;
  /** Tokens per block of this server (0 until its first BlockStored). */
  blockSize = 0;
  /**
   * GPU blocks of the followed group the server stored since the map last met a sign of blocks it
   * cannot name: a stored run whose parent it never heard of (`orphan`), blocks it forgot for its
   * byte bound, or a clear. Once this reaches the server's cache size, a view that began partial
   * names every block the server holds (kv-known.ts).
   */
  storedSinceUnknown = 0;

  constructor(private readonly maxBytes: number) {}

  get blocks(): number {
    return this.byHash.size;
  }

  get bytes(): number {
    return this.bytesHeld;
  }

  clear(): void {
    this.byHash.clear();
    this.bytesHeld = 0;
    this.storedSinceUnknown = 0;
  }

  /** The KV-cache group followed (undefined before the first BlockStored). */
  get group(): GroupInfo | undefined {
    return this.groups.chosen;
  }

  /** Blocks held that are relayed as cached; every block held is counted into `tiers` by its tier. */
  summary(tiers: Map<string, number>): number {
    let relayed = 0;
    for (const held of this.byHash.values()) {
      if (held.relayed) relayed++;
      tiers.set(held.medium, (tiers.get(held.medium) ?? 0) + 1);
    }
    return relayed;
  }

  /** Folds one batch's events; appends the changes to relay (in order) to `out` and reports what it skipped. */
  fold(events: readonly VllmKvEvent[], out: KvChange[], skip: SkipFn): void {
    // The groups first: a batch that stores into several groups settles which one is followed before any is applied.
    let moved = false;
    for (const e of events) if (e.type === 'stored' && this.groups.learn(e)) moved = true;
    if (moved && this.byHash.size > 0) {
      // The blocks held are another group's: start over with the group that stands for the prefix cache.
      this.clear();
      out.push([KV_CLEARED]);
    }
    for (const e of events) {
      if (e.type === 'cleared') {
        this.clear();
        out.push([KV_CLEARED]);
      } else if (e.type === 'stored') this.stored(e, out, skip);
      else if (e.type === 'removed') this.removed(e.hashes, e.medium, e.group, out, skip);
      else this.moved(e.hashes, e.medium, e.group, out);
    }
    this.enforceBound(out, skip);
  }

  private stored(e: VllmBlockStored, out: KvChange[], skip: SkipFn): void {
    const n = e.hashes.length;
    const said = { medium: e.medium, group: e.group, kind: e.groupKind, window: e.slidingWindow, lora: e.loraName };
    const info = blockInfo(said);
    if (!this.groups.follows(e.group)) return skip('other-group', n, { info });
    // SGLang leaves a request's cache salt out of its block hashes: kept under those hashes, a salted
    // block would alias the unsalted one. Such blocks are never matchable anyway, so they are not kept.
    if (e.unhashedSalt !== null) return skip('extra-keys', n, { info: blockInfo({ ...said, extraKeys: true }) });
    if (e.tokenIds.length !== n * e.blockSize) return skip('token-mismatch', n, { info });
    if (e.loraId !== null && e.loraName === null) return skip('unnamed-lora', n, { info });
    let parentKey: number | undefined;
    if (e.parent !== null) {
      parentKey = this.byHash.get(e.parent)?.key;
      if (parentKey === undefined) {
        // A request extended a block stored before this map's view began: the server holds blocks it cannot name.
        this.storedSinceUnknown = 0;
        return skip('orphan', n, { info });
      }
    }
    if (this.blockSize !== e.blockSize) {
      // Keys are only comparable at one block size: a server that changed it starts afresh.
      if (this.blockSize !== 0) {
        this.clear();
        out.push([KV_CLEARED]);
      }
      this.blockSize = e.blockSize;
    }
    const cached = onGpu(e.medium);
    const medium = tierOf(e.medium);
    const seed = kvKeySeed(e.loraName ?? undefined);
    const keys: number[] = [];
    let unmatchable = 0;
    let parent = parentKey;
    for (let i = 0; i < n; i++) {
      const h = e.hashes[i] as VllmBlockHash;
      const key =
        parent === UNMATCHABLE || hasExtraKeys(e.extraKeys?.[i], e.loraName)
          ? UNMATCHABLE
          : kvBlockKey(parent, e.tokenIds, i * e.blockSize, (i + 1) * e.blockSize, seed);
      parent = key;
      if (key === UNMATCHABLE) unmatchable++;
      const held = this.byHash.get(h);
      // A copy stored on another tier leaves the GPU copy as it is.
      if (!cached && held !== undefined) continue;
      if (held !== undefined) {
        this.byHash.delete(h);
        this.bytesHeld -= entryBytes(h);
      }
      // Re-stored: moved to the newest end (Map order is insertion order).
      this.byHash.set(h, { key, relayed: cached && key !== UNMATCHABLE, medium });
      this.bytesHeld += entryBytes(h);
      if (cached && key !== UNMATCHABLE) keys.push(key);
    }
    if (cached) this.storedSinceUnknown += n;
    if (unmatchable > 0) skip('extra-keys', unmatchable, { info: blockInfo({ ...said, extraKeys: true }) });
    if (!cached) skip('other-medium', n, { info });
    if (keys.length > 0) out.push([KV_STORED, keys, info]);
  }

  // Five parameters at most (lint): the removal's fields, then where the outcome goes.
  private removed(hashes: readonly VllmBlockHash[], medium: string | null, group: number | null, out: KvChange[], skip: SkipFn): void {
    const what = { info: blockInfo({ medium, group }), removed: true };
    if (!this.groups.follows(group)) {
      // Before any store nothing is held, so there is nothing to skip either.
      if (this.groups.chosen !== undefined) skip('other-group', hashes.length, what);
      return;
    }
    const otherTier = !onGpu(medium);
    const keys: number[] = [];
    for (const h of hashes) {
      const held = this.byHash.get(h);
      if (held === undefined) continue;
      // A copy leaving another tier leaves the GPU copy cached.
      if (otherTier && held.relayed) continue;
      this.byHash.delete(h);
      this.bytesHeld -= entryBytes(h);
      if (held.relayed) keys.push(held.key);
    }
    if (otherTier) skip('other-medium', hashes.length, what);
    if (keys.length > 0) out.push([KV_REMOVED, keys]);
  }

  /** Blocks that changed tier (TensorRT-LLM): cached from the moment they reach the GPU, not once they leave it. */
  private moved(hashes: readonly VllmBlockHash[], medium: string, group: number | null, out: KvChange[]): void {
    if (!this.groups.follows(group)) return;
    const toGpu = onGpu(medium);
    const tier = tierOf(medium);
    const cached: number[] = [];
    const gone: number[] = [];
    for (const h of hashes) {
      const held = this.byHash.get(h);
      if (held === undefined) continue;
      held.medium = tier;
      if (held.key === UNMATCHABLE || held.relayed === toGpu) continue;
      held.relayed = toGpu;
      (toGpu ? cached : gone).push(held.key);
    }
    if (gone.length > 0) out.push([KV_REMOVED, gone]);
    if (cached.length > 0) out.push([KV_STORED, cached, blockInfo({ medium, group, window: this.groups.chosen?.window })]);
  }

  private enforceBound(out: KvChange[], skip: SkipFn): void {
    if (this.bytesHeld <= this.maxBytes) return;
    const forgotten: number[] = [];
    let count = 0;
    for (const [h, held] of this.byHash) {
      if (this.bytesHeld <= this.maxBytes) break;
      this.byHash.delete(h);
      this.bytesHeld -= entryBytes(h);
      count++;
      if (held.relayed) forgotten.push(held.key);
    }
    this.storedSinceUnknown = 0;
    skip('pod-overflow', count, { removed: true });
    if (forgotten.length > 0) out.push([KV_REMOVED, forgotten]);
  }
}

/** Ranks of one pod the union can tell apart (one bit each). */
export const MAX_RANKS_PER_POD = 32;

/**
 * One pod's cached blocks over its data-parallel ranks: each rank (vLLM `--data-parallel-size`,
 * SGLang DP attention, TensorRT-LLM attention DP) has a KV cache of its own and reports it on its
 * own stream; the pod holds a block while any rank does. A rank's changes become the pod's: a key
 * stored is relayed stored (again, when another rank already holds it: that refreshes its
 * recency); a key removed or cleared is relayed removed only when no rank holds it any more; a
 * clear that leaves the pod empty is relayed as `[3]`. Keys are kept newest last, for snapshots.
 *
 * The EPP prices a pod by the union: the request reaches the pod, and which rank serves it is the
 * server's choice (vLLM balances by load, not by cache), so a block one rank holds is a hit only
 * when that rank gets the request (docs/kv-events.md "Data-parallel ranks").
 */
export class PodKvUnion {
  /** Content key → bit mask of the ranks holding it, least recently stored first. */
  private readonly holders = new Map<number, number>();

  get blocks(): number {
    return this.holders.size;
  }

  clear(): void {
    this.holders.clear();
  }

  /** Applies one rank's changes (from `RankKvMap.fold`), appending the pod's to `out` (stored ones with their description). */
  apply(rank: number, changes: readonly KvChange[], out: KvChange[]): void {
    const bit = 1 << rank;
    for (const change of changes) {
      if (change[0] === KV_CLEARED) {
        this.clearRank(rank, out);
        continue;
      }
      if (change[0] === KV_STORED) {
        for (const key of change[1]) {
          const mask = this.holders.get(key) ?? 0;
          this.holders.delete(key);
          this.holders.set(key, mask | bit);
        }
        out.push(change);
        continue;
      }
      const gone: number[] = [];
      for (const key of change[1]) {
        const mask = this.holders.get(key);
        if (mask === undefined || (mask & bit) === 0) continue;
        if ((mask & ~bit) === 0) {
          this.holders.delete(key);
          gone.push(key);
        } else this.holders.set(key, mask & ~bit);
      }
      if (gone.length > 0) out.push([KV_REMOVED, gone]);
    }
  }

  /** Everything `rank` held is gone: keys no other rank holds are relayed removed, or the pod cleared when none is left. */
  clearRank(rank: number, out: KvChange[]): void {
    if (this.holders.size === 0) return;
    const bit = 1 << rank;
    const gone: number[] = [];
    for (const [key, mask] of this.holders) {
      if ((mask & bit) === 0) continue;
      if ((mask & ~bit) === 0) {
        this.holders.delete(key);
        gone.push(key);
      } else this.holders.set(key, mask & ~bit);
    }
    if (this.holders.size === 0) out.push([KV_CLEARED]);
    else if (gone.length > 0) out.push([KV_REMOVED, gone]);
  }

  /** Content keys held, most recently stored last, at most `MAX_KV_SNAPSHOT_KEYS` (the newest). */
  snapshotKeys(): number[] {
    const skip = Math.max(0, this.holders.size - MAX_KV_SNAPSHOT_KEYS);
    const out: number[] = [];
    let i = 0;
    for (const key of this.holders.keys()) if (i++ >= skip) out.push(key);
    return out;
  }
}

/** What to do with a server message, given its sequence number. */
export type SeqVerdict = 'apply' | 'duplicate' | 'gap' | 'restart';

/**
 * A server's batch sequence as the relay follows it: `apply` the next one; a `gap` when some were
 * missed; a `duplicate` when a replay overlapped the live stream; a `restart` when the server
 * started again from 0 (its cache is new). The first message ever is checked against 0, so a
 * collector that starts after the server asks for a replay from 0 (or starts the pod afresh).
 */
export class SeqTracker {
  /** The next sequence number expected. */
  expected = 0;
  /** Sequence numbers in [replayFrom, replayTo) were just replayed: live copies of them are duplicates. */
  private replayFrom = Number.POSITIVE_INFINITY;
  private replayTo = Number.POSITIVE_INFINITY;

  verdict(seq: number): SeqVerdict {
    if (seq === this.expected) return 'apply';
    if (seq > this.expected) return 'gap';
    return seq >= this.replayFrom && seq < this.replayTo ? 'duplicate' : 'restart';
  }

  /** `seq` was applied (or the pod restarted from it). */
  advance(seq: number): void {
    this.expected = seq + 1;
    // Live messages past the replayed range: no more duplicates to expect.
    if (seq >= this.replayTo) this.replayFrom = this.replayTo = Number.POSITIVE_INFINITY;
  }

  /** Batches [from, to) were just replayed. */
  replayed(from: number, to: number): void {
    this.replayFrom = from;
    this.replayTo = to;
  }
}
