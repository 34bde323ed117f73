import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { metricsEventSchema, type MetricsEvent, type ReadinessEvent, type SpillwayEvent } from '@spillway/events';
import { Charge, Fleet, snapshotPool, type Endpoint, type PrefillRate } from '@spillway/fleet';

/** A prefill rate of `msPerToken` and nothing else: no attention, no step per chunk. */
function tokensOnly(msPerToken: number): PrefillRate {
  return { msPerToken, attentionTokens: 0, stepMs: 0, chunkTokens: 8192 };
}

const T0 = 1_764_420_000_000;

/** A request charged to `endpoint` at `at`. */
function pick(fleet: Fleet, endpoint: Endpoint, at: number, prefillTokens = 0): Charge {
  const charge = new Charge();
  charge.prefillTokens = prefillTokens;
  fleet.charge(charge, endpoint, at);
  return charge;
}

/** A fleet holding one ready pod, a0, with an empty sample at T0. */
function onePod(): { fleet: Fleet; a0: Endpoint } {
  const fleet = new Fleet();
  fleet.apply(readiness('a0'), T0);
  fleet.apply(metrics('a0', { observedAt: T0 }), T0);
  return { fleet, a0: fleet.get('llama', 'zone-a', 'a0')! };
}

function readiness(pod: string, overrides: Partial<ReadinessEvent> = {}): ReadinessEvent {
  return {
    v: 1,
    kind: 'readiness',
    pool: 'llama',
    zone: 'zone-a',
    region: 'r1',
    pod,
    address: '10.0.0.1:8000',
    ready: true,
    observedAt: T0,
    ...overrides,
  };
}

function metrics(pod: string, overrides: Partial<MetricsEvent> = {}): MetricsEvent {
  return {
    v: 1,
    kind: 'metrics',
    pool: 'llama',
    zone: 'zone-a',
    pod,
    observedAt: T0,
    waitingRequests: 0,
    runningRequests: 0,
    kvCacheUsage: 0,
    ...overrides,
  };
}

