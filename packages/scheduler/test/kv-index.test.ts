import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { kvBlockKeys, type KvBatch, type KvSnapshotEvent } from '@spillway/events';
import { KV_ENTRY_BYTES, KvBlockIndex } from '../src/index.js';

const POOL = 'llama';
const T = 1_764_420_000_000;
const BS = 4;

function batch(pod: string, seq: number, events: KvBatch['events'], zone = 'a', blockSize = BS): KvBatch {
  return { v: 1, pool: POOL, zone, pod, seq, observedAt: T, blockSize, events };
}
function snapshot(pod: string, seq: number, keys: number[], zone = 'a', extra: Partial<KvSnapshotEvent> = {}): KvSnapshotEvent {
  return { v: 1, kind: 'kv', pool: POOL, zone, pod, observedAt: T, blockSize: BS, seq, keys, ...extra };
}
const tokens = (n: number, from = 0): number[] => Array.from({ length: n }, (_, i) => from + i);
const keysOf = (t: number[]): number[] => kvBlockKeys(t, BS);

/** Each pod's matched tokens for a prompt, by pod name. */
function matches(index: KvBlockIndex, prompt: number[], seed = 0): Record<string, number> {
  index.prepare(prompt, seed);
  const out: Record<string, number> = {};
  for (const pod of index.pods()) {
    const m = index.matchTokensOf(pod);
    if (m > 0) out[pod.pod] = m;
  }
  return out;
}

