import { engineConfig } from '@spillway/engine';
import { Fleet } from '@spillway/fleet';
import { describe, expect, it } from 'vitest';
import { resolveScenario, runStrategy, type ResolvedScenario, type RunResult } from '../src/index.js';
import { LOAD_AWARE, weightsOf } from '../src/envoy-router.js';
import { Network } from '../src/network.js';
import { ReferenceRouter } from '../src/reference-router.js';
import { LLMD_TOPOLOGY, REFERENCE_PROFILE } from '../src/router-factory.js';
import type { RouterContext } from '../src/routers.js';
import { layout } from '../src/topology.js';
import type { SimRequest } from '../src/workload.js';
import { parse, smallScenario } from './helpers.js';

/** Whole simulations: generous on a busy machine. */
const SIM_TIMEOUT_MS = 180_000;

/** Four replicas in zone-a, two in zone-b (same region) and two in zone-c (another region); a picker in zone-a. */
function context(scope?: readonly number[]): RouterContext {
  const zones = [
    { zone: 'zone-a', region: 'r1', replicas: 4 },
    { zone: 'zone-b', region: 'r1', replicas: 2 },
    { zone: 'zone-c', region: 'r2', replicas: 2 },
  ];
  const replicas = layout(zones);
  const rtt = [
    [0, 1, 30],
    [1, 0, 30],
    [30, 30, 0],
  ];
  return {
    replicas,
    scope: scope ?? replicas.map((r) => r.index),
    isReady: () => true,
    readyReplicas: () => replicas.map((r) => r.index),
    localSubset: (z) => replicas.filter((r) => r.zoneIndex === z).map((r) => r.address),
    zoneIndex: 0,
    regionOf: (z) => zones[z]?.region ?? '',
    zone: 'zone-a',
    region: 'r1',
    network: new Network(rtt),
    engines: zones.map(() => engineConfig('llama-8b-h100', { mode: 'step' })),
    servesLora: false,
    seed: 7,
    fleet: new Fleet(),
    config: {},
    seesCompletion: false,
  };
}

let nextId = 0;
function request(priority = 0, prompt = `question ${nextId} `.repeat(20)): SimRequest {
  return {
    id: nextId++,
    gateway: 0,
    arrivalAt: 0,
    promptTokens: 100,
    outputTokens: 50,
    prompt,
    blockHashes: undefined,
    tokenIds: undefined,
    contentKeys: undefined,
    group: -1,
    priority,
    tenant: 0,
    fairnessId: undefined,
    lora: undefined,
  };
}

/** Scrape every replica of `ctx` at `now`: the given waiting counts (0 elsewhere), KV use 0.2. */
function scrapeAll(router: ReferenceRouter, ctx: RouterContext, now: number, waiting: Record<number, number> = {}, kv = 0.2): void {
  for (const r of ctx.scope) router.applyScrape(r, { waiting: waiting[r] ?? 0, running: 10, kvUsage: kv, readAt: now - 1 }, now);
}

const picks = (router: ReferenceRouter, n: number, now: number, gatewayZone = 0): number[] =>
  Array.from({ length: n }, () => {
    const route = router.route(request(), { gatewayZone, mayDefer: false }, now);
    expect(route.status).toBe('routed');
    expect(route.list).toHaveLength(1);
    return route.list[0] as number;
  });