describe('Fleet', () => {
  it('indexes ready pods by pool, zone, address and IP', () => {
    const fleet = new Fleet();
    fleet.apply(readiness('a0', { address: '10.0.0.1:8000' }), T0);
    fleet.apply(readiness('a1', { address: '10.0.0.1:8001' }), T0);
    fleet.apply(readiness('b0', { zone: 'zone-b', address: '[fd00::2]:8000', region: 'r2' }), T0);
    fleet.apply(readiness('b1', { zone: 'zone-b', address: '10.0.0.9:8000', ready: false, region: 'r2' }), T0);
    const pool = fleet.pool('llama');
    expect(pool).toBeDefined();
    if (!pool) return;
    expect([...pool.readyInZone('zone-a')].map((e) => e.pod).sort()).toEqual(['a0', 'a1']);
    expect([...pool.readyInZone('zone-b')].map((e) => e.pod)).toEqual(['b0']);
    expect(pool.readyCount).toBe(3);
    expect([...pool.readyZones()].sort()).toEqual(['zone-a', 'zone-b']);
    expect(pool.regionOf('zone-b')).toBe('r2');
    expect(pool.routableAt('10.0.0.1:8001').map((e) => e.pod)).toEqual(['a1']);
    expect(pool.routableAt('[fd00::2]:8000').map((e) => e.pod)).toEqual(['b0']);
    expect(
      pool
        .routableOnIp('10.0.0.1')
        .map((e) => e.pod)
        .sort(),
    ).toEqual(['a0', 'a1']);
    expect(pool.routableAt('10.0.0.9:8000')).toEqual([]);
    expect(fleet.pool('other')).toBeUndefined();
    expect(fleet.counters).toEqual({
      applied: 4,
      ignored: 0,
      rejected: 0,
      future: 0,
      overCapacity: 0,
      tooManyZones: 0,
      addressConflict: 0,
    });
  });

  it('knows a zone while it has a pod that is not deleted, ready or not, or known only by metrics', () => {
    const fleet = new Fleet();
    fleet.apply(readiness('a0'), T0);
    fleet.apply(readiness('b0', { zone: 'zone-b', ready: false, address: '10.0.0.2:8000' }), T0);
    fleet.apply(metrics('c0', { zone: 'zone-c' }), T0);
    const pool = fleet.pool('llama');
    expect(['zone-a', 'zone-b', 'zone-c', 'zone-x'].map((zone) => pool?.hasZone(zone))).toEqual([true, true, true, false]);
    fleet.apply(readiness('a0', { ready: false, deleted: true, observedAt: T0 + 1 }), T0);
    expect(pool?.hasZone('zone-a')).toBe(false);
    fleet.apply(readiness('a1', { address: '10.0.0.3:8000', observedAt: T0 + 2 }), T0);
    expect(pool?.hasZone('zone-a')).toBe(true);
  });

  it('moves a pod between addresses when its readiness says so', () => {
    const fleet = new Fleet();
    fleet.apply(readiness('p', { address: '10.0.0.1:80' }), T0);
    fleet.apply(readiness('p', { address: '10.0.0.2:80', observedAt: T0 + 1 }), T0);
    const pool = fleet.pool('llama');
    expect(pool?.routableAt('10.0.0.1:80')).toEqual([]);
    expect(pool?.routableAt('10.0.0.2:80').map((e) => e.pod)).toEqual(['p']);
    expect(pool?.readyCount).toBe(1);
  });

  it('identifies a pod by (pool, zone, pod): an event speaks only for the pod of its own zone', () => {
    const fleet = new Fleet();
    fleet.apply(readiness('sim-b-1', { zone: 'zone-b', region: 'r2', address: '10.0.2.1:8000' }), T0);
    fleet.apply(metrics('sim-b-1', { zone: 'zone-b', waitingRequests: 1 }), T0);
    // zone-a's publisher names zone-b's pod, newer: it creates zone-a's own sim-b-1, nothing else.
    expect(
      fleet.apply(
        readiness('sim-b-1', { zone: 'zone-a', address: '10.0.2.1:8000', ready: false, deleted: true, observedAt: T0 + 1000 }),
        T0 + 1000,
      ),
    ).toBe('applied');
    expect(fleet.apply(metrics('sim-b-1', { zone: 'zone-a', waitingRequests: 99, observedAt: T0 + 1000 }), T0 + 1000)).toBe('applied');
    const b = fleet.get('llama', 'zone-b', 'sim-b-1');
    expect(b).toMatchObject({ zone: 'zone-b', ready: true, deleted: false, address: '10.0.2.1:8000' });
    expect(b?.metrics?.waitingRequests).toBe(1);
    expect(fleet.get('llama', 'zone-a', 'sim-b-1')).toMatchObject({ zone: 'zone-a', deleted: true });
    expect([...(fleet.pool('llama')?.readyInZone('zone-b') ?? [])].map((e) => e.pod)).toEqual(['sim-b-1']);
    expect(
      fleet
        .pool('llama')
        ?.routableAt('10.0.2.1:8000')
        .map((e) => e.zone),
    ).toEqual(['zone-b']);
    expect(fleet.pool('llama')?.regionOf('zone-b')).toBe('r2');
  });

  it('ignores events older than the applied one per (pod, kind), and duplicates', () => {
    const fleet = new Fleet();
    expect(fleet.apply(readiness('p', { observedAt: T0 + 10 }), T0)).toBe('applied');
    expect(fleet.apply(readiness('p', { observedAt: T0 + 5, ready: false }), T0)).toBe('ignored');
    expect(fleet.apply(readiness('p', { observedAt: T0 + 10 }), T0)).toBe('ignored');
    expect(fleet.get('llama', 'zone-a', 'p')?.ready).toBe(true);
    // Metrics order independently of readiness.
    expect(fleet.apply(metrics('p', { observedAt: T0 + 1, waitingRequests: 3 }), T0)).toBe('applied');
    expect(fleet.apply(metrics('p', { observedAt: T0, waitingRequests: 9 }), T0)).toBe('ignored');
    expect(fleet.get('llama', 'zone-a', 'p')?.metrics?.waitingRequests).toBe(3);
    expect(fleet.counters).toEqual({
      applied: 2,
      ignored: 3,
      rejected: 0,
      future: 0,
      overCapacity: 0,
      tooManyZones: 0,
      addressConflict: 0,
    });
  });

  it('keeps metrics that arrive before readiness, without making the pod routable', () => {
    const fleet = new Fleet();
    fleet.apply(metrics('p', { waitingRequests: 4 }), T0);
    const pod = fleet.get('llama', 'zone-a', 'p');
    expect(pod?.metrics?.waitingRequests).toBe(4);
    expect(pod?.zone).toBe('zone-a');
    expect(pod?.address).toBeUndefined();
    expect(fleet.pool('llama')?.readyCount).toBe(0);
    fleet.apply(readiness('p'), T0);
    expect(fleet.pool('llama')?.readyCount).toBe(1);
    expect(fleet.get('llama', 'zone-a', 'p')?.metrics?.waitingRequests).toBe(4);
  });

  it('removes a pod on a tombstone, and an older readiness cannot bring it back', () => {
    const fleet = new Fleet();
    fleet.apply(readiness('p', { observedAt: T0 }), T0);
    fleet.apply(readiness('p', { observedAt: T0 + 100, ready: false, deleted: true }), T0);
    expect(fleet.pool('llama')?.readyCount).toBe(0);
    expect(fleet.get('llama', 'zone-a', 'p')?.deleted).toBe(true);
    expect(fleet.apply(readiness('p', { observedAt: T0 + 50 }), T0)).toBe('ignored');
    expect(fleet.pool('llama')?.readyCount).toBe(0);
    // A newer readiness (the pod re-created under the same name) is a live pod again.
    fleet.apply(readiness('p', { observedAt: T0 + 200 }), T0);
    expect(fleet.pool('llama')?.readyCount).toBe(1);
  });

  it('forgets old tombstones on request, keeping recent ones and live pods', () => {
    const fleet = new Fleet();
    fleet.apply(readiness('old', { observedAt: T0, deleted: true, ready: false }), T0);
    fleet.apply(readiness('recent', { observedAt: T0 + 5000, deleted: true, ready: false }), T0);
    fleet.apply(readiness('live', { observedAt: T0 }), T0);
    expect(fleet.pruneDeleted(T0 + 1000)).toBe(1);
    expect(fleet.get('llama', 'zone-a', 'old')).toBeUndefined();
    expect(fleet.get('llama', 'zone-a', 'recent')?.deleted).toBe(true);
    expect(fleet.get('llama', 'zone-a', 'live')?.ready).toBe(true);
    // A pruned pod that comes back is simply new.
    fleet.apply(readiness('old', { observedAt: T0 + 9000 }), T0 + 9000);
    expect(fleet.pool('llama')?.readyCount).toBe(2);
  });

  it('treats a tombstone that says ready: true as not ready', () => {
    const fleet = new Fleet();
    fleet.apply(readiness('p', { deleted: true, ready: true }), T0);
    expect(fleet.get('llama', 'zone-a', 'p')?.ready).toBe(false);
    expect(fleet.pool('llama')?.readyCount).toBe(0);
  });

  it('reports staleness at a given now, from when the sample was received', () => {
    const fleet = new Fleet({ staleAfterMs: 1000 });
    fleet.apply(readiness('p'), T0);
    const pod = fleet.get('llama', 'zone-a', 'p');
    if (!pod) throw new Error('pod missing');
    expect(fleet.isFresh(pod, T0)).toBe(false); // no metrics is never fresh
    expect(fleet.metricsAge(pod, T0)).toBeUndefined();
    fleet.apply(metrics('p', { observedAt: T0 - 5000 }), T0 + 100);
    expect(fleet.metricsAge(pod, T0 + 600)).toBe(500);
    expect(fleet.isFresh(pod, T0 + 1100)).toBe(true);
    expect(fleet.isFresh(pod, T0 + 1101)).toBe(false);
  });

  it('counts rejected messages without touching the view', () => {
    const fleet = new Fleet();
    fleet.recordRejected();
    fleet.recordRejected();
    expect(fleet.counters).toEqual({
      applied: 0,
      ignored: 0,
      rejected: 2,
      future: 0,
      overCapacity: 0,
      tooManyZones: 0,
      addressConflict: 0,
    });
    expect([...fleet.poolNames()]).toEqual([]);
  });
});

