import { KV_CLEARED, KV_REMOVED, KV_STORED, kvBlockKeys, kvKeySeed, type VllmKvBatch, type VllmKvEvent } from '@spillway/events';
import { describe, expect, it } from 'vitest';
import { PodKvMap, SeqTracker, splitKvEvents, type KvSkipReason } from '../src/kv-map.js';

const BS = 4;
const batch = (...events: VllmKvEvent[]): VllmKvBatch => ({ ts: 1, events, dataParallelRank: 0, unknownEvents: 0 });
const stored = (
  hashes: number[],
  parent: number | null,
  tokenIds: number[],
  extra: Partial<Extract<VllmKvEvent, { type: 'stored' }>> = {},
): VllmKvEvent => ({
  type: 'stored',
  hashes,
  parent,
  tokenIds,
  blockSize: BS,
  loraId: null,
  medium: 'GPU',
  loraName: null,
  ...extra,
});
const tokens = (n: number, base = 0) => Array.from({ length: n }, (_, i) => base + i);

function fold(map: PodKvMap, b: VllmKvBatch) {
  const skipped: Array<[KvSkipReason, number]> = [];
  const events = map.fold(b, (reason, blocks) => void skipped.push([reason, blocks]));
  return { events, skipped };
}

describe('PodKvMap: server hashes to content keys', () => {
  it('keys stored blocks by content, chained through the parent, as an EPP computes them from the prompt', () => {
    const map = new PodKvMap(1 << 20);
    const prompt = tokens(5 * BS);
    // The server reports the prompt in two events: blocks 0-1, then 2-4 chained to block 1.
    const a = fold(map, batch(stored([101, 102], null, prompt.slice(0, 2 * BS))));
    const b = fold(map, batch(stored([103, 104, 105], 102, prompt.slice(2 * BS))));
    const expected = kvBlockKeys(prompt, BS);
    expect(a.events).toEqual([[KV_STORED, expected.slice(0, 2)]]);
    expect(b.events).toEqual([[KV_STORED, expected.slice(2)]]);
    expect(map.snapshotKeys()).toEqual(expected);
    // Removal by server hash relays the content keys; unknown hashes are ignored.
    expect(fold(map, batch({ type: 'removed', hashes: [105, 999, 104], medium: 'GPU' })).events).toEqual([
      [KV_REMOVED, [expected[4], expected[3]]],
    ]);
    expect(fold(map, batch({ type: 'cleared' })).events).toEqual([[KV_CLEARED]]);
    expect(map.blocks).toBe(0);
    expect(map.bytes).toBe(0);
  });

  it('seeds a LoRA adapter by name, and skips what it cannot key', () => {
    const map = new PodKvMap(1 << 20);
    const t = tokens(BS, 7);
    expect(fold(map, batch(stored([1], null, t, { loraId: 1, loraName: 'sql-lora' }))).events).toEqual([
      [KV_STORED, kvBlockKeys(t, BS, { seed: kvKeySeed('sql-lora') })],
    ]);
    const r = fold(
      map,
      batch(
        stored([2], 77, t), // parent never seen
        stored([3], null, t.slice(1)), // token ids do not cover the block
        stored([4], null, t, { medium: 'CPU' }),
        stored([5], null, t, { loraId: 2 }), // an adapter without a name
      ),
    );
    expect(r.events).toEqual([]);
    expect(r.skipped).toEqual([
      ['orphan', 1],
      ['token-mismatch', 1],
      ['other-medium', 1],
      ['unnamed-lora', 1],
    ]);
  });

  it('keeps most recently stored last and re-stores move a block to the end', () => {
    const map = new PodKvMap(1 << 20);
    fold(map, batch(stored([1], null, tokens(BS, 0)), stored([2], null, tokens(BS, 100))));
    fold(map, batch(stored([1], null, tokens(BS, 0))));
    expect(map.snapshotKeys()).toEqual([...kvBlockKeys(tokens(BS, 100), BS), ...kvBlockKeys(tokens(BS, 0), BS)]);
  });

  it('stays within its byte bound, relaying the oldest blocks it forgets as removed', () => {
    const map = new PodKvMap(80 * 10);
    const prompt = tokens(25 * BS);
    const hashes = tokens(25, 1000);
    const r = fold(map, batch(stored(hashes, null, prompt)));
    const keys = kvBlockKeys(prompt, BS);
    expect(map.blocks).toBe(10);
    expect(map.bytes).toBeLessThanOrEqual(800);
    expect(r.events).toEqual([
      [KV_STORED, keys],
      [KV_REMOVED, keys.slice(0, 15)],
    ]);
    expect(r.skipped).toEqual([['pod-overflow', 15]]);
  });

  it('starts afresh when the server changes its block size', () => {
    const map = new PodKvMap(1 << 20);
    fold(map, batch(stored([1], null, tokens(BS))));
    const r = fold(map, batch(stored([2], null, tokens(8), { blockSize: 8 })));
    expect(r.events[0]).toEqual([KV_CLEARED]);
    expect(map.blockSize).toBe(8);
    expect(map.blocks).toBe(1);
  });
});

describe('splitKvEvents', () => {
  it('cuts batches at the event and key bounds, keeping order', () => {
    const events = [[KV_CLEARED], [KV_STORED, tokens(5)], [KV_REMOVED, tokens(2, 50)], [KV_STORED, [9]]] as const;
    const out = splitKvEvents(events as never, 2, 3);
    expect(out).toEqual([
      [[KV_CLEARED], [KV_STORED, [0, 1, 2]]],
      [[KV_STORED, [3, 4]]],
      [
        [KV_REMOVED, [50, 51]],
        [KV_STORED, [9]],
      ],
    ]);
    for (const b of out) expect(b.length).toBeLessThanOrEqual(2);
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