describe('reference: the EPP as deployed', () => {
  it('herds between scrapes: without accounting for its own picks every request goes to the pod the last scrape showed best', () => {
    const ctx = context();
    const reference = new ReferenceRouter(ctx, REFERENCE_PROFILE);
    // Replica 3 had the shortest queue at the last scrape.
    scrapeAll(reference, ctx, 100, { 0: 4, 1: 4, 2: 4, 3: 0, 4: 4, 5: 4, 6: 4, 7: 4 });
    const chosen = picks(reference, 30, 110);
    expect(new Set(chosen)).toEqual(new Set([3]));
  });

  it('reference-plus counts its picks until a scrape sees them: the burst spreads', () => {
    const ctx = context();
    const plus = new ReferenceRouter(ctx, { ...REFERENCE_PROFILE, countsPicks: true });
    scrapeAll(plus, ctx, 100, { 0: 4, 1: 4, 2: 4, 3: 0, 4: 4, 5: 4, 6: 4, 7: 4 });
    const chosen = picks(plus, 30, 110);
    expect(new Set(chosen).size).toBeGreaterThan(4);
    // A scrape read after the picks reached the pods covers them: the ledger empties, replica 3 is best again.
    scrapeAll(plus, ctx, 200, { 0: 4, 1: 4, 2: 4, 3: 0, 4: 4, 5: 4, 6: 4, 7: 4 });
    expect(picks(plus, 1, 210)).toEqual([3]);
  });

  it('admission: a sheddable request gets 429 only when the pool is saturated (stale pods counting as saturated)', () => {
    const ctx = context();
    const reference = new ReferenceRouter(ctx, REFERENCE_PROFILE);
    scrapeAll(reference, ctx, 100);
    expect(reference.route(request(-1), { gatewayZone: 0, mayDefer: false }, 110).status).toBe('routed');
    // Every queue at 5: saturation 1.
    scrapeAll(reference, ctx, 200, Object.fromEntries(ctx.scope.map((r) => [r, 5])));
    expect(reference.route(request(-1), { gatewayZone: 0, mayDefer: false }, 210).status).toBe(429);
    expect(reference.route(request(0), { gatewayZone: 0, mayDefer: false }, 210).status).toBe('routed');
    // Idle, but no scrape for over 200 ms: the detector counts every pod as saturated.
    scrapeAll(reference, ctx, 300);
    expect(reference.route(request(-1), { gatewayZone: 0, mayDefer: false }, 600).status).toBe(429);
    expect(reference.saturation(ctx.scope, 600)).toBe(1);
  });

  it('prefix affinity: a prompt goes back to the replica its prefix was sent to, while its LRU holds it', () => {
    const ctx = context();
    const reference = new ReferenceRouter(ctx, REFERENCE_PROFILE);
    scrapeAll(reference, ctx, 100);
    const system = 'You are a careful assistant. '.repeat(60);
    const first = reference.route(request(0, `${system} first`), { gatewayZone: 0, mayDefer: false }, 110).list[0];
    for (let i = 0; i < 10; i++) {
      expect(reference.route(request(0, `${system} again ${i}`), { gatewayZone: 0, mayDefer: false }, 111 + i).list[0]).toBe(first);
    }
  });

  it('reference-zonal fails over only when its pool is saturated, and never when it is the last resort', () => {
    const ctx = context([0, 1, 2, 3]);
    const zonal = new ReferenceRouter(ctx, { ...REFERENCE_PROFILE, failover: true });
    scrapeAll(zonal, ctx, 100, { 0: 4, 1: 4, 2: 4, 3: 4 });
    expect(zonal.route(request(), { gatewayZone: 0, mayDefer: true }, 110).status).toBe('routed');
    scrapeAll(zonal, ctx, 200, { 0: 6, 1: 6, 2: 6, 3: 6 });
    expect(zonal.route(request(), { gatewayZone: 0, mayDefer: true }, 210).status).toBe('defer');
    const last = zonal.route(request(), { gatewayZone: 0, mayDefer: false }, 210);
    expect(last.status).toBe('routed');
    expect(ctx.scope).toContain(last.list[0]);
  });

  it('llm-d-topology keeps requests local until the capacity filter drops every local pod, then prefers its region', () => {
    const ctx = context();
    const topology = new ReferenceRouter(ctx, { ...REFERENCE_PROFILE, capacityFilter: true, topology: LLMD_TOPOLOGY });
    // Remote pods look much better on every load scorer; local ones are busy but under the filter's bounds.
    scrapeAll(topology, ctx, 100, { 0: 4, 1: 4, 2: 4, 3: 4 }, 0.2);
    for (const r of picks(topology, 20, 110)) expect(r).toBeLessThan(4);
    // Every local queue at 5: the filter drops them, the region's zone-b wins over zone-c.
    scrapeAll(topology, ctx, 200, { 0: 5, 1: 5, 2: 5, 3: 5 });
    for (const r of picks(topology, 20, 210)) expect([4, 5]).toContain(r);
    // Every pod over the bounds: the filter fails open, and local wins again.
    scrapeAll(topology, ctx, 300, Object.fromEntries(ctx.scope.map((r) => [r, 9])));
    for (const r of picks(topology, 20, 310)) expect(r).toBeLessThan(4);
  });
});