describe('hostile input', () => {
  it('rejects an event dated more than maxClockSkewMs after its receive time, so it cannot pin a pod', () => {
    const fleet = new Fleet({ maxClockSkewMs: 5000 });
    fleet.apply(readiness('p'), T0);
    // A forged readiness from the year 275,000 (the schema's largest date), and one just over the skew.
    expect(fleet.apply(readiness('p', { ready: false, observedAt: 8.64e15 }), T0)).toBe('future');
    expect(fleet.apply(metrics('p', { waitingRequests: 50, observedAt: T0 + 5001 }), T0)).toBe('future');
    // Exactly at the limit is accepted: a source clock a little ahead is normal.
    expect(fleet.apply(metrics('p', { waitingRequests: 2, observedAt: T0 + 5000 }), T0)).toBe('applied');
    expect(fleet.get('llama', 'zone-a', 'p')?.ready).toBe(true);
    // Later true events still apply: nothing was pinned.
    expect(fleet.apply(readiness('p', { ready: false, observedAt: T0 + 10 }), T0 + 10)).toBe('applied');
    expect(fleet.get('llama', 'zone-a', 'p')?.ready).toBe(false);
    // A future event for an unknown pod creates nothing.
    expect(fleet.apply(readiness('ghost', { observedAt: T0 + 60_000 }), T0)).toBe('future');
    expect(fleet.get('llama', 'zone-a', 'ghost')).toBeUndefined();
    expect(fleet.counters).toMatchObject({ applied: 3, future: 3 });
  });

  it('ignores kv snapshots (they feed the block index): no pod record, counted as ignored; future-dated ones are refused', () => {
    const fleet = new Fleet();
    const kv = {
      v: 1,
      kind: 'kv',
      pool: 'llama',
      zone: 'zone-a',
      pod: 'p',
      observedAt: T0,
      blockSize: 16,
      seq: 3,
      keys: [1, 2, 3],
    } as const;
    expect(fleet.apply({ ...kv, keys: [...kv.keys] }, T0)).toBe('ignored');
    expect(fleet.get('llama', 'zone-a', 'p')).toBeUndefined();
    expect(fleet.pool('llama')).toBeUndefined();
    expect(fleet.apply({ ...kv, keys: [], observedAt: T0 + 60_000 }, T0)).toBe('future');
    fleet.apply(readiness('p'), T0);
    expect(fleet.apply({ ...kv, keys: [] }, T0)).toBe('ignored');
    expect(fleet.get('llama', 'zone-a', 'p')?.metrics).toBeUndefined();
    expect(fleet.counters).toMatchObject({ applied: 1, ignored: 2, future: 1 });
  });

  it('holds at most maxPodsPerZone pods per zone: a full zone forgets its oldest tombstone, else refuses new pods', () => {
    const fleet = new Fleet({ maxPodsPerZone: 3 });
    for (const pod of ['a', 'b', 'c']) expect(fleet.apply(readiness(pod), T0)).toBe('applied');
    // Full of live pods: a new pod (readiness or metrics) is refused; known pods still update.
    expect(fleet.apply(readiness('d'), T0)).toBe('over-capacity');
    expect(fleet.apply(metrics('d'), T0)).toBe('over-capacity');
    expect(fleet.apply(metrics('a', { waitingRequests: 4 }), T0)).toBe('applied');
    expect(fleet.get('llama', 'zone-a', 'd')).toBeUndefined();
    // Other zones have their own room.
    expect(fleet.apply(readiness('d', { zone: 'zone-b', address: '10.0.1.1:8000' }), T0)).toBe('applied');
    // Deleting frees room: the oldest tombstone goes first.
    fleet.apply(readiness('a', { deleted: true, ready: false, observedAt: T0 + 1 }), T0 + 1);
    fleet.apply(readiness('b', { deleted: true, ready: false, observedAt: T0 + 2 }), T0 + 2);
    expect(fleet.apply(readiness('d', { observedAt: T0 + 3 }), T0 + 3)).toBe('applied');
    expect(fleet.get('llama', 'zone-a', 'a')).toBeUndefined();
    expect(fleet.get('llama', 'zone-a', 'b')?.deleted).toBe(true);
    // A flood of tombstones for pods never seen stays within the cap: each replaces the oldest.
    for (let i = 0; i < 1000; i++)
      fleet.apply(readiness(`fake-${i}`, { deleted: true, ready: false, observedAt: T0 + 10 + i }), T0 + 10 + i);
    expect(
      [...(fleet.pool('llama')?.endpoints() ?? [])]
        .filter((e) => e.zone === 'zone-a')
        .map((e) => e.pod)
        .sort(),
    ).toEqual(['c', 'd', 'fake-999']);
    expect(fleet.pool('llama')?.readyCount).toBe(3);
    expect(fleet.counters.overCapacity).toBe(2);
  });

  it('keeps a tombstone a request still holds, and refuses the new pod instead', () => {
    const fleet = new Fleet({ maxPodsPerZone: 1 });
    fleet.apply(readiness('a'), T0);
    const a = fleet.get('llama', 'zone-a', 'a');
    if (!a) throw new Error('pod missing');
    const held = pick(fleet, a, T0);
    fleet.apply(readiness('a', { deleted: true, ready: false, observedAt: T0 + 1 }), T0 + 1);
    expect(fleet.apply(readiness('b', { observedAt: T0 + 2 }), T0 + 2)).toBe('over-capacity');
    fleet.releaseCharge(held);
    expect(fleet.apply(readiness('b', { observedAt: T0 + 3 }), T0 + 3)).toBe('applied');
  });
});

describe('an address belongs to one zone', () => {
  const X = '10.0.2.7:8000';
  const realB = readiness('b1', { zone: 'zone-b', address: X, observedAt: T0 });
  const forgedA = readiness('forged', { zone: 'zone-a', address: X, observedAt: T0 + 1 });
  const view = (fleet: Fleet) => {
    const pool = fleet.pool('llama');
    return {
      at: pool?.routableAt(X).map((e) => `${e.zone}/${e.pod}`) ?? [],
      a: [...(pool?.readyInZone('zone-a') ?? [])].map((e) => e.pod),
      b: [...(pool?.readyInZone('zone-b') ?? [])].map((e) => e.pod),
      onIp: pool?.routableOnIp('10.0.2.7').length ?? 0,
    };
  };

  it("refuses another zone's claim of an address, in this EPP's zone's favour, whichever comes first; counted", () => {
    for (const order of [
      [realB, forgedA],
      [forgedA, realB],
    ]) {
      const fleet = new Fleet({ localZone: 'zone-b' });
      const outcomes = order.map((event) => fleet.apply(event, T0 + 2));
      expect(outcomes[1]).toBe('address-conflict');
      expect(view(fleet)).toEqual({ at: ['zone-b/b1'], a: [], b: ['b1'], onIp: 1 });
      expect(fleet.get('llama', 'zone-a', 'forged')).toMatchObject({ ready: true, addressConflict: true });
      expect(fleet.counters).toMatchObject({ applied: 2, addressConflict: 1 });
    }
  });

  it('with neither claimant in its zone, an EPP routes to neither (never merged, whatever the order)', () => {
    for (const order of [
      [realB, forgedA],
      [forgedA, realB],
    ]) {
      const fleet = new Fleet({ localZone: 'zone-c' });
      for (const event of order) fleet.apply(event, T0 + 2);
      expect(view(fleet)).toEqual({ at: [], a: [], b: [], onIp: 0 });
      expect(fleet.pool('llama')?.readyCount).toBe(0);
    }
  });

  it('a view held for no zone (spillway-xds settles per gateway zone) keeps every claimant routable, marked and counted', () => {
    const fleet = new Fleet();
    fleet.apply(realB, T0 + 2);
    expect(fleet.apply(forgedA, T0 + 2)).toBe('address-conflict');
    expect(view(fleet).at.sort()).toEqual(['zone-a/forged', 'zone-b/b1']);
    expect(fleet.get('llama', 'zone-b', 'b1')?.addressConflict).toBe(true);
    expect(fleet.counters.addressConflict).toBe(1);
    fleet.apply(readiness('forged', { ...forgedA, deleted: true, ready: false, observedAt: T0 + 3 }), T0 + 3);
    expect(fleet.get('llama', 'zone-b', 'b1')?.addressConflict).toBe(false);
  });

  it('the conflict ends with the claim: a tombstone, a new address or not-ready gives the address back at once', () => {
    for (const end of [
      { deleted: true, ready: false },
      { address: '10.0.1.9:8000' },
      { ready: false },
    ] satisfies Partial<ReadinessEvent>[]) {
      const fleet = new Fleet({ localZone: 'zone-c' });
      fleet.apply(realB, T0 + 2);
      fleet.apply(forgedA, T0 + 2);
      expect(view(fleet).at).toEqual([]);
      expect(fleet.apply(readiness('forged', { ...forgedA, ...end, observedAt: T0 + 3 }), T0 + 3)).toBe('applied');
      expect(view(fleet).at).toEqual(['zone-b/b1']);
      expect(fleet.get('llama', 'zone-b', 'b1')?.addressConflict).toBe(false);
    }
  });

  it('pods of one zone still share an address (a stale pod and its successor); a re-published conflicting claim is counted again', () => {
    const fleet = new Fleet({ localZone: 'zone-a' });
    fleet.apply(readiness('old', { address: X }), T0);
    expect(fleet.apply(readiness('new', { address: X }), T0)).toBe('applied');
    expect(view(fleet).at.sort()).toEqual(['zone-a/new', 'zone-a/old']);
    expect(fleet.apply(readiness('b1', { zone: 'zone-b', address: X }), T0)).toBe('address-conflict');
    expect(fleet.apply(readiness('b1', { zone: 'zone-b', address: X, observedAt: T0 + 30_000 }), T0 + 30_000)).toBe('address-conflict');
    expect(view(fleet).at.sort()).toEqual(['zone-a/new', 'zone-a/old']);
    expect(fleet.counters.addressConflict).toBe(2);
  });
});

