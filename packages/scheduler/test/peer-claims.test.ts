// Regression tests for the second hardening review (docs/hardening.md, second round): what another
// EPP of the pool can make this one believe, and what a decision tells about its request.
import { describe, expect, it } from 'vitest';
import type { StateBatch, StateEntry } from '@spillway/events';
import type { Fleet } from '@spillway/fleet';
import { Scheduler, type Decision, type SharedStateOptions } from '../src/index.js';
import { MAX_SEQ_AHEAD, RESYNC_AFTER } from '../src/shared-state.js';
import { buildFleet, POOL, T0, threeZones } from './fleet-fixture.js';

const LOCAL_SUBSET = ['10.0.0.1:8000', '10.0.0.2:8000', '10.0.0.3:8000'];

let fleet: Fleet;

/** Zone a's EPP over the three-zone pool (`fleet` is its view), in locality mode. */
function zoneA(options: SharedStateOptions = {}, config: Record<string, unknown> = {}): Scheduler {
  fleet = buildFleet(threeZones());
  return new Scheduler({
    fleet,
    pool: POOL,
    zone: 'a',
    region: 'r1',
    config: { subsetMode: 'locality', penaltyMs: 5000, ...config },
    shared: options,
  });
}

const batch = (zone: string, epp: string, seq: number, sentAt: number, entries: StateEntry[]): StateBatch => ({
  v: 1,
  pool: POOL,
  zone,
  epp,
  seq,
  sentAt,
  entries,
});

/** Every zone-a pod penalised for a minute, as one forged batch of a zone-b EPP said. */
const forgedPenalties = (sentAt: number): StateEntry[] => ['a0', 'a1', 'a2'].map((pod): StateEntry => [3, 'a', pod, sentAt + 60_000]);

const zonesOf = (d: Decision) => d.entries.map((e) => e.zone);

describe("a peer's penalties", () => {
  it('last at most the receiver’s penaltyMs, never the minute a forged batch asks for', () => {
    const scheduler = zoneA({ peerTimeoutMs: 600_000 });
    scheduler.shared.apply(batch('b', 'forger', 1, T0, forgedPenalties(T0)), T0);
    expect(scheduler.pick({ model: 'm', subset: LOCAL_SUBSET }, T0 + 4_999).entries[0]?.zone).not.toBe('a');
    const after = scheduler.pick({ model: 'm', subset: LOCAL_SUBSET }, T0 + 5_000);
    expect(after.entries[0]?.zone).toBe('a');
    expect(after.counts.penalised).toBe(0);
  });

  it('go with the peer that gave them, and never with another source’s', () => {
    const scheduler = zoneA({ peerTimeoutMs: 2_000 });
    // This EPP's own penalty of a1 (its primary failed) is its own: it stays.
    const failed = scheduler.pick({ model: 'm', subset: ['10.0.0.1:8000'] }, T0);
    expect(failed.entries[0]?.endpoint.pod).toBe('a0');
    scheduler.reportFailed(failed, T0);
    scheduler.shared.apply(batch('b', 'forger', 1, T0, forgedPenalties(T0)), T0);
    expect(scheduler.shared.expire(T0 + 2_001)).toMatchObject({ peersForgotten: 1 });
    const endpoint = (pod: string) => fleet.get(POOL, 'a', pod)!;
    expect(scheduler.isPenalised(endpoint('a1'), T0 + 2_002)).toBe(false);
    expect(scheduler.isPenalised(endpoint('a2'), T0 + 2_002)).toBe(false);
    expect(scheduler.isPenalised(endpoint('a0'), T0 + 2_002)).toBe(true);
    expect(scheduler.pick({ model: 'm', subset: LOCAL_SUBSET }, T0 + 2_002).counts).toMatchObject({ penalised: 1, localKept: 0 });
  });

  it('never take a zone’s last local endpoints out of its lists (locality mode, and without a subset)', () => {
    for (const subset of [LOCAL_SUBSET, undefined]) {
      const scheduler = zoneA();
      scheduler.shared.apply(batch('b', 'forger', 1, T0, forgedPenalties(T0)), T0);
      for (let i = 0; i < 30; i++) {
        const d = scheduler.pick({ model: 'm', subset }, T0 + 1 + i);
        expect(d.status).toBe('routed');
        // The list still holds a way home, ranked after every endpoint not penalised.
        expect(zonesOf(d)).toContain('a');
        expect(d.entries[0]?.zone).not.toBe('a');
        expect(d.counts.localKept).toBe(3);
        expect(d.entries.find((e) => e.zone === 'a')?.reason).toBe('local-fallback');
      }
    }
  });

  it('with penaltyFailOpen false, penalised local endpoints stay out', () => {
    const scheduler = zoneA({}, { penaltyFailOpen: false });
    scheduler.shared.apply(batch('b', 'forger', 1, T0, forgedPenalties(T0)), T0);
    const d = scheduler.pick({ model: 'm', subset: LOCAL_SUBSET }, T0 + 1);
    expect(zonesOf(d)).not.toContain('a');
    expect(d.counts.localKept).toBe(0);
  });

  it('are ignored when this EPP penalises nothing itself (penaltyMs 0)', () => {
    const scheduler = zoneA({}, { penaltyMs: 0 });
    scheduler.shared.apply(batch('b', 'forger', 1, T0, forgedPenalties(T0)), T0);
    expect(scheduler.pick({ model: 'm', subset: LOCAL_SUBSET }, T0 + 1).counts.penalised).toBe(0);
  });

  it('are not answered for in a warm-start snapshot by an EPP that only heard them', () => {
    const scheduler = zoneA();
    scheduler.shared.apply(batch('b', 'forger', 1, T0, forgedPenalties(T0)), T0);
    expect(scheduler.shared.snapshot(T0 + 1).filter((e) => e[0] === 3)).toEqual([]);
  });
});