describe('envoy-load-aware: the load_aware_locality weights', () => {
  const share = (w: number[]) => w.map((x) => Math.round((x / w.reduce((a, b) => a + b, 0)) * 100));

  it("reproduces the policy doc's worked example: local 0.7, remotes 0.3 and 0.4 → headroom weights 3 / 7 / 6 (about 19 / 44 / 37 %)", () => {
    const w = weightsOf([0.7, 0.3, 0.4], [10, 10, 10]);
    expect(w.map((x) => Math.round(x * 1000) / 1000)).toEqual([3, 7, 6]);
    expect(share(w)).toEqual([19, 44, 38]);
  });

  it('snaps to local within the variance threshold, keeping the 3 % probe spread by host count', () => {
    const w = weightsOf([0.45, 0.4, 0.4], [10, 10, 20]);
    const total = w.reduce((a, b) => a + b, 0);
    expect((w[0] as number) / total).toBeCloseTo(1 - LOAD_AWARE.remoteProbeFraction, 9);
    expect((w[2] as number) / (w[1] as number)).toBeCloseTo(2, 9);
  });

  it('falls back to host counts when every locality is overloaded', () => {
    expect(weightsOf([1, 1.2, 1], [4, 2, 2])).toEqual([4, 2, 2]);
  });
});

const resolve = (overrides: Record<string, unknown> = {}): ResolvedScenario => resolveScenario(parse(smallScenario(overrides)));
const run = (s: ResolvedScenario, name: string, seed = 7): RunResult => {
  const spec = s.strategies.find((x) => x.name === name);
  if (!spec) throw new Error(`no strategy ${name}`);
  return runStrategy(s, spec, seed);
};

describe('the baselines in whole runs', () => {
  const hot = { durationS: 25, load: { clusterFraction: 0.85, zoneFractions: { 'zone-a': 1.6 } } };

  it(
    'envoy-load-aware shifts weight off a hot zone: the hot gateway sends far more across zones than under balanced load',
    () => {
      const strategies = ['envoy-load-aware'];
      const balanced = run(resolve({ strategies, durationS: 25, load: { clusterFraction: 0.6 } }), 'envoy-load-aware');
      const skewed = run(resolve({ strategies, ...hot }), 'envoy-load-aware');
      // Balanced: local but for the probe.
      expect(balanced.crossZoneShare).toBeLessThan(0.06);
      expect(skewed.crossZoneShareByZone['zone-a']).toBeGreaterThan(3 * balanced.crossZoneShare);
    },
    SIM_TIMEOUT_MS,
  );

  it(
    'reference-zonal stays in its zone under balanced load and fails over from a saturated one',
    () => {
      const strategies = ['reference-zonal'];
      expect(run(resolve({ strategies, durationS: 20, load: { clusterFraction: 0.5 } }), 'reference-zonal').crossZoneShare).toBe(0);
      const skewed = run(resolve({ strategies, ...hot }), 'reference-zonal');
      expect(skewed.crossZoneShareByZone['zone-a']).toBeGreaterThan(0.05);
      expect(skewed.crossZoneShareByZone['zone-b']).toBeLessThan(0.02);
    },
    SIM_TIMEOUT_MS,
  );

  it(
    'the pool-wide reference costs a gateway in another region the round trip to it; one picker per region does not',
    () => {
      const s = resolve({
        durationS: 12,
        zones: [
          { zone: 'zone-a', region: 'r1', replicas: 2 },
          { zone: 'zone-c', region: 'r2', replicas: 2 },
        ],
        network: { crossRegionMs: 60 },
        load: { clusterFraction: 0.3, zoneShares: { 'zone-a': 0, 'zone-c': 1 } },
        strategies: ['reference', 'reference-regional'],
      });
      // Every request arrives in zone-c; the pool-wide picker runs in zone-a, 60 ms away.
      expect(run(s, 'reference').ttftMs.p50).toBeGreaterThan(60);
      expect(run(s, 'reference-regional').ttftMs.p50).toBeLessThan(60);
    },
    SIM_TIMEOUT_MS,
  );
});