describe('zones per pool', () => {
  it('holds at most maxZonesPerPool zones: a pod of a further zone is refused, counted; a zone whose pods are all forgotten frees its place', () => {
    const fleet = new Fleet({ maxZonesPerPool: 3 });
    const zoned = (zone: string, overrides: Partial<ReadinessEvent> = {}) =>
      readiness('p', { zone, address: `10.${zone.length}.${zone.charCodeAt(zone.length - 1)}.1:8000`, ...overrides });
    for (const zone of ['z0', 'z1', 'z2']) expect(fleet.apply(zoned(zone), T0)).toBe('applied');
    expect(fleet.apply(zoned('z3'), T0)).toBe('too-many-zones');
    expect(fleet.apply(metrics('p', { zone: 'z3' }), T0)).toBe('too-many-zones');
    expect(fleet.get('llama', 'z3', 'p')).toBeUndefined();
    // Known zones still take new pods, and other pools have their own room.
    expect(fleet.apply(readiness('q', { zone: 'z1', address: '10.9.9.9:8000' }), T0)).toBe('applied');
    expect(fleet.apply(zoned('z3', { pool: 'mistral' }), T0)).toBe('applied');
    // 2,000 zone names: still three zones, the rest counted.
    for (let i = 0; i < 2000; i++) fleet.apply(zoned(`flood-${i}`), T0);
    expect([...(fleet.pool('llama')?.readyZones() ?? [])].sort()).toEqual(['z0', 'z1', 'z2']);
    expect(fleet.counters.tooManyZones).toBe(2002);
    // z0's only pod is deleted and its tombstone pruned: z0 is gone, and its place is free.
    fleet.apply(zoned('z0', { deleted: true, ready: false, observedAt: T0 + 1 }), T0 + 1);
    expect(fleet.pruneDeleted(T0 + 2)).toBe(1);
    expect(fleet.apply(zoned('z3', { observedAt: T0 + 3 }), T0 + 3)).toBe('applied');
  });
});

describe('in-flight accounting', () => {
  it('counts picks until they complete, and on top of samples that cannot have seen them', () => {
    const fleet = new Fleet({ pickTransitMs: 2, maxSampleLagMs: 500 });
    fleet.apply(readiness('p'), T0);
    fleet.apply(metrics('p', { observedAt: T0 }), T0);
    const pod = fleet.get('llama', 'zone-a', 'p');
    if (!pod) throw new Error('pod missing');
    const first = pick(fleet, pod, T0 + 10);
    const second = pick(fleet, pod, T0 + 20);
    const third = pick(fleet, pod, T0 + 30);
    expect(pod.inFlight).toBe(3);
    expect(pod.unsampledPicks).toBe(3);
    // A sample observed at T0+25 saw the picks made up to T0+23 (2 ms transit).
    fleet.apply(metrics('p', { observedAt: T0 + 25, runningRequests: 2 }), T0 + 26);
    expect(pod.unsampledPicks).toBe(1);
    expect(pod.inFlight).toBe(3);
    // Completing the unsampled pick removes it from both counts; a sampled one only from in-flight.
    fleet.releaseCharge(third);
    expect(pod.unsampledPicks).toBe(0);
    fleet.releaseCharge(first);
    expect(pod.inFlight).toBe(1);
    fleet.releaseCharge(second);
    fleet.releaseCharge(second); // a double release never goes negative
    expect(pod.inFlight).toBe(0);
  });

  it('absorbs picks by receive time when the source clock runs behind', () => {
    const fleet = new Fleet({ pickTransitMs: 2, maxSampleLagMs: 500 });
    fleet.apply(readiness('p'), T0);
    const pod = fleet.get('llama', 'zone-a', 'p');
    if (!pod) throw new Error('pod missing');
    pick(fleet, pod, T0 + 100);
    // The source stamps samples 10 s in the past, but a sample received 1 s after the pick saw it.
    fleet.apply(metrics('p', { observedAt: T0 - 10_000 }), T0 + 1100);
    expect(pod.unsampledPicks).toBe(0);
  });

  it('keeps the unsampled suffix short under long bursts', () => {
    const fleet = new Fleet({ maxChargesPerEndpoint: 20_000 });
    fleet.apply(readiness('p'), T0);
    const pod = fleet.get('llama', 'zone-a', 'p');
    if (!pod) throw new Error('pod missing');
    for (let i = 0; i < 10_000; i++) {
      pick(fleet, pod, T0 + i);
      if (i % 10 === 9) fleet.apply(metrics('p', { observedAt: T0 + i - 5, runningRequests: i + 1 }), T0 + i);
    }
    expect(pod.unsampledPicks).toBeLessThan(10);
    expect(pod.inFlight).toBe(10_000);
  });
});

