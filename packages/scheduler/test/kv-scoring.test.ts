import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { kvBlockKeys, kvKeySeed, type KvBatch, type KvKnown } from '@spillway/events';
import type { Endpoint } from '@spillway/fleet';
import { KvBlockIndex, Scheduler, type EntryCost, type PickRequest } from '../src/index.js';
import { PrefixLookup } from '../src/kv-lookup.js';
import { PrefixIndex } from '../src/prefix-index.js';
import { applyPod, buildFleet, POOL, T0, threeZones, type PodSpec } from './fleet-fixture.js';

const BS = 16;
const prompt = (n: number, from = 1): number[] => Array.from({ length: n }, (_, i) => from + i);
const seqs = new Map<string, number>();
/** The pod's next batch (its own relay sequence), storing the blocks of `tokens`. */
function stored(zone: string, pod: string, tokens: number[], seed = 0): KvBatch {
  const seq = (seqs.get(`${zone}/${pod}`) ?? 0) + 1;
  seqs.set(`${zone}/${pod}`, seq);
  return { v: 1, pool: POOL, zone, pod, seq, observedAt: T0, blockSize: BS, events: [[1, kvBlockKeys(tokens, BS, { seed })]] };
}

function scheduler(pods: PodSpec[]): Scheduler {
  return new Scheduler({ fleet: buildFleet(pods), pool: POOL, zone: 'a', region: 'r1', seed: 7 });
}
const costOf = (entry: { cost: unknown } | undefined): EntryCost => entry?.cost as EntryCost;
const pick = (s: Scheduler, request: Partial<PickRequest>) => s.pick({ model: 'llama', ...request }, T0);

