import {
  KV_CLEARED,
  KV_REMOVED,
  KV_STORED,
  kvBlockKeys,
  kvKeySeed,
  MAX_KV_SNAPSHOT_KEYS,
  VLLM_MEDIUM_GPU,
  type KvEvent,
  type VllmBlockHash,
  type VllmKvBatch,
} from '@spillway/events';

/** Why part of a model server's batch was not relayed (each counted by the collector). */
export type KvSkipReason =
  /** A BlockStored whose parent block is unknown here: its content keys cannot be chained. */
  | 'orphan'
  /** A BlockStored whose token ids do not cover its blocks exactly. */
  | 'token-mismatch'
  /** Blocks on a medium other than the GPU (CPU offload tiers are not the prefix cache routed on). */
  | 'other-medium'
  /** A LoRA block named only by a numeric id: its keys could not be seeded as the EPP seeds them. */
  | 'unnamed-lora'
  /** The pod's map reached its byte bound: its oldest blocks were forgotten (and relayed as removed). */
  | 'pod-overflow';

/** Bytes one map entry costs, estimated: a Map slot, a boxed double key and value; more for long hashes. */
function entryBytes(hash: VllmBlockHash): number {
  if (typeof hash === 'number') return 80;
  if (typeof hash === 'bigint') return 96;
  return 80 + 2 * hash.length;
}

/**
 * One model server's blocks as the relay knows them: server block hash → content key
 * (`kvBlockKeys`, chained from the parent block's key, seeded by the LoRA name), in store order,
 * oldest first. Turns the server's vLLM events into relayed events keyed by content. Pure: no
 * I/O, no clock. Bounded by `maxBytes`: past it the oldest blocks are forgotten and relayed as
 * removed, so receivers never hold a block the relay could no longer report evicted.
 */
export class PodKvMap {
  private readonly byHash = new Map<VllmBlockHash, number>();
  private bytesHeld = 0;
  /** Tokens per block of this server (0 until its first BlockStored). */
  blockSize = 0;

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
  }

  /** Content keys held, most recently stored last, at most `MAX_KV_SNAPSHOT_KEYS` (the newest). */
  snapshotKeys(): number[] {
    const skip = Math.max(0, this.byHash.size - MAX_KV_SNAPSHOT_KEYS);
    const out: number[] = [];
    let i = 0;
    for (const key of this.byHash.values()) if (i++ >= skip) out.push(key);
    return out;
  }

  /** Folds one decoded batch; returns the events to relay (in order) and reports what it skipped. */
  fold(batch: VllmKvBatch, skip: (reason: KvSkipReason, blocks: number) => void): KvEvent[] {
    const out: KvEvent[] = [];
    for (const e of batch.events) {
      if (e.type === 'cleared') {
        this.clear();
        out.push([KV_CLEARED]);
        continue;
      }
      if (e.medium !== null && e.medium !== VLLM_MEDIUM_GPU) {
        skip('other-medium', e.hashes.length);
        continue;
      }
      if (e.type === 'removed') {
        const keys: number[] = [];
        for (const h of e.hashes) {
          const key = this.byHash.get(h);
          if (key === undefined) continue;
          this.byHash.delete(h);
          this.bytesHeld -= entryBytes(h);
          keys.push(key);
        }
        if (keys.length > 0) out.push([KV_REMOVED, keys]);
        continue;
      }
      if (e.tokenIds.length !== e.hashes.length * e.blockSize) {
        skip('token-mismatch', e.hashes.length);
        continue;
      }
      if (e.loraId !== null && e.loraName === null) {
        skip('unnamed-lora', e.hashes.length);
        continue;
      }
      let parentKey: number | undefined;
      if (e.parent !== null) {
        parentKey = this.byHash.get(e.parent);
        if (parentKey === undefined) {
          skip('orphan', e.hashes.length);
          continue;
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
      const keys = kvBlockKeys(e.tokenIds, e.blockSize, { parent: parentKey, seed: kvKeySeed(e.loraName ?? undefined) });
      for (let i = 0; i < keys.length; i++) {
        const h = e.hashes[i] as VllmBlockHash;
        // Re-stored: moved to the newest end (Map order is insertion order).
        if (this.byHash.delete(h)) this.bytesHeld -= entryBytes(h);
        this.byHash.set(h, keys[i] as number);
        this.bytesHeld += entryBytes(h);
      }
      out.push([KV_STORED, keys]);
    }
    this.enforceBound(out, skip);
    return out;
  }

  private enforceBound(out: KvEvent[], skip: (reason: KvSkipReason, blocks: number) => void): void {
    if (this.bytesHeld <= this.maxBytes) return;
    const forgotten: number[] = [];
    for (const [h, key] of this.byHash) {
      if (this.bytesHeld <= this.maxBytes) break;
      this.byHash.delete(h);
      this.bytesHeld -= entryBytes(h);
      forgotten.push(key);
    }
    skip('pod-overflow', forgotten.length);
    out.push([KV_REMOVED, forgotten]);
  }
}

/**
 * Splits relayed events into batches within the relay's bounds (`maxEvents` events and
 * `maxKeys` keys per batch), cutting a long key list where needed. Order is kept.
 */
export function splitKvEvents(events: readonly KvEvent[], maxEvents: number, maxKeys: number): KvEvent[][] {
  const batches: KvEvent[][] = [];
  let current: KvEvent[] = [];
  let keys = 0;
  const push = (e: KvEvent, n: number): void => {
    if (current.length >= maxEvents || keys + n > maxKeys) {
      batches.push(current);
      current = [];
      keys = 0;
    }
    current.push(e);
    keys += n;
  };
  for (const e of events) {
    if (e[0] === KV_CLEARED) {
      push(e, 0);
      continue;
    }
    const list = e[1];
    for (let i = 0; i < list.length || i === 0; i += maxKeys) push([e[0], list.slice(i, i + maxKeys)], Math.min(maxKeys, list.length - i));
  }
  if (current.length > 0) batches.push(current);
  return batches;
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