describe("another EPP's picks, learnt later (shared state)", () => {
  it('count like local picks: unsampled until a sample postdates them, in time order', () => {
    const fleet = new Fleet({ pickTransitMs: 2, maxSampleLagMs: 500 });
    fleet.apply(readiness('p'), T0);
    fleet.apply(metrics('p', { observedAt: T0 }), T0);
    const pod = fleet.get('llama', 'zone-a', 'p')!;
    pick(fleet, pod, T0 + 30, 10);
    // Learnt after the local pick at T0+30 but made before it: placed before it.
    pick(fleet, pod, T0 + 20, 10);
    pick(fleet, pod, T0 + 40, 10);
    expect(pod.inFlight).toBe(3);
    expect(pod.unsampledPicks).toBe(3);
    // The list stays in time order, so the backlog is worked off as the picks were made: 10 ms
    // each at 1 ms per token, from T0+20 to T0+30, T0+30 to T0+40, T0+40 to T0+50.
    const ahead = { ms: 0, tokens: 0 };
    expect(fleet.prefillAhead(pod, T0 + 40, { horizonMs: 1000, maxCharges: 10 }, tokensOnly(1), ahead)).toBeCloseTo(10, 6);
    // A sample observed at T0+25 covers the pick made at T0+20 only.
    fleet.apply(metrics('p', { observedAt: T0 + 25, runningRequests: 1 }), T0 + 26);
    expect(pod.unsampledPicks).toBe(2);
    // A pick learnt after a sample that postdates it is already in that sample: in flight only.
    pick(fleet, pod, T0 + 10);
    expect(pod.unsampledPicks).toBe(2);
    expect(pod.inFlight).toBe(4);
  });

  it('a release the latest sample postdates is not counted again; a later one is; forgetting says nothing finished', () => {
    const fleet = new Fleet({ pickTransitMs: 2, maxSampleLagMs: 500 });
    fleet.apply(readiness('p'), T0);
    fleet.apply(metrics('p', { observedAt: T0 }), T0);
    const pod = fleet.get('llama', 'zone-a', 'p')!;
    const first = pick(fleet, pod, T0 + 10);
    const second = pick(fleet, pod, T0 + 11);
    const third = pick(fleet, pod, T0 + 12);
    fleet.apply(metrics('p', { observedAt: T0 + 100, runningRequests: 3 }), T0 + 100);
    expect(pod.unsampledPicks).toBe(0);
    // Finished at T0+50, before the sample at T0+100 (which no longer showed it): nothing to correct.
    fleet.releaseCharge(first, T0 + 50);
    expect(pod.releasedSinceSample).toBe(0);
    // Finished after the sample: the sample over-reports by one.
    fleet.releaseCharge(second, T0 + 150);
    expect(pod.releasedSinceSample).toBe(1);
    // Forgotten (its release was lost): no longer in flight, and not taken as finished.
    fleet.forgetCharge(third);
    expect(pod.releasedSinceSample).toBe(1);
    expect(pod.inFlight).toBe(0);
    // An unsampled pick forgotten stops loading the endpoint at once.
    const late = pick(fleet, pod, T0 + 200);
    expect(pod.unsampledPicks).toBe(1);
    fleet.forgetCharge(late);
    expect(pod.unsampledPicks).toBe(0);
    expect(pod.inFlight).toBe(0);
  });
});

