import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import type { Endpoint, Fleet, PoolView } from '@spillway/fleet';
import { networkConfigSchema } from '../src/config.js';
import { ZoneNetwork } from '../src/network.js';
import { seededRng } from '../src/rng.js';
import { RemoteShortlist } from '../src/shortlist.js';
import { applyPod, buildFleet, POOL, T0, type PodSpec } from './fleet-fixture.js';

/**
 * The remote shortlist's scan spread over several picks (`remote.scanPerPick`) must list what a
 * whole scan lists, keep the last complete list in use until it is done, and fall back to a whole
 * scan wherever spreading would hold stale choices (no list yet, a doubtful list, a slow trickle of
 * picks); a topology change abandons it.
 */
const REFRESH_MS = 20;

function pods(count: number): PodSpec[] {
  return Array.from({ length: count }, (_, i) => ({
    pod: `p${i}`,
    zone: ['a', 'b', 'c'][i % 3] as string,
    address: `10.0.${i >> 8}.${i & 255}:8000`,
  }));
}

interface Harness {
  readonly fleet: Fleet;
  readonly pool: PoolView;
  readonly network: ZoneNetwork;
  readonly shortlist: RemoteShortlist;
  /** Base keys by pod name: what the ranking reads (tests change them between picks). */
  readonly keys: Map<string, number>;
  /** Base keys computed so far. */
  priced: number;
}

function harness(count: number, keyOf: (i: number) => number, seed = 7): Harness {
  const fleet = buildFleet(pods(count));
  const pool = fleet.pool(POOL) as PoolView;
  const keys = new Map<string, number>();
  for (let i = 0; i < count; i++) keys.set(`p${i}`, keyOf(i));
  const h: Harness = {
    fleet,
    pool,
    network: new ZoneNetwork('a', 'r1', networkConfigSchema.parse({})),
    shortlist: undefined as unknown as RemoteShortlist,
    keys,
    priced: 0,
  };
  (h as { shortlist: RemoteShortlist }).shortlist = new RemoteShortlist({
    baseKey: (endpoint: Endpoint) => {
      h.priced++;
      return keys.get(endpoint.pod) as number;
    },
    isPenalised: () => false,
    isSilent: () => false,
    rng: seededRng(seed),
  });
  return h;
}

const names = (list: readonly Endpoint[]): string[] => list.map((endpoint) => endpoint.pod);

function refresh(h: Harness, now: number, size: number, budget: number): void {
  h.shortlist.refresh(h.pool, h.network, h.fleet.topologyVersion, now, { size, refreshMs: REFRESH_MS, scanPerPick: budget });
}

