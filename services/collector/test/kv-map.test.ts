import {
  KV_CLEARED,
  KV_REMOVED,
  KV_STORED,
  kvBlockKeys,
  kvKeySeed,
  type KvBlockInfo,
  type KvEvent,
  type VllmBlockStored,
  type VllmKvEvent,
} from '@spillway/events';
import { KvBlockIndex } from '@spillway/scheduler';
import { describe, expect, it } from 'vitest';
import type { KvChange } from '../src/kv-info.js';
import { PodKnowledge } from '../src/kv-known.js';
import { PodKvUnion, RankKvMap, SeqTracker, type KvSkipReason } from '../src/kv-map.js';

const BS = 4;
const stored = (hashes: number[], parent: number | null, tokenIds: number[], extra: Partial<VllmBlockStored> = {}): VllmBlockStored => ({
  type: 'stored',
  hashes,
  parent,
  tokenIds,
  blockSize: BS,
  loraId: null,
  medium: 'GPU',
  loraName: null,
  extraKeys: null,
  group: null,
  groupKind: null,
  slidingWindow: null,
  unhashedSalt: null,
  ...extra,
});
const removed = (hashes: number[], extra: { medium?: string | null; group?: number | null } = {}): VllmKvEvent => ({
  type: 'removed',
  hashes,
  medium: extra.medium ?? 'GPU',
  group: extra.group ?? null,
});
const tokens = (n: number, base = 0) => Array.from({ length: n }, (_, i) => base + i);

/** The relayed event of a change (a stored change without what the server said of its blocks). */
const eventOf = (c: KvChange): KvEvent => (c[0] === KV_STORED ? [KV_STORED, c[1]] : c);

/** Folds `events`: the relayed events, the descriptions of the stored ones, and what was skipped (with its descriptions). */
function fold(map: RankKvMap, ...events: VllmKvEvent[]) {
  const skipped: Array<[KvSkipReason, number]> = [];
  const described: Array<{ reason: KvSkipReason; blocks: number; info?: KvBlockInfo; removed?: boolean }> = [];
  const out: KvChange[] = [];
  map.fold(events, out, (reason, blocks, what) => {
    skipped.push([reason, blocks]);
    described.push({ reason, blocks, ...what });
  });
  const infos = out.map((c) => (c[0] === KV_STORED ? c[2] : undefined));
  return { events: out.map(eventOf), infos, skipped, described, changes: out };
}

/** Relayed events applied to an EPP's block index, as the EPP does; the pod's longest leading match of `prompt`. */
function matchAtEpp(events: KvEvent[], prompt: number[], seed = 0): number {
  const index = new KvBlockIndex('llama');
  index.applyBatch(
    { v: 1, pool: 'llama', zone: 'z', pod: 'p', seq: 1, observedAt: 0, blockSize: BS, events: [[KV_CLEARED], ...events] },
    0,
  );
  index.prepare(prompt, seed);
  return index.bestTokens;
}