describe('precise prefix scoring (cost policy)', () => {
  const tokens = prompt(4000);

  it('picks the pod the servers report holding the prefix, through any path; after eviction, it does not', () => {
    seqs.clear();
    const s = scheduler(threeZones());
    expect(pick(s, { promptTokenIds: tokens }).entries[0]?.endpoint.pod).toBe('a0');
    // a1 (one waiting) served the prompt through a path this EPP never saw: its server reported the blocks.
    s.applyKvBatch(stored('a', 'a1', tokens), T0);
    s.applyKvBatch({ ...stored('a', 'a0', []), events: [] }, T0);
    const d = pick(s, { promptTokenIds: tokens });
    expect(d.entries[0]?.endpoint.pod).toBe('a1');
    expect(d.prefixSource).toBe('precise');
    expect(d.kvMatchedTokens).toBe(4000);
    expect(costOf(d.entries[0])).toMatchObject({ cacheIndex: 'precise', cachedTokens: 4000 });
    // a0 has KV data (holding nothing): precise says 0 cached there.
    const a0 = d.entries.find((e) => e.endpoint.pod === 'a0');
    expect(costOf(a0)).toMatchObject({ cacheIndex: 'precise', cachedTokens: 0 });
    // The server evicts the blocks: the next pick goes back to the idle pod.
    s.applyKvBatch({ ...stored('a', 'a1', []), events: [[2, kvBlockKeys(tokens, BS)]] }, T0);
    expect(pick(s, { promptTokenIds: tokens }).entries[0]?.endpoint.pod).toBe('a0');
    expect(s.kvIndexStats).toMatchObject({ pods: 2, blocks: 0, lookups: 2, hits: 1, gaps: 0, droppedBatches: 0 });
  });

  it('credits a partly cached prompt with its matched blocks only', () => {
    seqs.clear();
    const s = scheduler(threeZones());
    s.applyKvBatch(stored('a', 'a1', tokens.slice(0, 1000)), T0);
    // Keys cover full blocks: 1000 tokens are 62 blocks of 16 = 992 tokens; a prompt shorter than the match is capped.
    const d = pick(s, { promptTokenIds: tokens, subset: ['10.0.0.2:8000'] });
    expect(costOf(d.entries[0])).toMatchObject({ cacheIndex: 'precise', cachedTokens: 992 });
    const short = pick(s, { promptTokenIds: tokens, promptTokens: 500, subset: ['10.0.0.2:8000'] });
    expect(costOf(short.entries[0]).cachedTokens).toBe(500);
  });

  it('a spilled request reaches the remote pod holding its prefix even when the shortlist left it off', () => {
    seqs.clear();
    // Zone a is saturated; zone b has 40 idle pods (the shortlist keeps 16 of them); c0 holds the prefix.
    const pods: PodSpec[] = [
      ...['a0', 'a1'].map((pod, i) => ({ pod, zone: 'a', address: `10.0.0.${i + 1}:8000`, waiting: 5 })),
      ...Array.from({ length: 40 }, (_, i) => ({ pod: `b${i}`, zone: 'b', address: `10.0.1.${i + 1}:8000`, waiting: 0 })),
      { pod: 'c0', zone: 'c', address: '10.0.2.1:8000', waiting: 1 },
    ];
    const s = scheduler(pods);
    const long = prompt(8000);
    const before = pick(s, { promptTokenIds: long });
    expect(before.rule).toBe('spill');
    expect(before.entries[0]?.zone).toBe('b');
    s.applyKvBatch(stored('c', 'c0', long), T0);
    const d = pick(s, { promptTokenIds: long });
    expect(d.rule).toBe('spill');
    expect(d.entries[0]?.endpoint.pod).toBe('c0');
    expect(costOf(d.entries[0])).toMatchObject({ cacheIndex: 'precise', cachedTokens: 8000 });
  });

  it('falls back to the approximate index without token ids, and for pods without KV data', () => {
    seqs.clear();
    const s = scheduler(threeZones());
    const text = 'x'.repeat(16_000);
    // The approximate index learns that a1 got this prompt (a commit of a decision with a1 primary).
    const first = s.pick({ model: 'llama', prompt: text, subset: ['10.0.0.2:8000'] }, T0);
    expect(first.entries[0]?.endpoint.pod).toBe('a1');
    s.commit(first, T0);
    s.release(first, T0);
    // No KV data at all: approximate, with or without token ids.
    for (const request of [{ prompt: text }, { prompt: text, promptTokenIds: tokens }]) {
      const d = pick(s, request);
      expect(d.entries[0]?.endpoint.pod).toBe('a1');
      expect(d.prefixSource).toBe('approximate');
      expect(costOf(d.entries[0]).cacheIndex).toBe('approximate');
    }
    // KV data for a1 saying it holds nothing: with token ids the precise index wins for a1.
    s.applyKvBatch({ ...stored('a', 'a1', []), events: [] }, T0);
    const precise = pick(s, { prompt: text, promptTokenIds: tokens });
    expect(precise.entries[0]?.endpoint.pod).toBe('a0');
    const a1 = precise.entries.find((e) => e.endpoint.pod === 'a1');
    if (a1) expect(costOf(a1)).toMatchObject({ cacheIndex: 'precise', cachedTokens: 0 });
    // Without token ids, the same pod is priced by the approximate index again.
    const approx = pick(s, { prompt: text });
    expect(approx.entries[0]?.endpoint.pod).toBe('a1');
    expect(costOf(approx.entries[0]).cacheIndex).toBe('approximate');
  });

  it("keys an adapter's blocks with its seed once the model is seen held as an adapter", () => {
    seqs.clear();
    const lora = { running: ['sql-lora'], waiting: [], max: 4 };
    const s = scheduler(threeZones({ a0: { lora }, a1: { lora } }));
    s.applyKvBatch(stored('a', 'a1', tokens, kvKeySeed('sql-lora')), T0);
    s.applyKvBatch(stored('a', 'a0', []), T0);
    for (let i = 0; i < 2; i++) {
      const d = s.pick({ model: 'sql-lora', promptTokenIds: tokens }, T0);
      expect(d.entries[0]?.endpoint.pod).toBe('a1');
      expect(d.kvMatchedTokens).toBe(4000);
    }
    // The base model's prompt with the same tokens does not match the adapter's blocks.
    const base = s.pick({ model: 'llama', promptTokenIds: tokens }, T0);
    expect(base.entries[0]?.endpoint.pod).toBe('a0');
  });

  it("applies snapshots, refuses future-dated ones, and prune forgets deleted pods' blocks", () => {
    const fleet = buildFleet(threeZones());
    const s = new Scheduler({ fleet, pool: POOL, zone: 'a', region: 'r1' });
    const keys = kvBlockKeys(tokens, BS);
    s.applyKvSnapshot({ v: 1, kind: 'kv', pool: POOL, zone: 'a', pod: 'a1', observedAt: T0 + 60_000, blockSize: BS, seq: 5, keys }, T0);
    expect(s.kvIndexStats).toMatchObject({ pods: 0, droppedBatches: 1 });
    s.applyKvSnapshot({ v: 1, kind: 'kv', pool: POOL, zone: 'a', pod: 'a1', observedAt: T0, blockSize: BS, seq: 5, keys }, T0);
    s.applyKvSnapshot({ v: 1, kind: 'kv', pool: POOL, zone: 'x', pod: 'ghost', observedAt: T0, blockSize: BS, seq: 1, keys }, T0);
    expect(s.kvIndexStats).toMatchObject({ pods: 2, blocks: 2 * keys.length });
    expect(s.kvIndexStats.bytes).toBeGreaterThan(0);
    expect(pick(s, { promptTokenIds: tokens }).entries[0]?.endpoint.pod).toBe('a1');
    applyPod(fleet, { pod: 'a1', zone: 'a', address: '10.0.0.2:8000', ready: false, deleted: true, readinessAge: 0 }, T0 + 1);
    s.prune(T0 + 2);
    // The pod the fleet never knew is kept a minute after its last message.
    expect(s.kvIndexStats).toMatchObject({ pods: 1, blocks: keys.length });
    s.prune(T0 + 61_000);
    expect(s.kvIndexStats).toMatchObject({ pods: 0, blocks: 0, bytes: 0 });
  });
});

