import { describe, expect, it } from 'vitest';
import type { Fleet } from '@spillway/fleet';
import { Scheduler, type Decision, type EntryCost, type PickRequest, type SchedulerConfigInput } from '../src/index.js';
import { Origins } from '../src/origins.js';
import { CostPolicy } from '../src/cost.js';
import { RemoteShortlist } from '../src/shortlist.js';
import { seededRng } from '../src/rng.js';
import { schedulerConfigSchema } from '../src/config.js';
import { applyPod, buildFleet, POOL, T0, threeZones, type PodSpec } from './fleet-fixture.js';

/**
 * The gateway's zone (`x-spillway-gateway-zone`, PickRequest.zone) is the request's local zone:
 * tiers, round trips and the zone bias are seen from it, when the pool has a pod in it; otherwise
 * the pick is the EPP's (zone a here). The standard pool: a (r1) a0..a2 waiting 0/1/2, b (r1)
 * b0..b1 waiting 0/1, c (r2) c0..c1 waiting 0/1; a backlogged waiting request costs 100 ms.
 */
function scheduler(pods: PodSpec[], config: SchedulerConfigInput = {}): Scheduler {
  return new Scheduler({ fleet: buildFleet(pods), pool: POOL, zone: 'a', region: 'r1', config });
}

const pick = (s: Scheduler, request: Partial<PickRequest> = {}): Decision => s.pick({ model: 'llama', ...request }, T0);
const pods = (d: Decision): string[] => d.entries.map((e) => e.endpoint.pod);
const costOf = (d: Decision, pod: string): EntryCost => d.entries.find((e) => e.endpoint.pod === pod)?.cost as EntryCost;
const addresses = (specs: PodSpec[], zone: string): string[] => specs.filter((p) => p.zone === zone).map((p) => p.address);

describe("the gateway's zone is the request's local zone", () => {
  it("prices from the gateway's zone: its pods local (no round trip, no bias), the EPP's zone remote", () => {
    const s = scheduler(threeZones());
    const fromB = pick(s, { zone: 'b' });
    expect(fromB).toMatchObject({ status: 'routed', rule: 'local', zone: 'b', gatewayZone: 'known' });
    expect(pods(fromB)[0]).toBe('b0');
    expect(fromB.entries[0]?.reason).toBe('local-best');
    expect(costOf(fromB, 'b0')).toMatchObject({ rttMs: 0, biasMs: 0 });
    expect(fromB.counts.eligibleLocal).toBe(2);
    // The EPP's own zone is a remote zone of the same region now.
    const fromBPods = pods(fromB);
    expect(fromBPods).toContain('a0');
    expect(costOf(fromB, 'a0')).toMatchObject({ rttMs: 1, biasMs: 8 });

    const fromEpp = pick(s);
    expect(fromEpp).toMatchObject({ rule: 'local', zone: 'a', gatewayZone: 'none' });
    expect(pods(fromEpp)[0]).toBe('a0');
    expect(costOf(fromEpp, 'b0')).toMatchObject({ rttMs: 1, biasMs: 8 });
  });

  it('round trips are the ones from the gateway zone, configured pairs included', () => {
    const s = scheduler(threeZones(), { network: { rttMs: { c: { b: 5 } } } });
    const fromC = pick(s, { zone: 'c' });
    expect(fromC).toMatchObject({ rule: 'local', zone: 'c' });
    expect(pods(fromC)[0]).toBe('c0');
    // From c (r2): b by the configured pair, a by region.
    expect(costOf(fromC, 'b0').rttMs).toBe(5);
    const fromA = pick(s, { zone: 'a' });
    expect(fromA).toMatchObject({ zone: 'a', gatewayZone: 'known' });
    expect(costOf(fromA, 'c0').rttMs).toBe(30);
  });

  it("spills relative to the gateway's zone: a busy zone b sends its own gateway's requests to a (same region)", () => {
    const specs = threeZones({ b0: { waiting: 4 }, b1: { waiting: 4 } });
    const s = scheduler(specs);
    const fromB = pick(s, { zone: 'b' });
    expect(fromB).toMatchObject({ status: 'routed', rule: 'spill', zone: 'b' });
    expect(pods(fromB)[0]).toBe('a0');
    expect(fromB.entries.map((e) => e.reason)).toContain('local-fallback');
    // The EPP's own zone is idle: its requests stay home.
    expect(pick(s)).toMatchObject({ rule: 'local', zone: 'a' });
  });

  it('a zone whose pods are all unready is still known: nothing local, the pick spills from there', () => {
    const specs = threeZones({ b0: { ready: false }, b1: { ready: false } });
    const fromB = pick(scheduler(specs), { zone: 'b' });
    expect(fromB).toMatchObject({ status: 'routed', rule: 'spill', zone: 'b', gatewayZone: 'known' });
    expect(fromB.counts.eligibleLocal).toBe(0);
    expect(pods(fromB)[0]).toBe('a0');
    expect(costOf(fromB, 'a0')).toMatchObject({ rttMs: 1, biasMs: 8 });
  });

  it("naming the EPP's own zone is the same pick as naming none", () => {
    const s = scheduler(threeZones());
    const named = pick(s, { zone: 'a' });
    expect(named).toMatchObject({ zone: 'a', gatewayZone: 'known' });
    expect(pods(named)).toEqual(pods(pick(s)));
  });
});