describe('RankKvMap: server hashes to content keys', () => {
  it('keys stored blocks by content, chained through the parent, as an EPP computes them from the prompt', () => {
    const map = new RankKvMap(1 << 20);
    const prompt = tokens(5 * BS);
    // The server reports the prompt in two events: blocks 0-1, then 2-4 chained to block 1.
    const a = fold(map, stored([101, 102], null, prompt.slice(0, 2 * BS)));
    const b = fold(map, stored([103, 104, 105], 102, prompt.slice(2 * BS)));
    const expected = kvBlockKeys(prompt, BS);
    expect(a.events).toEqual([[KV_STORED, expected.slice(0, 2)]]);
    expect(b.events).toEqual([[KV_STORED, expected.slice(2)]]);
    // Removal by server hash relays the content keys; unknown hashes are ignored.
    expect(fold(map, removed([105, 999, 104])).events).toEqual([[KV_REMOVED, [expected[4], expected[3]]]]);
    expect(fold(map, { type: 'cleared' }).events).toEqual([[KV_CLEARED]]);
    expect(map.blocks).toBe(0);
    expect(map.bytes).toBe(0);
  });

  it('seeds a LoRA adapter by name (its name in extra_keys too), and skips what it cannot key', () => {
    const map = new RankKvMap(1 << 20);
    const t = tokens(BS, 7);
    // vLLM puts the adapter's name into the block's extra keys as well: that is what the seed stands for.
    expect(fold(map, stored([1], null, t, { loraId: 1, loraName: 'sql-lora', extraKeys: [['sql-lora']] })).events).toEqual([
      [KV_STORED, kvBlockKeys(t, BS, { seed: kvKeySeed('sql-lora') })],
    ]);
    const r = fold(
      map,
      stored([2], 77, t), // parent never seen
      stored([3], null, t.slice(1)), // token ids do not cover the block
      stored([5], null, t, { loraId: 2 }), // an adapter without a name
    );
    expect(r.events).toEqual([]);
    expect(r.skipped).toEqual([
      ['orphan', 1],
      ['token-mismatch', 1],
      ['unnamed-lora', 1],
    ]);
  });

  it('never lets different adapters, extra keys or salts match each other or a plain request', () => {
    const t = tokens(3 * BS, 40);
    const plain = kvBlockKeys(t, BS);
    const lora = new RankKvMap(1 << 20);
    const loraKeys = fold(lora, stored([1, 2, 3], null, t, { loraId: 1, loraName: 'a' })).events;
    expect(loraKeys).toEqual([[KV_STORED, kvBlockKeys(t, BS, { seed: kvKeySeed('a') })]]);
    expect(matchAtEpp(loraKeys, t)).toBe(0);
    expect(matchAtEpp(loraKeys, t, kvKeySeed('b'))).toBe(0);
    expect(matchAtEpp(loraKeys, t, kvKeySeed('a'))).toBe(3 * BS);

    // A multimodal block (its hash covers an image) and every block chained after it: never matched.
    const mm = new RankKvMap(1 << 20);
    const r = fold(mm, stored([1, 2, 3], null, t, { extraKeys: [null, ['img-hash', 0], null] }));
    expect(r.events).toEqual([[KV_STORED, plain.slice(0, 1)]]);
    expect(r.skipped).toEqual([['extra-keys', 2]]);
    // ...and a block stored later under the image block stays unmatchable.
    expect(fold(mm, stored([4], 3, tokens(BS, 90))).events).toEqual([]);

    // vLLM's cache salt rides in the first block's extra keys: the whole chain is the salted request's own.
    const salted = new RankKvMap(1 << 20);
    expect(fold(salted, stored([1, 2, 3], null, t, { extraKeys: [['salt-x'], null, null] })).events).toEqual([]);

    // SGLang leaves the salt out of its hashes: the salted store must not alias (or replace) the unsalted block.
    const sglang = new RankKvMap(1 << 20);
    fold(sglang, stored([1, 2, 3], null, t));
    const s = fold(sglang, stored([1, 2, 3], null, t, { unhashedSalt: 'tenant-b' }));
    expect(s.events).toEqual([]);
    expect(s.skipped).toEqual([['extra-keys', 3]]);
    expect(fold(sglang, stored([4], 3, tokens(BS, 90))).events).toEqual([[KV_STORED, kvBlockKeys([...t, ...tokens(BS, 90)], BS).slice(3)]]);
  });

  it('a hybrid-attention stream: two groups share block hashes and must not match each other', () => {
    const map = new RankKvMap(1 << 20);
    const t = tokens(4 * BS, 3);
    const keys = kvBlockKeys(t, BS);
    const full = { group: 0, groupKind: 'full_attention' };
    const swa = { group: 1, groupKind: 'sliding_window', slidingWindow: 8 };
    const relayed: KvEvent[] = [];
    const step = (...events: VllmKvEvent[]) => {
      const r = fold(map, ...events);
      relayed.push(...r.events);
      return r;
    };
    // vLLM stores the prompt in both groups under the same hashes.
    const a = step(stored([1, 2, 3, 4], null, t, full), stored([1, 2, 3, 4], null, t, swa));
    expect(a.events).toEqual([[KV_STORED, keys]]);
    expect(a.skipped).toEqual([['other-group', 4]]);
    // The sliding-window group drops its early blocks: the full-attention group still holds them.
    const b = step(removed([1, 2], { group: 1 }));
    expect(b.events).toEqual([]);
    expect(matchAtEpp(relayed, t)).toBe(4 * BS);
    // Only the full-attention group's removal removes them.
    expect(step(removed([2], { group: 0 })).events).toEqual([[KV_REMOVED, [keys[1]]]]);
    expect(matchAtEpp(relayed, t)).toBe(BS);
  });

  it('picks the full-attention group whatever its index, and starts over when a later event shows a better one', () => {
    const map = new RankKvMap(1 << 20);
    const t = tokens(2 * BS);
    // A group that says nothing is followed until a full-attention one appears.
    expect(fold(map, stored([1, 2], null, t, { group: 0 })).events).toEqual([[KV_STORED, kvBlockKeys(t, BS)]]);
    const r = fold(map, stored([1, 2], null, t, { group: 2, groupKind: 'full_attention' }), stored([9], null, tokens(BS), { group: 0 }));
    expect(r.events).toEqual([[KV_CLEARED], [KV_STORED, kvBlockKeys(t, BS)]]);
    expect(r.skipped).toEqual([['other-group', 1]]);
    // TensorRT-LLM names only the window: the widest is the full-attention one.
    const trt = new RankKvMap(1 << 20);
    const narrow = fold(trt, stored([5], null, tokens(BS), { group: 512, slidingWindow: 512 }));
    const wide = fold(trt, stored([5], null, tokens(BS), { group: 4096, slidingWindow: 4096 }));
    expect(narrow.events).toEqual([[KV_STORED, kvBlockKeys(tokens(BS), BS)]]);
    expect(wide.events).toEqual([[KV_CLEARED], [KV_STORED, kvBlockKeys(tokens(BS), BS)]]);
    expect(fold(trt, stored([6], null, tokens(BS, 9), { group: 512, slidingWindow: 512 })).skipped).toEqual([['other-group', 1]]);
  });

  it('credits only the GPU tier: CPU-tier blocks are followed but never relayed as cached', () => {
    const map = new RankKvMap(1 << 20);
    const t = tokens(3 * BS, 11);
    const keys = kvBlockKeys(t, BS);
    // vLLM's CPU offload: the blocks are copied to the CPU, then evicted from the GPU.
    const a = fold(map, stored([1, 2, 3], null, t), stored([1, 2, 3], null, t, { medium: 'CPU' }));
    expect(a.events).toEqual([[KV_STORED, keys]]);
    expect(a.skipped).toEqual([['other-medium', 3]]);
    // The CPU copy leaving does not remove the GPU copy; the GPU eviction does.
    expect(fold(map, removed([3], { medium: 'CPU' })).events).toEqual([]);
    expect(fold(map, removed([1, 2, 3])).events).toEqual([[KV_REMOVED, keys]]);
    // A block only ever on the CPU tier is not credited at the EPP.
    const cpuOnly = new RankKvMap(1 << 20);
    const c = fold(cpuOnly, stored([1, 2, 3], null, t, { medium: 'CPU' }));
    expect(c.events).toEqual([]);
    expect(matchAtEpp(c.events, t)).toBe(0);
    // TensorRT-LLM moves a block between levels: cached from its move to the GPU until it leaves again.
    const moved = fold(cpuOnly, { type: 'moved', hashes: [1], medium: 'GPU', group: null });
    expect(moved.events).toEqual([[KV_STORED, [keys[0]]]]);
    expect(fold(cpuOnly, { type: 'moved', hashes: [1], medium: 'cache_level:1', group: null }).events).toEqual([[KV_REMOVED, [keys[0]]]]);
    // A GPU block chained to an offloaded parent is keyed (the parent is known), but matches only from block 0.
    const child = fold(cpuOnly, stored([4], 3, tokens(BS, 70)));
    expect(child.events).toEqual([[KV_STORED, kvBlockKeys([...t, ...tokens(BS, 70)], BS).slice(3)]]);
  });

  it('stays within its byte bound, relaying the oldest blocks it forgets as removed', () => {
    const map = new RankKvMap(176 * 10);
    const prompt = tokens(25 * BS);
    const r = fold(map, stored(tokens(25, 1000), null, prompt));
    const keys = kvBlockKeys(prompt, BS);
    expect(map.blocks).toBe(10);
    expect(map.bytes).toBeLessThanOrEqual(1760);
    expect(r.events).toEqual([
      [KV_STORED, keys],
      [KV_REMOVED, keys.slice(0, 15)],
    ]);
    expect(r.skipped).toEqual([['pod-overflow', 15]]);
  });

  it('starts afresh when the server changes its block size', () => {
    const map = new RankKvMap(1 << 20);
    fold(map, stored([1], null, tokens(BS)));
    const r = fold(map, stored([2], null, tokens(8), { blockSize: 8 }));
    expect(r.events[0]).toEqual([KV_CLEARED]);
    expect(map.blockSize).toBe(8);
    expect(map.blocks).toBe(1);
  });
});