describe('KvBlockIndex', () => {
  const prompt = tokens(20); // 5 blocks of 4
  const chain = keysOf(prompt);

  it("finds each pod's longest leading match, in every zone, and counts lookups and hits", () => {
    const index = new KvBlockIndex(POOL);
    index.applyBatch(batch('p0', 1, [[1, chain.slice(0, 3)]]), T);
    index.applyBatch(batch('p1', 1, [[1, chain]], 'b'), T);
    // p2 holds blocks 1..4 but not block 0: no leading match.
    index.applyBatch(batch('p2', 1, [[1, chain.slice(1)]]), T);
    expect(matches(index, prompt)).toEqual({ p0: 12, p1: 20 });
    expect(index.bestTokens).toBe(20);
    expect(index.matched.map((p) => p.pod).sort()).toEqual(['p0', 'p1']);
    // A different prompt with the same first two blocks.
    expect(matches(index, [...tokens(8), 99, 98, 97, 96])).toEqual({ p0: 8, p1: 8 });
    expect(matches(index, tokens(20, 500))).toEqual({});
    // A partial last block has no key: 7 tokens match 1 block.
    expect(matches(index, tokens(7))).toEqual({ p0: 4, p1: 4 });
    expect(index.stats).toMatchObject({ pods: 3, blocks: 3 + 5 + 4, lookups: 4, hits: 3, gaps: 0, droppedBatches: 0 });
  });

  it("keys blocks by seed: an adapter's blocks never match the base model's", () => {
    const index = new KvBlockIndex(POOL);
    index.applyBatch(batch('p0', 1, [[1, kvBlockKeys(prompt, BS, { seed: 77 })]]), T);
    expect(matches(index, prompt)).toEqual({});
    expect(matches(index, prompt, 77)).toEqual({ p0: 20 });
  });

  it('applies removals and cleared; duplicates and stale batches are dropped and counted', () => {
    const index = new KvBlockIndex(POOL);
    index.applyBatch(batch('p0', 1, [[1, chain]]), T);
    index.applyBatch(batch('p0', 2, [[2, [chain[2] as number]]]), T);
    expect(matches(index, prompt)).toEqual({ p0: 8 });
    expect(index.applyBatch(batch('p0', 2, [[1, chain]]), T)).toBe('dropped');
    expect(index.applyBatch(batch('p0', 1, [[1, chain]]), T)).toBe('dropped');
    expect(matches(index, prompt)).toEqual({ p0: 8 });
    index.applyBatch(batch('p0', 3, [[3], [1, chain.slice(0, 1)]]), T);
    expect(matches(index, prompt)).toEqual({ p0: 4 });
    expect(index.stats).toMatchObject({ blocks: 1, droppedBatches: 2 });
    // A batch starting with cleared is applied whatever its seq (a restarted collector counting from lower).
    expect(index.applyBatch(batch('p0', 2, [[3], [1, chain.slice(0, 2)]]), T)).toBe('applied');
    expect(matches(index, prompt)).toEqual({ p0: 8 });
    index.applyBatch(batch('p0', 3, [[2, [chain[1] as number]]]), T);
    expect(matches(index, prompt)).toEqual({ p0: 4 });
    expect(index.stats.gaps).toBe(0);
    // Removing a block nobody holds, or twice, changes nothing.
    index.applyBatch(batch('p0', 4, [[2, [chain[4] as number, chain[4] as number, 12345]]]), T);
    expect(matches(index, prompt)).toEqual({ p0: 4 });
    expect(index.stats.blocks).toBe(1);
  });

  it('a sequence gap drops what is known of the pod until a cleared or a snapshot', () => {
    const index = new KvBlockIndex(POOL);
    index.applyBatch(batch('p0', 1, [[1, chain]]), T);
    index.applyBatch(batch('p1', 1, [[1, chain]]), T);
    expect(index.applyBatch(batch('p0', 3, [[1, chain]]), T)).toBe('gap');
    expect(matches(index, prompt)).toEqual({ p1: 20 });
    expect(index.podOf('a', 'p0')).toBeUndefined();
    index.applyBatch(batch('p0', 4, [[1, chain]]), T);
    expect(matches(index, prompt)).toEqual({ p1: 20 });
    // A cleared marker (the collector's resync) makes the pod known again, empty, then as stored.
    index.applyBatch(batch('p0', 5, [[3], [1, chain.slice(0, 2)]]), T);
    expect(matches(index, prompt)).toEqual({ p0: 8, p1: 20 });
    // Another gap, then a snapshot replaces the set.
    index.applyBatch(batch('p0', 9, []), T);
    expect(index.podOf('a', 'p0')).toBeUndefined();
    expect(index.applySnapshot(snapshot('p0', 9, chain.slice(0, 4)), T)).toBe('applied');
    expect(matches(index, prompt)).toEqual({ p0: 16, p1: 20 });
    expect(index.stats).toMatchObject({ gaps: 2, pods: 2 });
  });

  it("a snapshot replaces the pod's set unless the index knows newer; live batches continue from its seq", () => {
    const index = new KvBlockIndex(POOL);
    expect(index.applySnapshot(snapshot('p0', 10, chain.slice(0, 2)), T)).toBe('applied');
    expect(matches(index, prompt)).toEqual({ p0: 8 });
    index.applyBatch(batch('p0', 11, [[1, chain.slice(2)]]), T);
    expect(matches(index, prompt)).toEqual({ p0: 20 });
    // An older or equal snapshot changes nothing (the batches after it are already applied).
    expect(index.applySnapshot(snapshot('p0', 10, []), T)).toBe('dropped');
    expect(index.applySnapshot(snapshot('p0', 11, []), T)).toBe('dropped');
    expect(matches(index, prompt)).toEqual({ p0: 20 });
    expect(index.applySnapshot(snapshot('p0', 12, chain.slice(0, 1)), T)).toBe('applied');
    expect(matches(index, prompt)).toEqual({ p0: 4 });
    expect(index.stats).toMatchObject({ snapshots: 2, droppedBatches: 2, blocks: 1 });
  });

  it("refuses future-dated snapshots and another pool's messages, counting them", () => {
    const index = new KvBlockIndex(POOL, { maxClockSkewMs: 1000 });
    expect(index.applySnapshot(snapshot('p0', 1, chain, 'a', { observedAt: T + 1001 }), T)).toBe('future');
    expect(index.applySnapshot(snapshot('p0', 1, chain, 'a', { pool: 'other' }), T)).toBe('dropped');
    expect(index.applyBatch({ ...batch('p0', 1, [[1, chain]]), pool: 'other' }, T)).toBe('dropped');
    expect(index.stats).toMatchObject({ pods: 0, blocks: 0, droppedBatches: 3 });
    expect(index.applySnapshot(snapshot('p0', 1, chain, 'a', { observedAt: T + 1000 }), T)).toBe('applied');
  });

  it('a pod flooding blocks keeps only its newest maxBlocksPerPod, counted as evicted', () => {
    const index = new KvBlockIndex(POOL, { maxBlocksPerPod: 100 });
    const flood = Array.from({ length: 5000 }, (_, i) => 1_000_000 + i);
    for (let s = 0; s < 5; s++) index.applyBatch(batch('flood', s + 1, [[1, flood.slice(s * 1000, (s + 1) * 1000)]]), T);
    index.applyBatch(batch('good', 1, [[1, chain]]), T);
    expect(index.stats).toMatchObject({ blocks: 105, evicted: 4900 });
    expect(matches(index, prompt)).toEqual({ good: 20 });
    // A snapshot over the cap keeps its newest keys.
    index.applySnapshot(snapshot('snap', 1, [...chain, ...flood.slice(0, 200)]), T);
    expect(index.podOf('a', 'snap')?.keys.size).toBe(100);
  });

  it('stays within its byte bound: the pod holding the most blocks loses its oldest first', () => {
    const maxBytes = 2000 * KV_ENTRY_BYTES;
    const index = new KvBlockIndex(POOL, { maxBytes });
    index.applyBatch(batch('small', 1, [[1, chain]]), T);
    for (let s = 0; s < 10; s++) {
      index.applyBatch(batch('big', s + 1, [[1, Array.from({ length: 1000 }, (_, i) => 5_000_000 + s * 1000 + i)]]), T);
      expect(index.bytes).toBeLessThanOrEqual(maxBytes);
    }
    expect(matches(index, prompt)).toEqual({ small: 20 });
    expect(index.stats.evicted).toBeGreaterThan(8000);
    // The newest of the big pod's blocks are what it keeps.
    expect(index.podOf('a', 'big')?.keys.has(5_000_000 + 9999)).toBe(true);
    expect(index.podOf('a', 'big')?.keys.has(5_000_000)).toBe(false);
  });

  it('tracks at most maxPods pods; forget() frees a pod and its blocks', () => {
    const index = new KvBlockIndex(POOL, { maxPods: 2 });
    index.applyBatch(batch('p0', 1, [[1, chain]]), T);
    index.applyBatch(batch('p1', 1, [[1, chain]]), T);
    expect(index.applyBatch(batch('p2', 1, [[1, chain]]), T)).toBe('dropped');
    index.forget('a', 'p0');
    expect(matches(index, prompt)).toEqual({ p1: 20 });
    expect(index.applyBatch(batch('p2', 1, [[1, chain]]), T)).toBe('applied');
    index.forget('a', 'p1');
    index.forget('a', 'p2');
    index.forget('a', 'nobody');
    expect(index.stats).toMatchObject({ pods: 0, blocks: 0 });
    expect(index.bytes).toBe(0);
  });

  it('a pod changing block size starts afresh; pods of several block sizes are each matched at their own', () => {
    const index = new KvBlockIndex(POOL);
    index.applyBatch(batch('p0', 1, [[1, chain]]), T);
    index.applyBatch(batch('p8', 1, [[1, kvBlockKeys(prompt, 8)]], 'a', 8), T);
    expect(matches(index, prompt)).toEqual({ p0: 20, p8: 16 });
    index.applyBatch(batch('p0', 2, [[1, kvBlockKeys(prompt, 8).slice(0, 1)]], 'a', 8), T);
    expect(matches(index, prompt)).toEqual({ p0: 8, p8: 16 });
  });

  it('matches a model of what each pod holds, whatever the sequence of stores, removals and clears (property)', () => {
    const prompts = [tokens(32), [...tokens(16), ...tokens(16, 100)], tokens(32, 1000)];
    const chains = prompts.map(keysOf);
    const op = fc.record({
      pod: fc.integer({ min: 0, max: 2 }),
      kind: fc.constantFrom(1, 2, 3),
      chain: fc.integer({ min: 0, max: 2 }),
      from: fc.integer({ min: 0, max: 7 }),
      to: fc.integer({ min: 0, max: 8 }),
    });
    fc.assert(
      fc.property(fc.array(op, { maxLength: 60 }), (ops) => {
        const index = new KvBlockIndex(POOL);
        const model = [new Set<number>(), new Set<number>(), new Set<number>()];
        const seqs = [0, 0, 0];
        for (const o of ops) {
          const keys = (chains[o.chain] as number[]).slice(Math.min(o.from, o.to), Math.max(o.from, o.to));
          const set = model[o.pod] as Set<number>;
          if (o.kind === 1) for (const k of keys) set.add(k);
          else if (o.kind === 2) for (const k of keys) set.delete(k);
          else set.clear();
          const event: KvBatch['events'][number] = o.kind === 3 ? [3] : [o.kind as 1 | 2, keys];
          index.applyBatch(batch(`p${o.pod}`, ++(seqs[o.pod] as number), [event]), T);
        }
        for (const [c, prompt] of prompts.entries()) {
          const expected: Record<string, number> = {};
          model.forEach((set, pod) => {
            let n = 0;
            while (n < 8 && set.has((chains[c] as number[])[n] as number)) n++;
            if (n > 0) expected[`p${pod}`] = n * BS;
          });
          expect(matches(index, prompt)).toEqual(expected);
        }
        expect(index.stats.blocks).toBe(model.reduce((sum, s) => sum + s.size, 0));
      }),
      { numRuns: 300 },
    );
  });

  it('credits stored keys only when their description says GPU memory and no extra keys; rank, group and LoRA change nothing', () => {
    const index = new KvBlockIndex(POOL);
    const cpu = keysOf(tokens(8, 300));
    const image = keysOf(tokens(8, 600));
    const lora = kvBlockKeys(prompt, BS, { seed: 77 });
    index.applyBatch(
      {
        ...batch('p0', 1, [[3], [1, chain], [1, cpu], [2, [12345]], [1, image], [1, lora]]),
        rank: 3,
        stored: [
          { events: 1, medium: 'GPU', group: 0, kind: 'full_attention' },
          { events: 1, medium: 'CPU', group: 0, kind: 'full_attention' },
          { events: 1, medium: 'GPU', extraKeys: true },
          { events: 1, medium: 'GPU', group: 0, kind: 'full_attention', lora: 'sql-lora' },
        ],
        skipped: [{ reason: 'other-medium', medium: 'CPU', stored: 40 }],
      },
      T,
    );
    expect(matches(index, prompt)).toEqual({ p0: 20 });
    expect(matches(index, prompt, 77)).toEqual({ p0: 20 });
    expect(matches(index, tokens(8, 300))).toEqual({});
    expect(matches(index, tokens(8, 600))).toEqual({});
    expect(index.stats).toMatchObject({ blocks: chain.length + lora.length, uncredited: cpu.length + image.length });
  });

  it('keeps the runs in step with the stored events through a blind stretch and a clear in the middle of a batch', () => {
    const index = new KvBlockIndex(POOL);
    const other = keysOf(tokens(8, 300));
    index.applyBatch(batch('p0', 1, [[1, chain]]), T);
    // A gap: the pod is blind until the clear; the stored event before it still takes its (CPU) run.
    const gap = index.applyBatch(
      {
        ...batch('p0', 5, [[1, other], [3], [1, other], [1, chain]]),
        stored: [{ events: 1, medium: 'GPU' }, { events: 1, medium: 'CPU' }, { events: 1 }],
      },
      T,
    );
    expect(gap).toBe('gap');
    expect(matches(index, tokens(8, 300))).toEqual({});
    expect(matches(index, prompt)).toEqual({ p0: 20 });
    // Stored events past the runs have no description: credited.
    index.applyBatch(
      {
        ...batch('p0', 6, [
          [1, other],
          [1, other],
        ]),
        stored: [{ events: 1, medium: 'CPU' }],
      },
      T,
    );
    expect(matches(index, tokens(8, 300))).toEqual({ p0: 8 });
  });

  it('a batch whose description says every stored block is creditable changes the index exactly as the bare batch (property)', () => {
    const prompts = [tokens(32), [...tokens(16), ...tokens(16, 100)], tokens(32, 1000)];
    const chains = prompts.map(keysOf);
    const said = fc.record(
      {
        medium: fc.constantFrom('GPU', 'CPU', 'DISK', 'cache_level:1'),
        group: fc.nat(3),
        kind: fc.constantFrom('full_attention', 'sliding_window'),
        lora: fc.constantFrom('a', 'b'),
        extraKeys: fc.boolean(),
      },
      { requiredKeys: [] },
    );
    const event = fc.record({
      kind: fc.constantFrom(1, 1, 2, 3),
      chain: fc.integer({ min: 0, max: 2 }),
      from: fc.integer({ min: 0, max: 7 }),
      to: fc.integer({ min: 0, max: 8 }),
      said,
    });
    const step = fc.record({ pod: fc.integer({ min: 0, max: 2 }), events: fc.array(event, { minLength: 1, maxLength: 6 }) });
    fc.assert(
      fc.property(fc.array(step, { maxLength: 30 }), (steps) => {
        const described = new KvBlockIndex(POOL);
        const bare = new KvBlockIndex(POOL);
        const seqs = [0, 0, 0];
        for (const s of steps) {
          const events: KvBatch['events'] = [];
          const credited: KvBatch['events'] = [];
          const stored: NonNullable<KvBatch['stored']> = [];
          for (const e of s.events) {
            const keys = (chains[e.chain] as number[]).slice(Math.min(e.from, e.to), Math.max(e.from, e.to));
            const ev: KvBatch['events'][number] = e.kind === 3 ? [3] : [e.kind as 1 | 2, keys];
            events.push(ev);
            if (e.kind === 1) {
              stored.push({ events: 1, ...e.said });
              const gpu = (e.said.medium === undefined || e.said.medium === 'GPU') && e.said.extraKeys !== true;
              if (gpu) credited.push(ev);
            } else credited.push(ev);
          }
          const seq = ++(seqs[s.pod] as number);
          described.applyBatch({ ...batch(`p${s.pod}`, seq, events), rank: s.pod, stored }, T);
          bare.applyBatch(batch(`p${s.pod}`, seq, credited), T);
        }
        for (const prompt of prompts) expect(matches(described, prompt)).toEqual(matches(bare, prompt));
        expect(described.stats.blocks).toBe(bare.stats.blocks);
      }),
      { numRuns: 300 },
    );
  });
});