describe('a zone the pool does not have', () => {
  it('is picked for the EPP zone and said so: unknown, malformed, or none', () => {
    const s = scheduler(threeZones());
    for (const [zone, use] of [
      ['zone-x', 'unknown'],
      [null, 'malformed'],
      [undefined, 'none'],
    ] as const) {
      const d = pick(s, { zone });
      expect(d).toMatchObject({ status: 'routed', rule: 'local', zone: 'a', gatewayZone: use });
      expect(pods(d)[0]).toBe('a0');
      expect(costOf(d, 'b0')).toMatchObject({ rttMs: 1, biasMs: 8 });
    }
  });

  it('a zone whose pods were all deleted is not known any more', () => {
    const specs = threeZones();
    const fleet = buildFleet(specs);
    const s = new Scheduler({ fleet, pool: POOL, zone: 'a', region: 'r1' });
    expect(s.pick({ model: 'llama', zone: 'c' }, T0)).toMatchObject({ zone: 'c', gatewayZone: 'known' });
    for (const pod of specs.filter((p) => p.zone === 'c'))
      applyPod(fleet, { ...pod, ready: false, deleted: true, readinessAge: 0 }, T0 + 1);
    expect(s.pick({ model: 'llama', zone: 'c' }, T0 + 1)).toMatchObject({ zone: 'a', gatewayZone: 'unknown' });
  });
});