describe('RankKvMap: what the server said of the blocks', () => {
  it('each stored change carries its medium, group, kind, window and LoRA name; skipped blocks are told with theirs', () => {
    const map = new RankKvMap(1 << 20);
    const t = tokens(2 * BS, 5);
    const full = { medium: 'GPU', group: 0, groupKind: 'full_attention' };
    const r = fold(
      map,
      stored([1, 2], null, t, full),
      stored([1, 2], null, t, { ...full, group: 1, groupKind: 'sliding_window', slidingWindow: 4096 }),
      stored([3], null, tokens(BS, 50), { ...full, loraId: 1, loraName: 'sql-lora', extraKeys: [['sql-lora']] }),
      stored([1, 2], null, t, { ...full, medium: 'CPU' }),
      stored([4], null, tokens(BS, 90), { ...full, extraKeys: [['img']] }),
      removed([1, 2], { medium: 'CPU', group: 0 }),
    );
    expect(r.infos.filter((i) => i !== undefined)).toEqual([
      { medium: 'GPU', group: 0, kind: 'full_attention' },
      { medium: 'GPU', group: 0, kind: 'full_attention', lora: 'sql-lora' },
    ]);
    expect(r.described).toEqual([
      { reason: 'other-group', blocks: 2, info: { medium: 'GPU', group: 1, kind: 'sliding_window', window: 4096 } },
      { reason: 'other-medium', blocks: 2, info: { medium: 'CPU', group: 0, kind: 'full_attention' } },
      { reason: 'extra-keys', blocks: 1, info: { medium: 'GPU', group: 0, kind: 'full_attention', extraKeys: true } },
      { reason: 'other-medium', blocks: 2, info: { medium: 'CPU', group: 0 }, removed: true },
    ]);
  });

  it('counts every block it follows by tier, and those relayed as cached, for the snapshot', () => {
    const map = new RankKvMap(1 << 20);
    fold(
      map,
      stored([1, 2], null, tokens(2 * BS), { medium: null }),
      stored([3], null, tokens(BS, 30), { medium: 'CPU' }),
      stored([4], null, tokens(BS, 60), { extraKeys: [['img']] }),
      stored([5], null, tokens(BS, 90), { medium: 'x'.repeat(300) }),
    );
    const tiers = new Map<string, number>();
    expect(map.summary(tiers)).toBe(2);
    expect(Object.fromEntries(tiers)).toEqual({ GPU: 3, CPU: 1, ['x'.repeat(64)]: 1 });
    expect(map.group).toEqual({ group: 0, kind: null, window: null });
    // TensorRT-LLM moves a block to the host: it is counted there from then on.
    fold(map, { type: 'moved', hashes: [1], medium: 'cache_level:1', group: null });
    tiers.clear();
    expect(map.summary(tiers)).toBe(1);
    expect(tiers.get('cache_level:1')).toBe(1);
  });
});

