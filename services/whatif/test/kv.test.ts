import { tokenize } from '@spillway/engine';
import { KV_CLEARED, KV_REMOVED, KV_STORED, kvBlockKeys } from '@spillway/events';
import { describe, expect, it } from 'vitest';
import { resolveScenario, runStrategy, type ResolvedScenario, type RunResult } from '../src/index.js';
import { KvRelay } from '../src/kv-relay.js';
import { ArrivalStream, constantRate, PrefixGroups, type WorkloadSpec } from '../src/workload.js';
import { parse, smallScenario } from './helpers.js';

/** Whole simulations (several strategies): generous on a busy machine; they run ~10 s of CPU. */
const SIM_TIMEOUT_MS = 300_000;

const resolve = (overrides: Record<string, unknown> = {}): ResolvedScenario => resolveScenario(parse(smallScenario(overrides)));
const run = (s: ResolvedScenario, name: string, seed = 7): RunResult => {
  const found = s.strategies.find((x) => x.name === name);
  if (!found) throw new Error(`no strategy ${name}`);
  return runStrategy(s, found, seed);
};

describe('KV events in the simulation', () => {
  it('the relay turns stores and evictions into ordered content-key events, and snapshots the block set newest last', () => {
    const relay = new KvRelay();
    relay.stored([11, 12, 13], [101, 102, 103], 0, 3);
    relay.stored([14], [104], 0, 1);
    relay.evicted(13);
    relay.evicted(99); // never stored: nothing to say
    relay.stored([13], [103], 0, 1);
    expect(relay.take()).toEqual({
      seq: 1,
      events: [
        [KV_STORED, [101, 102, 103, 104]],
        [KV_REMOVED, [103]],
        [KV_STORED, [103]],
      ],
    });
    expect(relay.take()).toBeUndefined();
    expect(relay.snapshotKeys()).toEqual([101, 102, 104, 103]);
    relay.cleared();
    expect(relay.take()).toEqual({ seq: 2, events: [[KV_CLEARED]] });
    expect(relay.snapshotKeys()).toEqual([]);
  });

  it('each request carries its token ids and content keys, index for index with the engine block hashes', () => {
    const workload: WorkloadSpec = {
      parts: [
        { weight: 1, spec: { kind: 'shared-prefix', groups: 4, prefixTokens: [400, 800], questionTokens: [20, 200], outputTokens: 50 } },
      ],
      sheddableShare: 0,
    };
    const groups = new PrefixGroups(workload.parts[0]?.spec as never, 3);
    const stream = new ArrivalStream({
      workload,
      groups: [groups],
      schedule: constantRate(10),
      gateway: 0,
      gateways: 1,
      seed: 3,
      endMs: 10_000,
    });
    for (let i = 0; i < 20; i++) {
      const r = stream.next();
      if (!r) break;
      expect([...(r.tokenIds ?? [])]).toEqual([...tokenize(r.prompt)]);
      expect(r.contentKeys).toEqual(kvBlockKeys(r.tokenIds ?? [], 16));
      expect(r.contentKeys?.length).toBe(r.blockHashes?.length);
    }
  });

  const prefixHeavy = { kind: 'shared-prefix', groups: 24, prefixTokens: [2000, 6000], questionTokens: [100, 600], outputTokens: 100 };
  // Caches that hold about half of the groups' prefixes each: where a group lands matters.
  const smallCaches = { preset: 'llama-8b-h100', maxNumSeqs: 64, numBlocks: 4000 };

  it(
    'EPPs that do not share state: the precise index (fed by every server) keeps the affinity the approximate one loses',
    () => {
      const s = resolve({
        epps: { perZone: 2, sharing: false },
        engine: smallCaches,
        durationS: 12,
        load: { clusterFraction: 0.8 },
        workload: prefixHeavy,
        strategies: ['spillway', 'spillway-precise', 'oracle'],
      });
      const approx = run(s, 'spillway');
      const precise = run(s, 'spillway-precise');
      const oracle = run(s, 'oracle');
      expect(precise.prefixHitShare).toBeGreaterThan(approx.prefixHitShare + 0.02);
      expect(precise.prefixHitShare).toBeGreaterThanOrEqual(0.9 * oracle.prefixHitShare);
      for (const r of [approx, precise, oracle]) expect(r.served + r.rejected429 + r.rejected503 + r.aborted).toBe(r.arrivals);
    },
    SIM_TIMEOUT_MS,
  );

  it(
    'lost KV batches blind the EPPs to a pod until its next snapshot: still every request served, hits between none and lossless',
    () => {
      const base = {
        epps: { perZone: 2, sharing: false },
        engine: smallCaches,
        durationS: 12,
        load: { clusterFraction: 0.8 },
        workload: prefixHeavy,
        strategies: ['spillway-precise'],
      };
      const lossless = run(resolve(base), 'spillway-precise');
      const lossy = run(resolve({ ...base, signals: { kvLossRate: 0.5, kvSnapshotEveryS: 2 } }), 'spillway-precise');
      expect(lossy.served + lossy.rejected429 + lossy.rejected503 + lossy.aborted).toBe(lossy.arrivals);
      expect(lossy.prefixHitShare).toBeLessThanOrEqual(lossless.prefixHitShare + 0.02);
      expect(lossy.prefixHitShare).toBeGreaterThan(0.3);
    },
    SIM_TIMEOUT_MS,
  );
});