describe('the peer table', () => {
  it('admits a restarted real EPP while made-up ids flood one zone; other zones’ peers stay', () => {
    const scheduler = zoneA({ maxPeers: 256, maxPeersPerZone: 32, peerTimeoutMs: 5_000 });
    const real = batch('c', 'epp-c-1', 1, T0, []);
    expect(scheduler.shared.apply(real, T0).outcome).toBe('applied');
    // 256 made-up ids of zone b, one empty batch a second each, for ten seconds.
    let refused = 0;
    let evicted = 0;
    for (let second = 0; second < 10; second++) {
      for (let i = 0; i < 256; i++) {
        const at = T0 + second * 1000 + i;
        const result = scheduler.shared.apply(batch('b', `fake-${i}`, second + 1, at, []), at);
        if (result.outcome !== 'applied') refused++;
        evicted += result.evicted;
      }
      // The real zone-c EPP keeps sending its heartbeat.
      scheduler.shared.apply(batch('c', 'epp-c-1', second + 2, T0 + second * 1000 + 500, []), T0 + second * 1000 + 500);
    }
    expect(refused).toBe(0);
    expect(evicted).toBeGreaterThan(0);
    expect(scheduler.shared.knowsPeer('c', 'epp-c-1')).toBe(true);
    expect(scheduler.shared.peerList().filter((p) => p.zone === 'b')).toHaveLength(32);
    // A restarted real EPP of the flooded zone and one of zone a are taken in at once.
    const now = T0 + 10_000;
    expect(scheduler.shared.apply(batch('b', 'epp-b-restarted', 1, now, [[1, 1, 'b', 'b0', now, []]]), now)).toMatchObject({
      outcome: 'applied',
      ignored: 0,
      evicted: 1,
    });
    expect(scheduler.shared.apply(batch('a', 'epp-a-restarted', 1, now, []), now).outcome).toBe('applied');
    expect(scheduler.shared.knowsPeer('b', 'epp-b-restarted')).toBe(true);
  });

  it('makes room in a full table by forgetting the silent first, then the longest silent of the fullest zone', () => {
    const scheduler = zoneA({ maxPeers: 4, maxPeersPerZone: 3, peerTimeoutMs: 5_000 });
    scheduler.shared.apply(batch('b', 'b-old', 1, T0, []), T0);
    scheduler.shared.apply(batch('b', 'b-new', 1, T0 + 4_000, []), T0 + 4_000);
    scheduler.shared.apply(batch('c', 'c-1', 1, T0 + 5_500, []), T0 + 5_500);
    scheduler.shared.apply(batch('c', 'c-2', 1, T0 + 5_600, []), T0 + 5_600);
    // b-old has been silent past the timeout: it goes, nobody else.
    expect(scheduler.shared.apply(batch('d', 'd-1', 1, T0 + 6_000, []), T0 + 6_000).evicted).toBe(1);
    expect(scheduler.shared.knowsPeer('b', 'b-old')).toBe(false);
    // Full and nobody silent: the longest-silent peer of a fullest zone goes (c-1 of c, which holds two).
    expect(scheduler.shared.apply(batch('d', 'd-2', 1, T0 + 6_100, []), T0 + 6_100).evicted).toBe(1);
    expect(
      scheduler.shared
        .peerList()
        .map((p) => p.epp)
        .sort(),
    ).toEqual(['b-new', 'c-2', 'd-1', 'd-2']);
  });

  it('keeps zones apart: a batch on zone b’s subjects naming a zone-c EPP’s id is another peer', () => {
    const scheduler = zoneA();
    scheduler.shared.apply(batch('c', 'epp-c-1', 5, T0, []), T0);
    scheduler.shared.apply(batch('b', 'epp-c-1', Number.MAX_SAFE_INTEGER, T0 + 1, []), T0 + 1);
    expect(scheduler.shared.apply(batch('c', 'epp-c-1', 6, T0 + 2, []), T0 + 2)).toMatchObject({ outcome: 'applied', gap: 0 });
  });
});