describe('what event gaps need (picking v2)', () => {
  it('counts completions of sampled requests since the latest sample; a new sample resets them', () => {
    const { fleet, a0 } = onePod();
    const sampled = pick(fleet, a0, T0 + 10); // after the sample: unsampled
    pick(fleet, a0, T0 + 11);
    fleet.apply(metrics('a0', { observedAt: T0 + 100, runningRequests: 2 }), T0 + 100); // sees both
    expect(a0.unsampledPicks).toBe(0);
    const unsampled = pick(fleet, a0, T0 + 120); // unsampled again
    fleet.releaseCharge(sampled); // sampled: the sample over-reports by one now
    fleet.releaseCharge(unsampled); // unsampled: just leaves the unsampled count
    expect(a0.releasedSinceSample).toBe(1);
    expect(a0.unsampledPicks).toBe(0);
    fleet.apply(metrics('a0', { observedAt: T0 + 200, runningRequests: 1 }), T0 + 200);
    expect(a0.releasedSinceSample).toBe(0);
  });

  it('records when readiness and samples were received, per pod and per zone', () => {
    const fleet = new Fleet();
    const pool = () => fleet.pool('llama')!;
    fleet.apply(readiness('a0'), T0 + 5);
    fleet.apply(readiness('a1', { address: '10.0.0.2:8000', observedAt: T0 + 50 }), T0 + 60);
    expect(fleet.get('llama', 'zone-a', 'a0')?.readinessReceivedAt).toBe(T0 + 5);
    expect(pool().zoneLastReadinessAt('zone-a')).toBe(T0 + 60);
    expect(pool().zoneLastSampleAt('zone-a')).toBe(Number.NEGATIVE_INFINITY);
    fleet.apply(metrics('a0', { observedAt: T0 + 70 }), T0 + 80);
    fleet.apply(metrics('a1', { observedAt: T0 + 60 }), T0 + 75); // received earlier: the zone keeps the newest
    expect(pool().zoneLastSampleAt('zone-a')).toBe(T0 + 80);
    expect(pool().zoneLastSampleAt('zone-b')).toBe(Number.NEGATIVE_INFINITY);
    // An ignored (older) readiness does not refresh the pod's receive time.
    fleet.apply(readiness('a0', { observedAt: T0 - 1 }), T0 + 500);
    expect(fleet.get('llama', 'zone-a', 'a0')?.readinessReceivedAt).toBe(T0 + 5);
  });

  it("learns a pod's batch size from samples taken while its queue persisted at its largest batch", () => {
    const fleet = new Fleet();
    fleet.apply(readiness('a0'), T0);
    const at = (i: number, waiting: number, running: number) =>
      fleet.apply(metrics('a0', { observedAt: T0 + i, waitingRequests: waiting, runningRequests: running }), T0 + i);
    at(1, 1, 20); // one sample with a queue: requests between two steps, nothing learnt
    const a0 = fleet.get('llama', 'zone-a', 'a0')!;
    expect([a0.queuedSamples, a0.batchCapacity]).toEqual([1, undefined]);
    at(2, 0, 30);
    at(3, 2, 25); // a queue again, but below the largest batch seen: not full
    at(4, 1, 25);
    expect([a0.queuedSamples, a0.batchCapacity, a0.maxRunningSeen]).toEqual([2, undefined, 30]);
    at(5, 3, 32);
    at(6, 4, 32); // persisted at the largest batch: full at 32
    expect([a0.queuedSamples, a0.batchCapacity]).toEqual([4, 32]);
    at(7, 0, 36); // more running later: the batch holds more
    expect([a0.queuedSamples, a0.batchCapacity]).toEqual([0, 36]);
  });

  it('works off the prefill of recent charges one after the other, from when each was charged', () => {
    const { fleet, a0 } = onePod();
    const ahead = { ms: 0, tokens: 0 };
    const limits = { horizonMs: 1000, maxCharges: 256 };
    expect(fleet.prefillAhead(a0, T0, limits, tokensOnly(0.05), ahead)).toBe(0);
    // 1,000 tokens at T0 + 10 (done at T0 + 60 at 0.05 ms per token), 2,000 at T0 + 40: it starts
    // when the first is done, so it is done at T0 + 160.
    pick(fleet, a0, T0 + 10, 1000);
    pick(fleet, a0, T0 + 40, 2000);
    expect(fleet.prefillAhead(a0, T0 + 40, limits, tokensOnly(0.05), ahead)).toBeCloseTo(120, 6);
    expect(ahead.tokens).toBeCloseTo(2400, 6);
    expect(fleet.prefillAhead(a0, T0 + 100, limits, tokensOnly(0.05), ahead)).toBeCloseTo(60, 6);
    // An idle gap: a charge made after the earlier work is done starts at its own time.
    pick(fleet, a0, T0 + 500, 100);
    expect(fleet.prefillAhead(a0, T0 + 500, limits, tokensOnly(0.05), ahead)).toBeCloseTo(5, 6);
    expect(fleet.prefillAhead(a0, T0 + 600, limits, tokensOnly(0.05), ahead)).toBe(0);
    // A charge without prompt work (a cached prompt) adds nothing and hides nothing before it.
    pick(fleet, a0, T0 + 601, 0);
    pick(fleet, a0, T0 + 602, 0);
    expect(fleet.prefillAhead(a0, T0 + 602, limits, tokensOnly(0.05), ahead)).toBe(0);
    // The horizon and the count bound what is read: beyond them, the work is taken as done.
    pick(fleet, a0, T0 + 700, 10_000);
    expect(fleet.prefillAhead(a0, T0 + 701, limits, tokensOnly(0.05), ahead)).toBeCloseTo(499, 6);
    expect(fleet.prefillAhead(a0, T0 + 701, { horizonMs: 0.5, maxCharges: 256 }, tokensOnly(0.05), ahead)).toBe(0);
    pick(fleet, a0, T0 + 702, 0);
    expect(fleet.prefillAhead(a0, T0 + 702, { horizonMs: 1000, maxCharges: 1 }, tokensOnly(0.05), ahead)).toBe(0);
    expect(fleet.prefillAhead(a0, T0 + 702, { horizonMs: 1000, maxCharges: 2 }, tokensOnly(0.05), ahead)).toBeCloseTo(498, 6);
  });

  it('prices each charge’s attention: n² · msPerToken / (2 · attentionTokens) on top of its linear work', () => {
    const { fleet, a0 } = onePod();
    const ahead = { ms: 0, tokens: 0 };
    const limits = { horizonMs: 10_000, maxCharges: 256 };
    // A 12,000-token document at 0.05 ms per token: 600 ms linear, plus 12,000² · 0.05 / (2 · 24,000) = 150 ms.
    pick(fleet, a0, T0, 12_000);
    expect(fleet.prefillAhead(a0, T0, limits, tokensOnly(0.05), ahead)).toBeCloseTo(600, 6);
    expect(fleet.prefillAhead(a0, T0, limits, { ...tokensOnly(0.05), attentionTokens: 24_000 }, ahead)).toBeCloseTo(750, 6);
    expect(ahead.tokens).toBeCloseTo(15_000, 6);
    // A chat message behind it barely adds attention: 200 · 0.05 + 200² · 0.05 / 48,000 ≈ 10.04 ms.
    pick(fleet, a0, T0 + 100, 200);
    expect(fleet.prefillAhead(a0, T0 + 100, limits, { ...tokensOnly(0.05), attentionTokens: 24_000 }, ahead)).toBeCloseTo(
      750 + 10 + 40_000 / 960_000 - 100,
      3,
    );
  });

  it('adds a step for each chunk of a charge’s prompt: the step’s overhead and decodes it waits out too', () => {
    const { fleet, a0 } = onePod();
    const ahead = { ms: 0, tokens: 0 };
    const limits = { horizonMs: 10_000, maxCharges: 256 };
    const rate = { msPerToken: 0.05, attentionTokens: 0, stepMs: 10, chunkTokens: 4096 };
    // A 300-token chat prompt: 15 ms of tokens and one step of 10 ms.
    pick(fleet, a0, T0, 300);
    expect(fleet.prefillAhead(a0, T0, limits, rate, ahead)).toBeCloseTo(25, 6);
    expect(ahead.tokens).toBeCloseTo(500, 6);
    // A cached prompt still takes its step; a 10,000-token document three (4,096 tokens a step).
    pick(fleet, a0, T0 + 1, 0);
    pick(fleet, a0, T0 + 2, 10_000);
    expect(fleet.prefillAhead(a0, T0 + 2, limits, rate, ahead)).toBeCloseTo(25 + 10 + 500 + 30 - 2, 6);
    // Exactly one chunk is one step; a step of 0 prices the tokens alone.
    pick(fleet, a0, T0 + 1000, 4096);
    expect(fleet.prefillAhead(a0, T0 + 1000, limits, rate, ahead)).toBeCloseTo(4096 * 0.05 + 10, 3);
    expect(fleet.prefillAhead(a0, T0 + 1000, limits, { ...rate, stepMs: 0 }, ahead)).toBeCloseTo(4096 * 0.05, 3);
  });

  it('prices the latest sample’s queue by the prefills of the newest charges it covers, however old', () => {
    const { fleet, a0 } = onePod();
    const ahead = { ms: 0, tokens: 0 };
    const limits = { horizonMs: 1000, maxCharges: 256 };
    const rate = tokensOnly(0.05);
    // Two documents charged long before the horizon: on their own they count as done.
    pick(fleet, a0, T0 + 1, 4000);
    pick(fleet, a0, T0 + 10, 6000);
    const sampleAt = (waiting: number) => fleet.apply(metrics('a0', { observedAt: T0 + 2000, waitingRequests: waiting }), T0 + 2000);
    sampleAt(0);
    expect(fleet.prefillAhead(a0, T0 + 2100, limits, rate, ahead)).toBe(0);
    // A sample (covering up to T0 + 1998) shows both still waiting: 500 ms of prefill from then on.
    sampleAt(2);
    expect(fleet.prefillAhead(a0, T0 + 2100, limits, rate, ahead)).toBeCloseTo(398, 3);
    // A request charged since comes after them: 50 ms more.
    pick(fleet, a0, T0 + 2050, 1000);
    expect(fleet.prefillAhead(a0, T0 + 2100, limits, rate, ahead)).toBeCloseTo(448, 3);
    // One waiting: the newest covered charge only (first come, first served: the older one runs).
    fleet.apply(metrics('a0', { observedAt: T0 + 2001, waitingRequests: 1 }), T0 + 2001);
    expect(fleet.prefillAhead(a0, T0 + 2100, limits, rate, ahead)).toBeCloseTo(300 + 50 - 101, 3);
    // More waiting than charges: the charges are all it knows of (the rest is priced by the queue's length).
    fleet.apply(metrics('a0', { observedAt: T0 + 2002, waitingRequests: 9 }), T0 + 2002);
    expect(fleet.prefillAhead(a0, T0 + 2100, limits, rate, ahead)).toBeCloseTo(500 + 50 - 100, 3);
  });

  it('counts `queueHead` of the request being served ahead of a sampled queue, however old its charge', () => {
    const { fleet, a0 } = onePod();
    const ahead = { ms: 0, tokens: 0 };
    const rate = tokensOnly(0.05);
    const limits = (queueHead: number) => ({ horizonMs: 1000, maxCharges: 256, queueHead });
    // A document (500 ms of prefill), then two chats (50 ms each), all charged long before the horizon.
    pick(fleet, a0, T0 + 1, 10_000);
    pick(fleet, a0, T0 + 10, 1000);
    pick(fleet, a0, T0 + 20, 1000);
    // No queue: nothing says the document is still being served.
    fleet.apply(metrics('a0', { observedAt: T0 + 2000, waitingRequests: 0 }), T0 + 2000);
    expect(fleet.prefillAhead(a0, T0 + 2100, limits(0.5), rate, ahead)).toBe(0);
    // The two chats waiting (the sample covers up to T0 + 1998): the document ahead of them was
    // prefilling then, half of its work still to do — 250 + 100 ms from then on.
    fleet.apply(metrics('a0', { observedAt: T0 + 2001, waitingRequests: 2 }), T0 + 2001);
    expect(fleet.prefillAhead(a0, T0 + 2100, limits(0.5), rate, ahead)).toBeCloseTo(1999 + 350 - 2100, 3);
    expect(fleet.prefillAhead(a0, T0 + 2100, limits(1), rate, ahead)).toBeCloseTo(1999 + 600 - 2100, 3);
    expect(fleet.prefillAhead(a0, T0 + 2100, limits(0), rate, ahead)).toBe(0);
    expect(fleet.prefillAhead(a0, T0 + 2100, { horizonMs: 1000, maxCharges: 256 }, rate, ahead)).toBe(0);
    // One waiting: the newest chat is the queue and the older chat the one served (25 ms of it left):
    // 75 ms from T0 + 2000, done by T0 + 2100; at T0 + 2050, 25 ms to go.
    fleet.apply(metrics('a0', { observedAt: T0 + 2002, waitingRequests: 1 }), T0 + 2002);
    expect(fleet.prefillAhead(a0, T0 + 2100, limits(0.5), rate, ahead)).toBe(0);
    expect(fleet.prefillAhead(a0, T0 + 2050, limits(0.5), rate, ahead)).toBeCloseTo(25, 3);
    // As many waiting as charges: no charge is known to be ahead of them.
    fleet.apply(metrics('a0', { observedAt: T0 + 2003, waitingRequests: 3 }), T0 + 2003);
    expect(fleet.prefillAhead(a0, T0 + 2100, limits(0.5), rate, ahead)).toBeCloseTo(2001 + 600 - 2100, 3);
  });

  it('with the sample’s queue the backlog is a FIFO server that held the queue at the sample (property)', () => {
    fc.assert(
      fc.property(
        fc.array(fc.record({ gap: fc.integer({ min: 0, max: 300 }), tokens: fc.integer({ min: 0, max: 20_000 }) }), { maxLength: 8 }),
        fc.array(fc.record({ gap: fc.integer({ min: 1, max: 300 }), tokens: fc.integer({ min: 0, max: 20_000 }) }), { maxLength: 5 }),
        fc.integer({ min: 0, max: 6 }),
        fc.integer({ min: 0, max: 3000 }),
        fc.record({ attentionTokens: fc.constantFrom(0, 23_000), stepMs: fc.constantFrom(0, 7), queueHead: fc.constantFrom(0, 0.5, 1) }),
        (before, after, waiting, later, { attentionTokens, stepMs, queueHead }) => {
          const { fleet, a0 } = onePod();
          const workOf = (tokens: number) =>
            tokens * 0.05 +
            (attentionTokens > 0 ? (tokens * tokens * 0.05) / (2 * attentionTokens) : 0) +
            Math.max(1, Math.ceil(tokens / 8192)) * stepMs;
          // The plain version: a FIFO server, run forward in time.
          let at = T0 + 10;
          let busyUntil = Number.NEGATIVE_INFINITY;
          const covered: number[] = [];
          for (const { gap, tokens } of before) {
            at += gap;
            pick(fleet, a0, at, tokens);
            covered.push(tokens);
            busyUntil = Math.max(busyUntil, at) + workOf(tokens);
          }
          const observedAt = at + 5;
          fleet.apply(metrics('a0', { observedAt, waitingRequests: waiting }), observedAt);
          const sampledUntil = (a0 as unknown as { sampledUntil: number }).sampledUntil;
          // At the sample, the newest `waiting` covered requests have not started their prefill, and
          // the one before them (if any) was being served, `queueHead` of its work still to do.
          const first = Math.max(0, covered.length - waiting);
          let queue = covered.slice(first).reduce((sum, tokens) => sum + workOf(tokens), 0);
          if (queue > 0 && first > 0) queue += queueHead * workOf(covered[first - 1] as number);
          if (queue > 0) busyUntil = Math.max(busyUntil, sampledUntil + queue);
          at = observedAt;
          for (const { gap, tokens } of after) {
            at += gap;
            pick(fleet, a0, at, tokens);
            busyUntil = Math.max(busyUntil, at) + workOf(tokens);
          }
          const now = at + later;
          const got = fleet.prefillAhead(
            a0,
            now,
            { horizonMs: 1e9, maxCharges: 256, queueHead },
            { msPerToken: 0.05, attentionTokens, stepMs, chunkTokens: 8192 },
            { ms: 0, tokens: 0 },
          );
          expect(got).toBeCloseTo(Math.max(0, busyUntil - now), 2);
        },
      ),
    );
  });

  it('with attention the backlog is the FIFO finish of each charge’s own work (property)', () => {
    fc.assert(
      fc.property(
        fc.array(fc.record({ gap: fc.integer({ min: 0, max: 400 }), tokens: fc.integer({ min: 0, max: 30_000 }) }), {
          minLength: 1,
          maxLength: 12,
        }),
        fc.integer({ min: 0, max: 1500 }),
        fc.constantFrom(0, 8_000, 23_000),
        fc.constantFrom(0, 9),
        fc.constantFrom(512, 8192),
        (charges, after, attentionTokens, stepMs, chunkTokens) => {
          const { fleet, a0 } = onePod();
          // The plain version: a FIFO server working each charge's prefill in turn, a step per chunk of it.
          let at = T0;
          let busyUntil = Number.NEGATIVE_INFINITY;
          for (const { gap, tokens } of charges) {
            at += gap;
            pick(fleet, a0, at, tokens);
            let steps = 1;
            while (steps * chunkTokens < tokens) steps++;
            const work = tokens * 0.05 + (attentionTokens > 0 ? (tokens * tokens * 0.05) / (2 * attentionTokens) : 0) + steps * stepMs;
            busyUntil = Math.max(busyUntil, at) + work;
          }
          const now = at + after;
          const ahead = { ms: 0, tokens: 0 };
          const got = fleet.prefillAhead(
            a0,
            now,
            { horizonMs: 1e9, maxCharges: 256 },
            { msPerToken: 0.05, attentionTokens, stepMs, chunkTokens },
            ahead,
          );
          expect(got).toBeCloseTo(Math.max(0, busyUntil - now), 2);
        },
      ),
    );
  });

  it('keeps the measured service rates of the latest sample', () => {
    const fleet = new Fleet();
    const rates = { windowMs: 2000, promptTokensPerS: 1000, generationTokensPerS: 500, requestsPerS: 4, ttftMs: 120 };
    fleet.apply(metrics('a0', { rates }), T0);
    expect(fleet.get('llama', 'zone-a', 'a0')?.metrics?.rates).toEqual(rates);
    fleet.apply(metrics('a0', { observedAt: T0 + 1 }), T0 + 1);
    expect(fleet.get('llama', 'zone-a', 'a0')?.metrics?.rates).toBeUndefined();
  });
});