describe('PodKvUnion: one pod over its data-parallel ranks', () => {
  it('two ranks of one pod: a block is cached while any rank holds it; a rank clear leaves the other rank', () => {
    const union = new PodKvUnion();
    const ranks = [new RankKvMap(1 << 20), new RankKvMap(1 << 20)];
    const apply = (rank: number, ...events: VllmKvEvent[]) => {
      const out: KvChange[] = [];
      union.apply(rank, fold(ranks[rank] as RankKvMap, ...events).changes, out);
      return out.map(eventOf);
    };
    const shared = tokens(2 * BS);
    const own = tokens(BS, 500);
    const k = kvBlockKeys(shared, BS);
    // Both ranks cache the shared prefix (each has its own hashes); rank 1 also another block.
    expect(apply(0, stored([10, 11], null, shared))).toEqual([[KV_STORED, k]]);
    expect(apply(1, stored([20, 21], null, shared), stored([22], null, own))).toEqual([
      [KV_STORED, k],
      [KV_STORED, kvBlockKeys(own, BS)],
    ]);
    expect(union.blocks).toBe(3);
    // Rank 0 evicts the prefix: rank 1 still holds it, so nothing is relayed removed.
    expect(apply(0, removed([10, 11]))).toEqual([]);
    // Rank 1 clears its cache: what no rank holds goes, and the pod is then empty.
    expect(apply(1, { type: 'cleared' })).toEqual([[KV_CLEARED]]);
    expect(apply(0, stored([12], null, own))).toEqual([[KV_STORED, kvBlockKeys(own, BS)]]);
    const out: KvChange[] = [];
    union.apply(1, fold(ranks[1] as RankKvMap, stored([23], null, tokens(BS, 900))).changes, out);
    // Rank 1 starting afresh removes only its own block.
    const fresh: KvChange[] = [];
    union.clearRank(1, fresh);
    expect(fresh).toEqual([[KV_REMOVED, kvBlockKeys(tokens(BS, 900), BS)]]);
    expect(union.snapshotKeys()).toEqual(kvBlockKeys(own, BS));
  });
});