describe('sequence numbers', () => {
  it('cannot be pushed arbitrarily ahead: a forged 2^53−1 is refused and the real batches still apply', () => {
    const scheduler = zoneA();
    scheduler.shared.apply(batch('b', 'epp-b-1', 1, T0, []), T0);
    const forged = scheduler.shared.apply(batch('b', 'epp-b-1', Number.MAX_SAFE_INTEGER, T0 + 1, [[3, 'a', 'a0', T0 + 5_000]]), T0 + 1);
    expect(forged).toMatchObject({ outcome: 'sequence-jump', gap: 0 });
    for (let seq = 2; seq < 10; seq++) {
      const result = scheduler.shared.apply(
        batch('b', 'epp-b-1', seq, T0 + seq * 100, [[1, seq, 'b', 'b0', T0 + seq * 100, []]]),
        T0 + seq * 100,
      );
      expect(result).toMatchObject({ outcome: 'applied', gap: 0 });
    }
    expect(scheduler.shared.peerList()[0]?.lastSeq).toBe(9);
    expect(scheduler.pick({ model: 'm', subset: LOCAL_SUBSET }, T0 + 1_000).counts.penalised).toBe(0);
  });

  it('a push within the allowance costs the real EPP at most RESYNC_AFTER − 1 batches, then its count is taken up afresh', () => {
    const scheduler = zoneA();
    scheduler.shared.apply(batch('b', 'epp-b-1', 10, T0, []), T0);
    expect(scheduler.shared.apply(batch('b', 'epp-b-1', 10 + MAX_SEQ_AHEAD, T0 + 1, []), T0 + 1).outcome).toBe('applied');
    const outcomes: string[] = [];
    let resyncedAt = -1;
    for (let seq = 11; seq < 20; seq++) {
      const result = scheduler.shared.apply(batch('b', 'epp-b-1', seq, T0 + seq, []), T0 + seq);
      outcomes.push(result.outcome);
      if (result.resynced) resyncedAt = seq;
    }
    expect(outcomes.filter((o) => o === 'replayed')).toHaveLength(RESYNC_AFTER - 1);
    expect(resyncedAt).toBe(10 + RESYNC_AFTER);
    expect(outcomes.slice(RESYNC_AFTER - 1).every((o) => o === 'applied')).toBe(true);
  });

  it('a replay of old batches, not consecutive, never re-syncs', () => {
    const scheduler = zoneA();
    for (let seq = 1; seq <= 50; seq++) scheduler.shared.apply(batch('b', 'epp-b-1', seq, T0 + seq, []), T0 + seq);
    for (const seq of [3, 7, 3, 7, 12, 3, 40, 7]) {
      expect(scheduler.shared.apply(batch('b', 'epp-b-1', seq, T0 + 100, []), T0 + 100).outcome).toBe('replayed');
    }
    expect(scheduler.shared.peerList()[0]?.lastSeq).toBe(50);
  });

  it('a long gap in time allows a matching jump (batches that could not be sent still took their numbers)', () => {
    const scheduler = zoneA({ peerTimeoutMs: 600_000 });
    scheduler.shared.apply(batch('b', 'epp-b-1', 1, T0, []), T0);
    expect(scheduler.shared.apply(batch('b', 'epp-b-1', 4_000, T0 + 4_000, []), T0 + 4_000)).toMatchObject({
      outcome: 'applied',
      gap: 3_998,
    });
  });
});

