import { parseAddressPattern } from '@spillway/events';
import type { Endpoint, Fleet } from '@spillway/fleet';
import { Fleet as FleetClass } from '@spillway/fleet';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { Scheduler } from '../src/index.js';
import { POOL, T0 } from './fleet-fixture.js';

const ZONES = ['a', 'b', 'c', 'd'] as const;
const REGION_OF: Record<string, string | undefined> = { a: 'r1', b: 'r1', c: 'r2', d: undefined };

const podArb = fc.record({
  zone: fc.constantFrom(...ZONES),
  ip: fc.integer({ min: 1, max: 12 }),
  port: fc.constantFrom(8000, 8001),
  v6: fc.boolean(),
  readiness: fc.array(fc.record({ ready: fc.boolean(), deleted: fc.boolean(), at: fc.integer({ min: 0, max: 3 }) }), {
    minLength: 0,
    maxLength: 2,
  }),
  metrics: fc.option(
    fc.record({
      waiting: fc.integer({ min: 0, max: 8 }),
      kv: fc.double({ min: 0, max: 1, noNaN: true }),
      age: fc.integer({ min: 0, max: 2000 }),
    }),
    { nil: undefined },
  ),
});

type PodArb = typeof podArb extends fc.Arbitrary<infer T> ? T : never;

const addressOf = (ip: number, port: number, v6: boolean): string => (v6 ? `[fd00::${ip}]:${port}` : `10.0.0.${ip}:${port}`);

const entryArb = fc.oneof(
  fc
    .record({ ip: fc.integer({ min: 1, max: 14 }), port: fc.constantFrom(8000, 8001), v6: fc.boolean() })
    .map((e) => addressOf(e.ip, e.port, e.v6)),
  fc.record({ ip: fc.integer({ min: 1, max: 14 }), v6: fc.boolean() }).map((e) => (e.v6 ? `fd00::${e.ip}` : `10.0.0.${e.ip}`)),
  fc.constantFrom('garbage', '10.0.0.1:0', '10.0.0.1:99999', '', ':8000', '[fd00::1'),
);

const caseArb = fc.record({
  pods: fc.array(podArb, { maxLength: 14 }),
  subset: fc.option(fc.array(entryArb, { maxLength: 8 }), { nil: undefined }),
  asString: fc.boolean(),
  mode: fc.constantFrom('strict' as const, 'locality' as const),
  maxEndpoints: fc.integer({ min: 1, max: 4 }),
  crossZoneFallbacks: fc.integer({ min: 0, max: 3 }),
  refreshMs: fc.constantFrom(0, 20),
  priority: fc.integer({ min: -1, max: 1 }),
  seed: fc.integer(),
  picks: fc.integer({ min: 1, max: 4 }),
});

function build(pods: readonly PodArb[]): Fleet {
  const fleet = new FleetClass();
  pods.forEach((pod, i) => {
    const name = `p${i}`;
    for (const r of pod.readiness) {
      fleet.apply(
        {
          v: 1,
          kind: 'readiness',
          pool: POOL,
          zone: pod.zone,
          region: REGION_OF[pod.zone],
          pod: name,
          address: addressOf(pod.ip, pod.port, pod.v6),
          ready: r.ready,
          deleted: r.deleted,
          observedAt: T0 - 10_000 + r.at,
        },
        T0 - 10_000,
      );
    }
    if (pod.metrics) {
      const at = T0 - pod.metrics.age;
      fleet.apply(
        {
          v: 1,
          kind: 'metrics',
          pool: POOL,
          zone: pod.zone,
          pod: name,
          observedAt: at,
          waitingRequests: pod.metrics.waiting,
          runningRequests: 0,
          kvCacheUsage: pod.metrics.kv,
        },
        at,
      );
    }
  });
  return fleet;
}