describe('SeqTracker', () => {
  it('tells next, gap, duplicate (after a replay) and restart apart', () => {
    const t = new SeqTracker();
    expect(t.verdict(0)).toBe('apply');
    t.advance(0);
    expect(t.verdict(1)).toBe('apply');
    expect(t.verdict(5)).toBe('gap');
    t.replayed(1, 5);
    for (let s = 1; s < 5; s++) t.advance(s);
    expect(t.verdict(3)).toBe('duplicate');
    t.advance(5);
    expect(t.verdict(3)).toBe('restart');
    expect(t.verdict(0)).toBe('restart');
    const late = new SeqTracker();
    expect(late.verdict(40)).toBe('gap'); // a collector that starts after the server did
  });
});

describe('What the relay knows of a pod: turnover since the last sign of unknown blocks', () => {
  it('counts GPU blocks of the followed group stored since an orphan, the byte bound forgetting, or a clear', () => {
    const map = new RankKvMap(176 * 10);
    fold(map, stored([1, 2], null, tokens(2 * BS)));
    expect(map.storedSinceUnknown).toBe(2);
    // Another tier and another group take no slot of the cache the EPP prices.
    fold(
      map,
      stored([3], 2, tokens(BS, 50), { medium: 'CPU' }),
      stored([4], null, tokens(BS, 60), { group: 1, groupKind: 'sliding_window' }),
    );
    expect(map.storedSinceUnknown).toBe(2);
    // A request extended a block the map never heard of: the server holds blocks it cannot name.
    const orphan = fold(map, stored([6], 5, tokens(BS, 70)));
    expect(orphan.skipped).toEqual([['orphan', 1]]);
    expect(map.storedSinceUnknown).toBe(0);
    fold(map, stored([7, 8, 9], null, tokens(3 * BS, 80)));
    expect(map.storedSinceUnknown).toBe(3);
    // Past its byte bound it forgets blocks the server may still hold.
    fold(map, stored(tokens(12, 100), null, tokens(12 * BS, 200)));
    expect(map.storedSinceUnknown).toBe(0);
    // Full: every block stored forgets one more.
    fold(map, stored([30], null, tokens(BS, 400)));
    expect(map.storedSinceUnknown).toBe(0);
    fold(map, { type: 'cleared' }, stored([31], null, tokens(BS, 500)));
    expect(map.storedSinceUnknown).toBe(1);
    fold(map, { type: 'cleared' });
    expect(map.storedSinceUnknown).toBe(0);
  });

  it('a view is complete from the server start or a reset, partial after any other fresh start, and per pod only when every rank heard from is', () => {
    const k = new PodKnowledge();
    // Nothing heard yet: the pod is not vouched for.
    expect(k.known(100)).toEqual({ since: 100, complete: false });
    k.began(0, 200, true);
    expect(k.known(100)).toEqual({ since: 200, complete: true });
    // Rank 1 begins after its server stored blocks (a gap with no replay): the pod is partial since then.
    k.began(1, 300, false);
    expect(k.known(100)).toEqual({ since: 300, complete: false });
    expect([k.isComplete(0), k.isComplete(1), k.heard(2)]).toEqual([true, false, false]);
    // Its server reset its cache (or it turned over): complete again, the view still continuous since 300.
    k.completed(1);
    expect(k.known(100)).toEqual({ since: 300, complete: true });
    // The relay forgot blocks of rank 0 for its bound.
    k.lost(0);
    expect(k.known(100)).toEqual({ since: 300, complete: false });
    k.began(0, 400, true);
    expect(k.known(100)).toEqual({ since: 400, complete: true });
    // Completing or losing a rank never heard of changes nothing.
    k.completed(5);
    k.lost(5);
    expect(k.known(100)).toEqual({ since: 400, complete: true });
  });
});