describe('prefix placements', () => {
  it('are taken from warm-start answers only; a live batch’s placement entries are ignored and counted', () => {
    const scheduler = zoneA();
    const placement: StateEntry = [4, 'a', 'a0', [11, 12, 13]];
    expect(scheduler.shared.apply(batch('b', 'epp-b-1', 1, T0, [placement]), T0)).toMatchObject({ outcome: 'applied', ignored: 1 });
    expect(scheduler.prefixIndexBlocks).toBe(0);
    const answer: StateBatch = { ...batch('b', 'epp-b-1', 1, T0, [placement]), snapshot: { last: true } };
    expect(scheduler.shared.apply(answer, T0 + 1)).toMatchObject({ outcome: 'applied', ignored: 0 });
    expect(scheduler.prefixIndexBlocks).toBe(3);
  });

  it('a warm-start answer is held to a batch’s bounds: its penalties too are capped and go with the peer', () => {
    const scheduler = zoneA({ peerTimeoutMs: 2_000 });
    const answer: StateBatch = { ...batch('b', 'epp-b-1', 7, T0, forgedPenalties(T0)), snapshot: { last: true } };
    scheduler.shared.apply(answer, T0);
    const a0 = fleet.get(POOL, 'a', 'a0')!;
    expect(scheduler.explain(a0, T0)?.penaltyLeftMs).toBe(5_000);
    scheduler.shared.expire(T0 + 2_001);
    expect(scheduler.isPenalised(a0, T0 + 2_002)).toBe(false);
  });
});

describe('what a decision tells', () => {
  it('names the subset entries that match no ready pod (a stale hint in locality mode), at most 8, and counts them all', () => {
    const scheduler = zoneA();
    const stale = Array.from({ length: 12 }, (_, i) => `10.0.9.${i + 1}:8000`);
    const d = scheduler.pick({ model: 'm', subset: [...stale, '10.0.0.1:8000'] }, T0);
    expect(d.counts.subsetUnmatched).toBe(12);
    expect(d.subsetUnmatchedEntries).toEqual(stale.slice(0, 8));
    expect(d.entries[0]?.address).toBe('10.0.0.1:8000');
    // Every entry stale: the zone's traffic goes elsewhere, and the decision says why.
    const away = scheduler.pick({ model: 'm', subset: stale.slice(0, 3) }, T0 + 1);
    expect(away.entries[0]?.zone).not.toBe('a');
    expect(away.subsetUnmatchedEntries).toEqual(stale.slice(0, 3));
    expect(scheduler.pick({ model: 'm' }, T0 + 2).subsetUnmatchedEntries).toEqual([]);
  });

  it('carries the request id it was given (x-request-id), cut to 128 characters', () => {
    const scheduler = zoneA();
    expect(scheduler.pick({ model: 'm', requestId: 'req-42' }, T0).requestId).toBe('req-42');
    expect(scheduler.pick({ model: 'm', requestId: 'x'.repeat(10_000) }, T0).requestId).toBe('x'.repeat(128));
    expect(scheduler.pick({ model: 'm', requestId: 'r', subset: ['10.9.9.9:1'] }, T0).requestId).toBe('r');
    expect(scheduler.pick({ model: 'm' }, T0).requestId).toBeUndefined();
  });
});
