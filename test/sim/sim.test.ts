import { textBlockHashes } from '@spillway/engine';
import { describe, expect, it } from 'vitest';
import { EventQueue } from './queue.js';
import { STRATEGIES, type StrategySpec } from './routers.js';
import { REPLICA } from './scenarios.js';
import { runSimulation, type SimOptions } from './sim.js';
import type { ZoneSpec } from './topology.js';
import { ArrivalStream, PrefixGroups, SHAREGPT, SHARED_PREFIX } from './workload.js';

const SMALL: readonly ZoneSpec[] = [
  { zone: 'zone-a', region: 'r1', replicas: 2 },
  { zone: 'zone-b', region: 'r1', replicas: 2 },
  { zone: 'zone-c', region: 'r2', replicas: 2 },
];
/** Roughly one replica's capacity on the ShareGPT-like workload with REPLICA (about 12 req/s). */
const PER_REPLICA = 12;

const spec = (kind: StrategySpec['kind']): StrategySpec => STRATEGIES.find((s) => s.kind === kind) as StrategySpec;

function options(strategy: StrategySpec, rates: number[], extra: Partial<SimOptions> = {}): SimOptions {
  return {
    seed: 7,
    zones: SMALL,
    strategy,
    workload: SHAREGPT,
    rates,
    durationMs: 15_000,
    warmupMs: 3_000,
    preset: REPLICA.preset,
    maxNumSeqs: REPLICA.maxNumSeqs,
    numBlocks: REPLICA.numBlocks,
    ...extra,
  };
}

const balanced = (load: number) => SMALL.map((z) => load * PER_REPLICA * z.replicas);

describe('event queue', () => {
  it('pops in time order, equal times in insertion order', () => {
    const q = new EventQueue<'x'>();
    const times = [5, 1, 3, 3, 0, 9, 1, 3];
    times.forEach((t, i) => q.push(t, 'x', i));
    const out: [number, number][] = [];
    for (let e = q.pop(); e; e = q.pop()) out.push([e.at, e.target]);
    expect(out).toEqual([[0, 4], [1, 1], [1, 6], [3, 2], [3, 3], [3, 7], [5, 0], [9, 5]]);
  });
});

describe('workloads', () => {
  it('shared-prefix block hashes equal the engine hashes of the whole prompt, and groups share a prefix', () => {
    const groups = new PrefixGroups(SHARED_PREFIX as Extract<typeof SHARED_PREFIX, { kind: 'shared-prefix' }>, 3);
    const stream = new ArrivalStream(SHARED_PREFIX, groups, 10, 0, 1, 3, 60_000);
    const seen = new Map<number, number[]>();
    for (let i = 0; i < 40; i++) {
      const r = stream.next();
      if (!r) break;
      expect(r.blockHashes).toEqual(textBlockHashes(r.prompt));
      const other = seen.get(r.group);
      if (other) {
        const shared = Math.floor(groups.prompt(r.group).length / 64);
        expect(r.blockHashes?.slice(0, shared)).toEqual(other.slice(0, shared));
        expect(r.blockHashes?.[shared]).not.toEqual(other[shared]);
      }
      seen.set(r.group, r.blockHashes ?? []);
    }
  });

  it('arrivals depend on the seed only', () => {
    const a = new ArrivalStream(SHAREGPT, undefined, 20, 1, 3, 5, 10_000);
    const b = new ArrivalStream(SHAREGPT, undefined, 20, 1, 3, 5, 10_000);
    for (let i = 0; i < 50; i++) expect(a.next()).toEqual(b.next());
  });
});

describe('routing simulation', () => {
  it('is deterministic for a seed and changes with the seed', () => {
    const o = options(spec('spillway'), balanced(0.8));
    const a = runSimulation(o);
    const b = runSimulation(o);
    expect(b).toEqual(a);
    const c = runSimulation({ ...o, seed: 8 });
    expect(c.digest).not.toBe(a.digest);
    expect(c.ttftP90).not.toBe(a.ttftP90);
  });

  it('loses no request: every arrival ends served, 429, 503 or aborted, for every strategy', () => {
    for (const strategy of STRATEGIES) {
      const r = runSimulation(
        options(strategy, balanced(0.9), {
          durationMs: 8_000,
          warmupMs: 1_000,
          failures: [{ zone: 0, count: 1, atMs: 3_000, returnAtMs: 6_000 }],
        }),
      );
      expect(r.arrivals).toBeGreaterThan(300);
      expect(r.served + r.shed429 + r.unavailable503 + r.aborted).toBe(r.arrivals);
      expect(r.measuredServed).toBeGreaterThan(0);
    }
  });

  it('balanced load: Spillway stays in its zone and zone-local only matches it', () => {
    const spill = runSimulation(options(spec('spillway'), balanced(0.6)));
    const local = runSimulation(options(spec('zone-local'), balanced(0.6)));
    const random = runSimulation(options(spec('random'), balanced(0.6)));
    expect(spill.crossZoneShare).toBeLessThan(0.01);
    expect(local.crossZoneShare).toBe(0);
    expect(random.crossZoneShare).toBeGreaterThan(0.5);
    expect(spill.ttftP90).toBeLessThan(local.ttftP90 * 1.2);
    expect(local.ttftP90).toBeLessThan(spill.ttftP90 * 1.2);
    expect(spill.unavailable503 + local.unavailable503).toBe(0);
  });

  it('one zone at 150 %: Spillway spills across zones and beats zone-local only', () => {
    const rates = [1.5 * PER_REPLICA * 2, 0.4 * PER_REPLICA * 2, 0.4 * PER_REPLICA * 2];
    const spill = runSimulation(options(spec('spillway'), rates));
    const local = runSimulation(options(spec('zone-local'), rates));
    expect(spill.crossZoneShare).toBeGreaterThan(0.1);
    expect(spill.ttftP90).toBeLessThan(local.ttftP90 / 3);
    expect(spill.unavailable503).toBe(0);
    expect(local.crossZoneShare).toBe(0);
  });

  it('dead replicas: the gateway falls back along the list, requests still succeed', () => {
    // Half of zone-a dies early and is never detected within the run: only the list and the EPP's
    // passive-health penalty (reportServed) keep requests off the dead replicas.
    const o = options(spec('spillway'), balanced(0.5), { failures: [{ zone: 0, count: 1, atMs: 4_000 }], detectMs: 60_000 });
    const r = runSimulation(o);
    expect(r.fallbackShare).toBeGreaterThan(0);
    expect(r.unavailable503).toBe(0);
    expect(r.served + r.aborted).toBe(r.arrivals);
    // The zone-unaware random baseline also survives through its list, with more fallbacks.
    const random = runSimulation({ ...o, strategy: spec('random') });
    expect(random.unavailable503).toBe(0);
    expect(random.fallbackShare).toBeGreaterThan(r.fallbackShare);
  });
});