/** Eligibility restated naively, independent of the scheduler's code paths. */
function oracle(fleet: Fleet, subset: readonly string[] | undefined, mode: 'strict' | 'locality') {
  const patterns = (subset ?? []).map((e) => parseAddressPattern(e)).filter((p) => p !== undefined);
  const inSubset = (ep: Endpoint): boolean => patterns.some((p) => (p.port === undefined ? p.ip === ep.ip : p.key === ep.address));
  const eligible: Endpoint[] = [];
  for (const ep of fleet.pool(POOL)?.endpoints() ?? []) {
    if (!ep.ready || ep.deleted || ep.address === undefined) continue;
    if (subset === undefined) eligible.push(ep);
    else if (mode === 'strict' ? inSubset(ep) : ep.zone !== 'a' || inSubset(ep)) eligible.push(ep);
  }
  return { eligible: new Set(eligible), inSubset };
}

describe('invariants over random fleets and subsets, both policies', () => {
  it('hold for every pick', () => {
    fc.assert(
      fc.property(caseArb, fc.constantFrom('cost' as const, 'weighted' as const), (c, policy) => {
        const fleet = build(c.pods);
        const scheduler = new Scheduler({
          fleet,
          pool: POOL,
          zone: 'a',
          region: 'r1',
          seed: c.seed,
          config: {
            policy,
            subsetMode: c.mode,
            maxEndpoints: c.maxEndpoints,
            crossZoneFallbacks: c.crossZoneFallbacks,
            remote: { refreshMs: c.refreshMs },
          },
        });
        const hint = c.subset === undefined ? undefined : c.asString ? c.subset.join(',') : c.subset;
        // A joined string is re-split on commas, so the oracle sees the same entries.
        const entries = hint === undefined ? undefined : typeof hint === 'string' ? (hint.length === 0 ? [] : hint.split(',')) : hint;
        for (let k = 0; k < c.picks; k++) {
          const now = T0 + k;
          const { eligible, inSubset } = oracle(fleet, entries, c.mode);
          const d = scheduler.pick({ model: 'm', subset: hint, priority: c.priority, prompt: 'x'.repeat(200) }, now);
          const list = d.entries.map((e) => e.endpoint);

          expect(d.status === 503).toBe(eligible.size === 0);
          expect(d.counts.eligible).toBe(eligible.size);
          if (d.status === 429) expect(c.priority).toBeLessThan(0);
          expect(list.length).toBeLessThanOrEqual(c.maxEndpoints);
          expect(new Set(list).size).toBe(list.length);
          // Never the same address twice, even when two pods share one.
          expect(new Set(d.entries.map((e) => e.address)).size).toBe(list.length);
          for (const ep of list) {
            expect(eligible.has(ep)).toBe(true);
            // Strict mode never leaves the subset.
            if (c.mode === 'strict' && entries !== undefined) expect(inSubset(ep)).toBe(true);
          }
          if (d.status !== 'routed') {
            expect(list.length).toBe(0);
            continue;
          }
          expect(list.length).toBeGreaterThan(0);
          // The primary is the cheapest listed; the rest follow in key order.
          const keys = d.entries.map((e) => e.key);
          for (let i = 1; i < keys.length; i++) {
            expect(keys[0]).toBeLessThanOrEqual(keys[i] as number);
            if (i > 1) expect(keys[i - 1]).toBeLessThanOrEqual(keys[i] as number);
          }
          const primary = list[0] as Endpoint;
          const listedAddresses = new Set(d.entries.map((e) => e.address));
          // At least one remote entry whenever a remote endpoint is eligible (and could be listed).
          if (c.crossZoneFallbacks >= 1 && c.maxEndpoints >= 2) {
            const remoteListable = [...eligible].some((ep) => ep.zone !== 'a' && ep.address !== primary.address);
            if (remoteListable) expect(list.some((ep) => ep.zone !== 'a')).toBe(true);
          }
          // A spilled request keeps its way home.
          if (primary.zone !== 'a' && c.maxEndpoints >= 2) {
            const localListable = [...eligible].some((ep) => ep.zone === 'a' && !listedAddresses.has(ep.address as string));
            if (localListable) expect(list.some((ep) => ep.zone === 'a')).toBe(true);
          }
          expect(d.rule === 'spill').toBe(primary.zone !== 'a' && !d.entries[0]?.full);
          scheduler.commit(d, now);
        }
      }),
      { numRuns: 400, seed: 20251129 },
    );
  });
});