describe('what is remembered per zone', () => {
  it("each gateway zone's remote shortlist is its own: the nearest remote zone from c is d, from a it is b", () => {
    // Shortlists of one: from a (r1) the cheapest remote pod is b0 (1 ms + bias); from c (r2) d0 (1 ms + bias).
    const specs: PodSpec[] = [
      { pod: 'a0', zone: 'a', address: '10.0.0.1:8000' },
      { pod: 'b0', zone: 'b', address: '10.0.1.1:8000' },
      { pod: 'c0', zone: 'c', address: '10.0.2.1:8000' },
      { pod: 'd0', zone: 'd', address: '10.0.3.1:8000' },
    ];
    const s = scheduler(specs, { remote: { shortlist: 1, refreshMs: 1000 }, maxEndpoints: 2 });
    for (let round = 0; round < 3; round++) {
      expect(pods(pick(s))).toEqual(['a0', 'b0']);
      expect(pods(pick(s, { zone: 'c' }))).toEqual(['c0', 'd0']);
      expect(pods(pick(s, { zone: 'b' }))).toEqual(['b0', 'a0']);
    }
  });

  it("the same subset hint is resolved per zone: in locality mode its pods are local only from their own zone's gateway", () => {
    const specs = threeZones();
    const s = scheduler(specs, { subsetMode: 'locality' });
    const hint = addresses(specs, 'b');
    for (let round = 0; round < 2; round++) {
      const fromB = pick(s, { zone: 'b', subset: hint });
      expect(fromB).toMatchObject({ rule: 'local', zone: 'b' });
      expect(fromB.counts.eligibleLocal).toBe(2);
      // The EPP's zone with the same hint: b's pods are remote from a, and locality mode takes only
      // the hint's local pods as local, so none is.
      const fromA = pick(s, { subset: hint });
      expect(fromA.zone).toBe('a');
      expect(fromA.counts.eligibleLocal).toBe(0);
      expect(fromA.entries[0]?.zone).not.toBe('a');
    }
  });

  it('strict mode keeps to the subset whatever the zone; the tiers inside it follow the gateway zone', () => {
    const specs = threeZones();
    const s = scheduler(specs, { subsetMode: 'strict' });
    const hint = [...addresses(specs, 'b'), ...addresses(specs, 'a')];
    const fromB = pick(s, { zone: 'b', subset: hint });
    expect(new Set(fromB.entries.map((e) => e.zone))).toEqual(new Set(['a', 'b']));
    expect(fromB.entries[0]).toMatchObject({ zone: 'b', reason: 'local-best' });
    const fromA = pick(s, { subset: hint });
    expect(fromA.entries[0]).toMatchObject({ zone: 'a', reason: 'local-best' });
  });
});

describe('Origins: one per zone the pool has, bounded by it', () => {
  function origins(fleet: Fleet): Origins {
    const config = schedulerConfigSchema.parse({});
    const built = new Origins('a', 'r1', {
      policy: (network) => new CostPolicy(config, network, fleet.staleAfterMs),
      shortlist: () => new RemoteShortlist({ baseKey: () => 0, isPenalised: () => false, isSilent: () => false, rng: seededRng(1) }),
    });
    built.configure(config.network);
    return built;
  }

  it('makes an origin only for zones the pool has, reuses it, and forgets it when the zone goes', () => {
    const specs = threeZones();
    const fleet = buildFleet(specs);
    const o = origins(fleet);
    const pool = fleet.pool(POOL);
    expect(o.choose(pool, 'zone-x')).toMatchObject({ gatewayZone: 'unknown', origin: o.own });
    expect(o.size).toBe(0);
    const b = o.choose(pool, 'b').origin;
    expect(b).toMatchObject({ zone: 'b' });
    expect(b.network.region).toBe('r1');
    expect(o.choose(pool, 'b').origin).toBe(b);
    o.choose(pool, 'c');
    expect(o.size).toBe(2);
    for (const pod of specs.filter((p) => p.zone === 'b'))
      applyPod(fleet, { ...pod, ready: false, deleted: true, readinessAge: 0 }, T0 + 1);
    o.prune(pool);
    expect(o.size).toBe(1);
    expect(o.choose(pool, 'b').gatewayZone).toBe('unknown');
  });

  it("rebuilds a zone's origin when the view names another region for it", () => {
    const specs = threeZones();
    const fleet = buildFleet(specs);
    const o = origins(fleet);
    const pool = fleet.pool(POOL);
    const before = o.choose(pool, 'c').origin;
    expect(before.network.region).toBe('r2');
    for (const pod of specs.filter((p) => p.zone === 'c')) applyPod(fleet, { ...pod, region: 'r1', readinessAge: 0 }, T0 + 1);
    const after = o.choose(pool, 'c').origin;
    expect(after).not.toBe(before);
    expect(after.network.region).toBe('r1');
  });
});
