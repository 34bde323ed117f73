import type { Endpoint } from '@spillway/fleet';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { hashPromptBlocks, prefixSeed, seededRng } from '../src/index.js';
import { PrefixIndex } from '../src/prefix-index.js';
import { TopK } from '../src/top-k.js';

describe('TopK', () => {
  it('keeps the k largest keys in descending order (against a full sort)', () => {
    fc.assert(
      fc.property(fc.array(fc.integer({ min: 0, max: 5 }), { maxLength: 40 }), fc.integer({ min: 1, max: 6 }), (keys, k) => {
        const top = new TopK(2);
        top.reset(k);
        const rng = seededRng(1);
        keys.forEach((key, i) => top.offer(i, key, rng));
        const got = Array.from(top.key.subarray(0, top.size));
        expect(got).toEqual([...keys].sort((a, b) => b - a).slice(0, k));
        const indexes = Array.from(top.index.subarray(0, top.size));
        expect(new Set(indexes).size).toBe(indexes.length);
        indexes.forEach((index, i) => expect(keys[index]).toBe(got[i]));
      }),
    );
  });

  it('breaks ties between equal keys at random, each candidate about equally often', () => {
    const rng = seededRng(5);
    const wins = [0, 0, 0, 0, 0];
    const top = new TopK();
    for (let round = 0; round < 5000; round++) {
      top.reset(1);
      for (let i = 0; i < 5; i++) top.offer(i, 1, rng);
      wins[top.index[0] as number]!++;
    }
    // Seeded, so deterministic; a broken tie-break (first or last always wins) is far outside this band.
    for (const w of wins) expect(w).toBeGreaterThan(800);
  });

  it('a limit of 0 keeps nothing', () => {
    const top = new TopK();
    top.reset(0);
    top.offer(0, 1, seededRng(1));
    expect(top.size).toBe(0);
  });
});

describe('prompt block hashes', () => {
  const seed = prefixSeed('llama');
  const hashes = (text: string, s = seed, max = 256): number[] => {
    const out = new Float64Array(max);
    return Array.from(out.subarray(0, hashPromptBlocks(text, s, 64, max, out)));
  };

  it('are chained: a shared prefix shares leading hashes, then they diverge for good', () => {
    const common = 'a'.repeat(128);
    const x = hashes(common + 'x'.repeat(64) + 'same'.repeat(16));
    const y = hashes(common + 'y'.repeat(64) + 'same'.repeat(16));
    expect(x.slice(0, 2)).toEqual(y.slice(0, 2));
    expect(x[2]).not.toBe(y[2]);
    expect(x[3]).not.toBe(y[3]);
  });

  it('hash the trailing partial block, none below one block, stop at maxBlocks', () => {
    expect(hashes('z'.repeat(63))).toEqual([]);
    expect(hashes('z'.repeat(64))).toHaveLength(1);
    expect(hashes('z'.repeat(65))).toHaveLength(2);
    expect(hashes('z'.repeat(64 * 10), seed, 4)).toHaveLength(4);
  });

  it('are safe integers, differ by model and salt, and repeat exactly', () => {
    const text = 'The quick brown fox jumps over the lazy dog. '.repeat(4);
    const h = hashes(text);
    for (const v of h) expect(Number.isSafeInteger(v)).toBe(true);
    expect(hashes(text)).toEqual(h);
    expect(hashes(text, prefixSeed('mistral'))[0]).not.toBe(h[0]);
    expect(hashes(text, prefixSeed('llama', 'tenant-1'))[0]).not.toBe(h[0]);
    // Identical blocks at different positions hash differently (the chain).
    const same = hashes('q'.repeat(128));
    expect(same[0]).not.toBe(same[1]);
  });
});

describe('PrefixIndex', () => {
  const ep = (pod: string) => ({ pod }) as unknown as Endpoint;
  const a = ep('a');
  const b = ep('b');

  it('matches leading consecutive blocks per endpoint', () => {
    const index = new PrefixIndex();
    index.insert(a, [1, 2, 3], 3, 100);
    index.insert(b, [1, 9], 2, 100);
    expect(index.prepare(Float64Array.from([1, 2, 3, 4]), 4)).toBe(3);
    expect(index.matchOf(a)).toBe(3);
    expect(index.matchOf(b)).toBe(1);
    expect([...(index.bestHolders() ?? [])]).toEqual([a]);
    expect(index.prepare(Float64Array.from([5, 6, 7]), 3)).toBe(0);
    expect(index.matchOf(a)).toBe(0);
    expect(index.bestHolders()).toBeUndefined();
  });

  it('evicts the least recently used beyond capacity, and drop forgets an endpoint', () => {
    const index = new PrefixIndex();
    index.insert(a, [1, 2, 3], 3, 3); // recency, oldest first: 3 2 1 (a chain's tail is evicted first)
    index.insert(a, [2], 1, 3); // touch 2: 3 1 2
    index.insert(a, [4], 1, 3); // evicts 3
    index.prepare(Float64Array.from([1, 2, 3]), 3);
    expect(index.matchOf(a)).toBe(2);
    index.insert(a, [5], 1, 3); // evicts 1, the head: nothing matches any more
    index.prepare(Float64Array.from([1, 2]), 2);
    expect(index.matchOf(a)).toBe(0);
    index.insert(a, [1], 1, 3);
    expect(index.size).toBe(3);
    index.drop(a);
    index.prepare(Float64Array.from([1]), 1);
    expect(index.matchOf(a)).toBe(0);
    expect(index.size).toBe(0);
  });
});

describe('PrefixIndex against a plain LRU model', () => {
  it('matchOf equals the greedy count of leading blocks each endpoint still holds', () => {
    const endpoints = [0, 1, 2].map((i) => ({ pod: `e${i}` }) as unknown as Endpoint);
    // A prompt is a list of block contents; its chain hash at i names the whole prefix 0..i.
    const promptArb = fc.array(fc.integer({ min: 0, max: 2 }), { minLength: 1, maxLength: 6 });
    fc.assert(
      fc.property(
        fc.array(fc.record({ endpoint: fc.integer({ min: 0, max: 2 }), prompt: promptArb }), { maxLength: 30 }),
        fc.integer({ min: 1, max: 8 }),
        promptArb,
        (inserts, capacity, query) => {
          const ids = new Map<string, number>();
          const chain = (prompt: number[]): number[] =>
            prompt.map((_, i) => {
              const key = prompt.slice(0, i + 1).join('.');
              if (!ids.has(key)) ids.set(key, ids.size + 1);
              return ids.get(key) as number;
            });
          const index = new PrefixIndex();
          const model = endpoints.map(() => [] as number[]); // recency, oldest first
          for (const { endpoint, prompt } of inserts) {
            const hashes = chain(prompt);
            index.insert(endpoints[endpoint] as Endpoint, hashes, hashes.length, capacity);
            const lru = model[endpoint] as number[];
            for (let i = hashes.length - 1; i >= 0; i--) {
              const at = lru.indexOf(hashes[i] as number);
              if (at >= 0) lru.splice(at, 1);
              lru.push(hashes[i] as number);
            }
            while (lru.length > capacity) lru.shift();
          }
          const q = chain(query);
          index.prepare(Float64Array.from(q), q.length);
          endpoints.forEach((endpoint, e) => {
            let greedy = 0;
            while (greedy < q.length && (model[e] as number[]).includes(q[greedy] as number)) greedy++;
            expect(index.matchOf(endpoint)).toBe(greedy);
          });
        },
      ),
      { numRuns: 500 },
    );
  });
});