describe('order independence (property)', () => {
  const pods = ['p0', 'p1', 'p2', 'p.3'];
  const zones = ['zone-a', 'zone-b'];
  const eventArb: fc.Arbitrary<SpillwayEvent> = fc.oneof(
    fc.record({
      v: fc.constant(1 as const),
      kind: fc.constant('readiness' as const),
      pool: fc.constantFrom('llama', 'mistral'),
      zone: fc.constantFrom(...zones),
      region: fc.option(fc.constantFrom('r1', 'r2'), { nil: undefined }),
      pod: fc.constantFrom(...pods),
      address: fc.constantFrom('10.0.0.1:8000', '10.0.0.2:8000', '[fd00::1]:80'),
      ready: fc.boolean(),
      deleted: fc.option(fc.boolean(), { nil: undefined }),
      observedAt: fc.integer({ min: T0, max: T0 + 20 }),
    }),
    fc.record({
      v: fc.constant(1 as const),
      kind: fc.constant('metrics' as const),
      pool: fc.constantFrom('llama', 'mistral'),
      zone: fc.constantFrom(...zones),
      pod: fc.constantFrom(...pods),
      observedAt: fc.integer({ min: T0, max: T0 + 20 }),
      waitingRequests: fc.nat(20),
      runningRequests: fc.nat(20),
      kvCacheUsage: fc.double({ min: 0, max: 1, noNaN: true }),
      // Optional parts too: a tie compares the applied event as rebuilt from the view.
      lora: fc.option(
        fc.record({
          running: fc.constantFrom<string[]>([], ['a'], ['a', 'b']),
          waiting: fc.constantFrom<string[]>([], ['c']),
          max: fc.nat(4),
        }),
        { nil: undefined },
      ),
      cache: fc.option(fc.record({ blockSize: fc.constantFrom(16, 32), numBlocks: fc.nat(5) }), { nil: undefined }),
      rates: fc.option(
        fc.record({ windowMs: fc.constant(1000), promptTokensPerS: fc.nat(3), generationTokensPerS: fc.nat(3), requestsPerS: fc.nat(3) }),
        { nil: undefined },
      ),
    }),
  );

  function viewOf(events: SpillwayEvent[], localZone?: string) {
    const fleet = new Fleet({ localZone });
    for (const event of events) fleet.apply(event, T0);
    const pools = ['llama', 'mistral'].map((name) => {
      const view = fleet.pool(name);
      return {
        pods: snapshotPool(fleet, name),
        zones: view ? zones.map((z) => [...view.readyInZone(z)].map((e) => e.pod).sort()) : [],
        addresses: view
          ? ['10.0.0.1:8000', '10.0.0.2:8000', '[fd00::1]:80'].map((a) =>
              view
                .routableAt(a)
                .map((e) => e.pod)
                .sort(),
            )
          : [],
        readyCount: view?.readyCount ?? 0,
        regions: view ? zones.map((z) => view.regionOf(z)) : [],
      };
    });
    return pools;
  }

  it('any permutation of a set of events gives the view of applying them in observedAt order', () => {
    fc.assert(
      fc.property(
        fc
          .array(eventArb, { maxLength: 40 })
          .chain((events) => fc.tuple(fc.constant(events), fc.shuffledSubarray(events, { minLength: events.length }))),
        ([events, shuffled]) => {
          const ordered = [...events].sort((a, b) => a.observedAt - b.observedAt);
          // Pods of both zones claim the same addresses: which are routable is settled by the claims, not their order.
          expect(viewOf(shuffled)).toEqual(viewOf(ordered));
          expect(viewOf(shuffled, 'zone-b')).toEqual(viewOf(ordered, 'zone-b'));
        },
      ),
      { numRuns: 500 },
    );
  });

  it('settles a tie on every field of a metrics event, whichever arrives first', () => {
    const full: MetricsEvent = {
      v: 1,
      kind: 'metrics',
      pool: 'llama',
      zone: 'zone-a',
      pod: 'p',
      observedAt: T0,
      waitingRequests: 1,
      runningRequests: 2,
      kvCacheUsage: 0.5,
      lora: { running: ['a'], waiting: [], max: 4 },
      cache: { blockSize: 16, numBlocks: 100 },
      rates: { windowMs: 1000, promptTokensPerS: 10, generationTokensPerS: 5, requestsPerS: 1, ttftMs: 20 },
    };
    // The view rebuilds the applied event from what it keeps: that must be every field there is.
    expect(Object.keys(full).sort()).toEqual(Object.keys(metricsEventSchema.shape).sort());
    const variants = [
      { ...full, rates: { ...full.rates!, ttftMs: 21 } },
      { ...full, lora: { ...full.lora!, max: 5 } },
      { ...full, cache: undefined },
    ];
    for (const other of variants) {
      const views = [
        [full, other],
        [other, full],
      ].map((order) => {
        const fleet = new Fleet();
        for (const event of order) fleet.apply(event as SpillwayEvent, T0);
        return snapshotPool(fleet, 'llama');
      });
      expect(views[0]).toEqual(views[1]);
    }
  });
});