describe('remote shortlist scans spread over picks', () => {
  it('lists what a whole scan lists, whatever the budget (distinct and tied keys)', () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 3, max: 120 }),
        fc.integer({ min: 1, max: 40 }),
        fc.integer({ min: 1, max: 12 }),
        fc.integer({ min: 1, max: 6 }),
        fc.integer({ min: 0, max: 1000 }),
        (count, budget, size, distinctKeys, seed) => {
          const keyOf = (i: number): number => ((i * 7919 + seed) % distinctKeys) * 3;
          const spread = harness(count, keyOf, seed);
          const whole = harness(count, keyOf, seed);
          // Both start from a whole scan (no list yet); then a scan due by time.
          refresh(spread, T0, size, budget);
          whole.shortlist.rescan(whole.pool, whole.network, whole.fleet.topologyVersion, T0, size);
          expect(names(spread.shortlist.endpoints)).toEqual(names(whole.shortlist.endpoints));
          const due = T0 + REFRESH_MS;
          for (let pick = 0; pick < count; pick++) refresh(spread, due + pick * 0.01, size, budget);
          whole.shortlist.rescan(whole.pool, whole.network, whole.fleet.topologyVersion, due, size);
          expect(names(spread.shortlist.endpoints)).toEqual(names(whole.shortlist.endpoints));
        },
      ),
      { numRuns: 200 },
    );
  });

  it('prices at most its budget per pick and keeps the last complete list until the new one is done', () => {
    const h = harness(90, (i) => i);
    refresh(h, T0, 4, 10);
    // No list yet: one whole scan of the 60 remote pods.
    expect(h.priced).toBe(60);
    expect(names(h.shortlist.endpoints)).toEqual(['p1', 'p2', 'p4', 'p5']);
    // Cheaper pods appear; a scan due by time takes 6 picks of 10 pods each, and one more to find
    // the last zone done.
    h.keys.set('p88', -2);
    h.keys.set('p89', -1);
    const due = T0 + REFRESH_MS;
    for (let pick = 0; pick < 6; pick++) {
      h.priced = 0;
      refresh(h, due + pick * 0.1, 4, 10);
      // The doubt check prices the listed four; the scan its ten.
      expect(h.priced).toBeLessThanOrEqual(14);
      expect(names(h.shortlist.endpoints)).toEqual(['p1', 'p2', 'p4', 'p5']);
    }
    refresh(h, due + 0.6, 4, 10);
    expect(names(h.shortlist.endpoints)).toEqual(['p88', 'p89', 'p1', 'p2']);
    // Not due again until refreshMs after the scan began.
    h.priced = 0;
    refresh(h, due + 1, 4, 10);
    expect(h.priced).toBeLessThanOrEqual(4);
  });

  it('finishes a scan at once when it began refreshMs ago (picks are rare)', () => {
    const h = harness(90, (i) => i);
    refresh(h, T0, 4, 10);
    h.keys.set('p89', -1);
    refresh(h, T0 + REFRESH_MS, 4, 10);
    expect(names(h.shortlist.endpoints)).toEqual(['p1', 'p2', 'p4', 'p5']);
    refresh(h, T0 + 2 * REFRESH_MS, 4, 10);
    expect(names(h.shortlist.endpoints)).toEqual(['p89', 'p1', 'p2', 'p4']);
  });

  it('scans whole at once when the list is doubtful (every listed pod dearer than the best left off)', () => {
    const h = harness(90, (i) => i);
    refresh(h, T0, 4, 10);
    // Picks made the listed pods dear; the best left off (p7, key 7) is now the cheapest.
    for (const pod of ['p1', 'p2', 'p4', 'p5']) h.keys.set(pod, 100);
    h.priced = 0;
    refresh(h, T0 + 1, 4, 10);
    expect(h.priced).toBeGreaterThanOrEqual(60);
    expect(names(h.shortlist.endpoints)).toEqual(['p7', 'p8', 'p10', 'p11']);
  });

  it('abandons a scan when the topology changes, and lists new pods at the next complete scan', () => {
    const h = harness(90, (i) => i);
    refresh(h, T0, 4, 10);
    const due = T0 + REFRESH_MS;
    refresh(h, due, 4, 10);
    // A new remote pod, cheaper than all, arrives mid-scan: the scan starts over and finds it.
    applyPod(h.fleet, { pod: 'new', zone: 'b', address: '10.9.9.9:8000' }, due + 0.1);
    h.keys.set('new', -5);
    for (let pick = 1; pick <= 7; pick++) refresh(h, due + pick * 0.1, 4, 10);
    expect(names(h.shortlist.endpoints)).toEqual(['new', 'p1', 'p2', 'p4']);
  });

  it('budget 0 scans whole when due', () => {
    const h = harness(90, (i) => i);
    refresh(h, T0, 4, 0);
    h.keys.set('p89', -1);
    h.priced = 0;
    refresh(h, T0 + REFRESH_MS, 4, 0);
    expect(h.priced).toBeGreaterThanOrEqual(60);
    expect(names(h.shortlist.endpoints)).toEqual(['p89', 'p1', 'p2', 'p4']);
  });
});