describe('KvBlockIndex: pods whose KV data is partial', () => {
  const chain = keysOf(tokens(20));
  const partial = (since = T - 5_000) => ({ since, complete: false });
  const complete = { since: T - 5_000, complete: true };
  const podOf = (index: KvBlockIndex, pod = 'p0') => index.podOf('a', pod);

  it("follows the relay's word: partial while it says its view is not complete, complete again when it says so, and complete when it says nothing", () => {
    const index = new KvBlockIndex(POOL);
    // A restarted collector without a replay: its first batch clears the pod and says its view is partial.
    index.applyBatch({ ...batch('p0', 10, [[3], [1, chain.slice(0, 2)]]), known: partial() }, T);
    expect(podOf(index)).toMatchObject({ partial: true, relayPartial: true, holed: false, knownSince: T - 5_000 });
    expect(matches(index, tokens(20))).toEqual({ p0: 8 });
    expect(index.stats).toMatchObject({ pods: 1, partialPods: 1 });
    // The server's cache turned over (or it reset): the relay vouches for every block again.
    index.applyBatch({ ...batch('p0', 11, [[1, chain.slice(2, 3)]]), known: complete }, T);
    expect(podOf(index)?.partial).toBe(false);
    expect(index.stats.partialPods).toBe(0);
    // A relay from before the field says nothing: it vouches for every block, as it always did.
    index.applyBatch({ ...batch('p0', 12, [[2, chain.slice(2, 3)]]), known: partial() }, T);
    index.applyBatch(batch('p0', 13, []), T);
    expect(podOf(index)).toMatchObject({ partial: false, knownSince: -1 });
    // A duplicate batch says nothing new.
    index.applyBatch({ ...batch('p0', 13, []), known: partial() }, T);
    expect(podOf(index)?.partial).toBe(false);
  });

  it('a view that began from an incomplete snapshot has a hole: partial until a clear or a complete snapshot of the same seq', () => {
    const index = new KvBlockIndex(POOL);
    // A restarted EPP replays a snapshot cut to the pod's newest keys.
    index.applySnapshot(snapshot('p0', 20, chain.slice(0, 3), 'a', { known: { since: T - 60_000, complete: false } }), T);
    expect(podOf(index)).toMatchObject({ partial: true, holed: true });
    // The relay's own view is complete, but what the snapshot left out is still unknown here.
    index.applyBatch({ ...batch('p0', 21, [[1, chain.slice(3)]]), known: complete }, T);
    expect(podOf(index)).toMatchObject({ partial: true, relayPartial: false, holed: true });
    // A snapshot of an older seq is dropped, whatever it says.
    expect(index.applySnapshot(snapshot('p0', 20, chain, 'a', { known: complete }), T)).toBe('dropped');
    // An incomplete one of the same seq is dropped too (it would change nothing).
    expect(index.applySnapshot(snapshot('p0', 21, chain, 'a', { known: partial() }), T)).toBe('dropped');
    // A complete one of the same seq is exactly the relay's set: it heals the hole.
    expect(index.applySnapshot(snapshot('p0', 21, chain, 'a', { known: complete }), T)).toBe('applied');
    expect(podOf(index)?.partial).toBe(false);
    expect(matches(index, tokens(20))).toEqual({ p0: 20 });
    // An EPP whose view has no hole drops snapshots of the same seq as before.
    expect(index.applySnapshot(snapshot('p0', 21, chain, 'a', { known: complete }), T)).toBe('dropped');

    // A snapshot of a partial relay, then the server resets its cache: the clear starts the view from empty.
    index.applySnapshot(snapshot('p1', 5, chain, 'a', { known: partial() }), T);
    expect(podOf(index, 'p1')?.holed).toBe(true);
    index.applyBatch({ ...batch('p1', 6, [[3]]), known: complete }, T);
    expect(podOf(index, 'p1')?.partial).toBe(false);
  });

  it('a pod that loses blocks to the index bounds has a hole (it still holds them)', () => {
    const index = new KvBlockIndex(POOL, { maxBlocksPerPod: 3 });
    index.applyBatch({ ...batch('p0', 1, [[1, chain]]), known: complete }, T);
    expect(index.stats.evicted).toBe(2);
    expect(podOf(index)).toMatchObject({ partial: true, relayPartial: false, holed: true });
    index.applyBatch({ ...batch('p0', 2, [[3], [1, chain.slice(0, 2)]]), known: complete }, T);
    expect(podOf(index)?.partial).toBe(false);
  });
});