describe('pods whose KV data is partial (a collector that started after the servers, without a full replay)', () => {
  const tokens = prompt(4000);
  const partial: KvKnown = { since: T0 - 1_000, complete: false };
  const complete: KvKnown = { since: T0 - 1_000, complete: true };

  it('are priced by the larger of both indexes, never below the approximate index; precise alone once the relay vouches for every block', () => {
    seqs.clear();
    const text = 'x'.repeat(16_000);
    const teach = (s: Scheduler) => {
      // The approximate index learns that a1 got this prompt before the collector restarted.
      const first = s.pick({ model: 'llama', prompt: text, subset: ['10.0.0.2:8000'] }, T0);
      s.commit(first, T0);
      s.release(first, T0);
    };
    const approxOnly = scheduler(threeZones());
    teach(approxOnly);
    const s = scheduler(threeZones());
    teach(s);
    // The new collector's first batch per pod clears it at every EPP, and says its view is partial.
    for (const pod of ['a0', 'a1']) s.applyKvBatch({ ...stored('a', pod, []), events: [[3]], known: partial }, T0);
    const request = { prompt: text, promptTokenIds: tokens };
    const d = pick(s, request);
    const baseline = pick(approxOnly, request);
    expect(baseline.entries[0]?.endpoint.pod).toBe('a1');
    expect(d.entries[0]?.endpoint.pod).toBe('a1');
    expect(d.prefixSource).toBe('precise+approximate');
    expect(d.kvMatchedTokens).toBe(0);
    expect(costOf(d.entries[0])).toMatchObject({
      cacheIndex: 'precise+approximate',
      cachedTokens: costOf(baseline.entries[0]).cachedTokens,
    });
    expect(costOf(d.entries[0]).cachedTokens).toBeGreaterThan(0);
    expect(s.kvIndexStats).toMatchObject({ pods: 2, partialPods: 2 });
    // What the relay has heard since counts too: a0 stored the whole prompt, deeper than the approximate index says of a1.
    s.applyKvBatch({ ...stored('a', 'a0', tokens), known: partial }, T0);
    const deeper = pick(s, request);
    expect(deeper.entries[0]?.endpoint.pod).toBe('a0');
    expect(costOf(deeper.entries[0])).toMatchObject({ cacheIndex: 'precise+approximate', cachedTokens: 4000 });
    expect(deeper.kvMatchedTokens).toBe(4000);
    // The relay vouches for every block of a1 again (its cache turned over): a1 holds none of the prompt.
    s.applyKvBatch({ ...stored('a', 'a1', []), events: [], known: complete }, T0);
    s.applyKvBatch({ ...stored('a', 'a0', []), events: [[2, kvBlockKeys(tokens, BS)]], known: complete }, T0);
    const trusted = pick(s, request);
    expect(trusted.prefixSource).toBe('precise');
    for (const e of trusted.entries) if (e.zone === 'a') expect(costOf(e)).toMatchObject({ cacheIndex: 'precise', cachedTokens: 0 });
    expect(s.kvIndexStats.partialPods).toBe(0);
  });

  it('each endpoint: complete data priced precisely; partial data at the larger of the precise match and what the approximate index alone says (property)', () => {
    const fleet = buildFleet(threeZones());
    const endpoints = ['a0', 'a1', 'b0'].map((pod) => fleet.get(POOL, pod[0] as string, pod) as Endpoint);
    const hashes = Float64Array.from([11, 12, 13, 14, 15]);
    const BLOCK_TOKENS = 800; // 5 approximate blocks of the 4,000-token prompt
    const podState = fc.record({
      approx: fc.integer({ min: 0, max: 5 }),
      kv: fc.constantFrom('none', 'complete', 'partial'),
      precise: fc.integer({ min: 0, max: 250 }),
    });
    fc.assert(
      fc.property(fc.array(podState, { minLength: 3, maxLength: 3 }), (states) => {
        const approx = new PrefixIndex();
        const kv = new KvBlockIndex(POOL);
        states.forEach((st, i) => {
          const endpoint = endpoints[i] as Endpoint;
          if (st.approx > 0) approx.insert(endpoint, hashes, st.approx, 1000);
          if (st.kv === 'none') return;
          const keys = kvBlockKeys(tokens, BS).slice(0, st.precise);
          const known = st.kv === 'partial' ? partial : complete;
          kv.applyBatch(
            {
              v: 1,
              pool: POOL,
              zone: endpoint.zone as string,
              pod: endpoint.pod,
              seq: 1,
              observedAt: T0,
              blockSize: BS,
              events: [[3], [1, keys]],
              known,
            },
            T0,
          );
        });
        const depth = approx.prepare(hashes, hashes.length);
        const lookup = new PrefixLookup(kv, approx, fleet, POOL);
        const best = lookup.begin(tokens, 'llama', tokens.length, depth, BLOCK_TOKENS);
        // The approximate index alone, as for a request without token ids.
        const alone = new PrefixLookup(new KvBlockIndex(POOL), approx, fleet, POOL);
        alone.begin(tokens, 'llama', tokens.length, depth, BLOCK_TOKENS);
        let deepest = 0;
        let preciseBest = 0;
        let approxBest = 0;
        const maxApprox = Math.max(...states.map((st) => st.approx));
        states.forEach((st, i) => {
          const endpoint = endpoints[i] as Endpoint;
          const cached = lookup.cachedTokens(endpoint);
          const precise = st.kv === 'none' ? 0 : st.precise * BS;
          const guess = alone.cachedTokens(endpoint);
          expect(guess).toBe(st.approx * BLOCK_TOKENS);
          if (st.kv === 'complete' && kv.hasData) expect(cached).toBe(precise);
          else expect(cached).toBe(Math.max(precise, guess));
          expect(lookup.sourceOf(endpoint)).toBe(
            st.kv === 'none' || !kv.hasData ? 'approximate' : st.kv === 'partial' ? 'precise+approximate' : 'precise',
          );
          deepest = Math.max(deepest, cached);
          if (st.kv !== 'none') preciseBest = Math.max(preciseBest, precise);
          // The approximate index's deepest holders, unless complete KV data corrects them.
          if (st.approx === maxApprox && !(st.kv === 'complete' && kv.hasData)) approxBest = Math.max(approxBest, guess);
        });
        // The request's best cached prefix: no deeper than any endpoint is credited with, at least
        // the deepest precise match and the approximate depth of its deepest holders left uncorrected.
        expect(best).toBeLessThanOrEqual(deepest);
        expect(best).toBeGreaterThanOrEqual(Math.max(preciseBest, approxBest));
      }),
      { numRuns: 300 },
    );
  });
});
