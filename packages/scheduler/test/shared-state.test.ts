import { describe, expect, it } from 'vitest';
import type { StateBatch, StateEntry } from '@spillway/events';
import type { Fleet } from '@spillway/fleet';
import { Scheduler, type Decision, type SharedStateOptions } from '../src/index.js';
import { buildFleet, POOL, sample, T0, threeZones, type PodSpec } from './fleet-fixture.js';

/**
 * Shared state between the EPPs of a pool, pure: two or three schedulers, each with its own fleet
 * (as two EPP processes have), entries carried between them by hand as the EPP's channel would.
 */
const twoLocal: PodSpec[] = [
  { pod: 'a0', zone: 'a', address: '10.0.0.1:8000', running: 4 },
  { pod: 'a1', zone: 'a', address: '10.0.0.2:8000', running: 4 },
];

class Epp {
  readonly out: StateEntry[] = [];
  readonly scheduler: Scheduler;
  seq = 0;
  constructor(
    readonly id: string,
    readonly fleet: Fleet,
    zone = 'a',
    seed = 1,
    options: SharedStateOptions = {},
  ) {
    this.scheduler = new Scheduler({ fleet, pool: POOL, zone, seed, shared: { outbox: { push: (e) => this.out.push(e) }, ...options } });
  }

  /** Everything pushed since the last batch, as one batch sent at `sentAt` (this EPP's clock). */
  batch(sentAt: number, zone = 'a'): StateBatch {
    const entries = this.out.splice(0);
    return { v: 1, pool: POOL, zone, epp: this.id, seq: ++this.seq, sentAt, entries };
  }

  route(prompt: string | undefined, now: number, subset?: string[]): Decision {
    const d = this.scheduler.pick({ model: 'm', prompt, subset }, now);
    if (d.status === 'routed') this.scheduler.commit(d, now);
    return d;
  }
}

const pods = (fleet: Fleet, ...names: string[]) => names.map((n) => fleet.get(POOL, n.slice(0, 1), n)!);
const primaryOf = (d: Decision) => d.entries[0]?.endpoint.pod;

describe('another EPP of the zone', () => {
  it("avoids the endpoints the other loaded before any new sample shows it (its picks count as this EPP's own)", () => {
    for (let seed = 1; seed <= 20; seed++) {
      const one = new Epp('epp-1', buildFleet(twoLocal));
      const two = new Epp('epp-2', buildFleet(twoLocal), 'a', seed);
      // A burst through EPP 1, all on a0 (its subset), held open.
      for (let i = 0; i < 6; i++) expect(primaryOf(one.route(undefined, T0 + i, ['10.0.0.1:8000']))).toBe('a0');
      expect(two.scheduler.shared.apply(one.batch(T0 + 8), T0 + 10, 'epp-2')).toEqual({
        outcome: 'applied',
        gap: 0,
        entries: 6,
        ignored: 0,
        resynced: false,
        evicted: 0,
      });
      const [a0] = pods(two.fleet, 'a0');
      expect(a0?.unsampledPicks).toBe(6);
      expect(a0?.inFlight).toBe(6);
      expect(primaryOf(two.route(undefined, T0 + 11))).toBe('a1');
    }
  });

  it('routes a prompt where the other sent it (prefix placements are shared)', () => {
    const prompt = 'You are a helpful assistant. '.repeat(40);
    const seen = new Set<string>();
    for (let seed = 1; seed <= 12; seed++) {
      const one = new Epp('epp-1', buildFleet(twoLocal), 'a', seed);
      const two = new Epp('epp-2', buildFleet(twoLocal), 'a', seed * 7);
      const first = primaryOf(one.route(prompt, T0)) as string;
      seen.add(first);
      two.scheduler.shared.apply(one.batch(T0 + 2), T0 + 3);
      // Released, and a sample later: only the placement is left to steer.
      one.scheduler.release(one.route(undefined, T0 + 4));
      const d = two.route(prompt, T0 + 200);
      expect(primaryOf(d)).toBe(first);
      expect(d.prefixMatched).toBeGreaterThan(0);
    }
    // The first EPP's choice itself was a coin toss: the second followed it both ways.
    expect(seen.size).toBe(2);
  });

  it('a spilling EPP and the remote zone’s own EPP see each other’s picks (cross-zone)', () => {
    const pool = threeZones();
    const a = new Epp('epp-a', buildFleet(pool), 'a');
    const b = new Epp('epp-b', buildFleet(pool), 'b');
    // zone a's EPP sends 3 requests to b0 (a strict subset naming it, as a spill would).
    for (let i = 0; i < 3; i++) a.route(undefined, T0 + i, ['10.0.1.1:8000']);
    b.scheduler.shared.apply(a.batch(T0 + 5), T0 + 6);
    expect(pods(b.fleet, 'b0')[0]?.unsampledPicks).toBe(3);
    // And back: zone b's EPP loads b1; zone a's EPP sees it.
    b.route(undefined, T0 + 7, ['10.0.1.2:8000']);
    a.scheduler.shared.apply(b.batch(T0 + 8, 'b'), T0 + 9);
    expect(pods(a.fleet, 'b1')[0]?.unsampledPicks).toBe(1);
    expect(a.scheduler.shared.peerList()).toEqual([{ epp: 'epp-b', zone: 'b', lastSeenAt: T0 + 9, lastSeq: 1, inFlight: 1 }]);
  });
});

describe("a peer's prefill, for the backlog", () => {
  const limits = { horizonMs: 10_000, maxCharges: 16 };
  it('is its hashed blocks the endpoint did not hold, then its whole prompt less those once it starts', () => {
    const two = new Epp('epp-2', buildFleet(twoLocal));
    const [a0] = pods(two.fleet, 'a0');
    const ahead = { ms: 0, tokens: 0 };
    // A first pick teaches a0 blocks 1..4 (64 tokens).
    two.scheduler.shared.apply(
      { v: 1, pool: POOL, zone: 'a', epp: 'epp-1', seq: 1, sentAt: T0, entries: [[1, 1, 'a', 'a0', T0, [1, 2, 3, 4]]] },
      T0,
    );
    expect(two.fleet.prefillAhead(a0!, T0, limits, { msPerToken: 1, attentionTokens: 0, stepMs: 0, chunkTokens: 8192 }, ahead)).toBeCloseTo(
      64,
      6,
    );
    // A second shares blocks 1..4 and adds 5..6: 32 tokens of new work behind the first 64.
    two.scheduler.shared.apply(
      { v: 1, pool: POOL, zone: 'a', epp: 'epp-1', seq: 2, sentAt: T0, entries: [[1, 2, 'a', 'a0', T0, [1, 2, 3, 4, 5, 6]]] },
      T0,
    );
    expect(two.fleet.prefillAhead(a0!, T0, limits, { msPerToken: 1, attentionTokens: 0, stepMs: 0, chunkTokens: 8192 }, ahead)).toBeCloseTo(
      96,
      6,
    );
    // Its start says its prompt has 5,000 tokens (its blocks stopped at the hashing limit): less the
    // 64 a0 held, 4,936 of work.
    two.scheduler.shared.apply({ v: 1, pool: POOL, zone: 'a', epp: 'epp-1', seq: 3, sentAt: T0, entries: [[5, 2, T0, 5000, 0]] }, T0);
    expect(two.fleet.prefillAhead(a0!, T0, limits, { msPerToken: 1, attentionTokens: 0, stepMs: 0, chunkTokens: 8192 }, ahead)).toBeCloseTo(
      64 + 4936,
      6,
    );
    // A start without a prompt length (0) keeps the estimate.
    two.scheduler.shared.apply({ v: 1, pool: POOL, zone: 'a', epp: 'epp-1', seq: 4, sentAt: T0, entries: [[5, 1, T0, 0, 0]] }, T0);
    expect(two.fleet.prefillAhead(a0!, T0, limits, { msPerToken: 1, attentionTokens: 0, stepMs: 0, chunkTokens: 8192 }, ahead)).toBeCloseTo(
      64 + 4936,
      6,
    );
  });
});

describe('correctness under loss', () => {
  it('a pick whose release is lost loads its endpoint only until the next sample that postdates it', () => {
    const one = new Epp('epp-1', buildFleet(twoLocal));
    const two = new Epp('epp-2', buildFleet(twoLocal));
    for (let i = 0; i < 4; i++) one.route(undefined, T0 + i, ['10.0.0.1:8000']);
    two.scheduler.shared.apply(one.batch(T0 + 5), T0 + 5);
    const [a0] = pods(two.fleet, 'a0');
    expect(a0?.unsampledPicks).toBe(4);
    // EPP 1 dies: no release ever comes. The next sample of a0 covers the picks.
    sample(two.fleet, twoLocal[0] as PodSpec, T0 + 100);
    expect(a0?.unsampledPicks).toBe(0);
    // The in-flight entries go with the peer once it has been silent for the timeout.
    expect(two.scheduler.shared.expire(T0 + 1000)).toEqual({ expired: 0, peersForgotten: 0, peerEntriesForgotten: 0 });
    expect(two.scheduler.shared.expire(T0 + 5 + 5001)).toEqual({ expired: 0, peersForgotten: 1, peerEntriesForgotten: 4 });
    expect(a0?.inFlight).toBe(0);
    expect(two.scheduler.shared.peerCount).toBe(0);
  });

  it('remote in-flight entries expire after their time even while the peer lives; their releases are then ignored', () => {
    const one = new Epp('epp-1', buildFleet(twoLocal));
    const two = new Epp('epp-2', buildFleet(twoLocal), 'a', 1, { remoteEntryTtlMs: 1000, peerTimeoutMs: 60_000 });
    const d = one.route(undefined, T0, ['10.0.0.1:8000']);
    two.scheduler.shared.apply(one.batch(T0 + 1), T0 + 1);
    one.route(undefined, T0 + 500, ['10.0.0.1:8000']);
    two.scheduler.shared.apply(one.batch(T0 + 501), T0 + 501);
    const [a0] = pods(two.fleet, 'a0');
    expect(a0?.unsampledPicks).toBe(2);
    expect(two.scheduler.shared.expire(T0 + 1001)).toEqual({ expired: 1, peersForgotten: 0, peerEntriesForgotten: 0 });
    expect(a0?.unsampledPicks).toBe(1);
    one.scheduler.release(d, T0 + 1100);
    expect(two.scheduler.shared.apply(one.batch(T0 + 1100), T0 + 1100)).toMatchObject({ outcome: 'applied', ignored: 1 });
    expect(a0?.inFlight).toBe(1);
  });

  it('sequence numbers count the batches missed; an old one is a replay and is refused whole', () => {
    const one = new Epp('epp-1', buildFleet(twoLocal));
    const two = new Epp('epp-2', buildFleet(twoLocal));
    one.route(undefined, T0, ['10.0.0.1:8000']);
    const first = one.batch(T0);
    expect(two.scheduler.shared.apply(first, T0).gap).toBe(0);
    one.batch(T0 + 1); // lost
    one.batch(T0 + 2); // lost
    one.route(undefined, T0 + 3, ['10.0.0.1:8000']);
    expect(two.scheduler.shared.apply(one.batch(T0 + 3), T0 + 3)).toMatchObject({ outcome: 'applied', gap: 2 });
    expect(two.scheduler.shared.apply(first, T0 + 4)).toMatchObject({ outcome: 'replayed' });
    expect(pods(two.fleet, 'a0')[0]?.inFlight).toBe(2);
  });
});

describe('what a batch may say', () => {
  it('own batches, unknown endpoints, unknown requests, live placements and entries past the bound change nothing', () => {
    const two = new Epp('epp-2', buildFleet(twoLocal), 'a', 1, { maxEntriesPerPeer: 1 });
    const batch = (epp: string, entries: StateEntry[], seq = 1): StateBatch => ({
      v: 1,
      pool: POOL,
      zone: 'a',
      epp,
      seq,
      sentAt: T0,
      entries,
    });
    expect(two.scheduler.shared.apply(batch('epp-2', [[1, 1, 'a', 'a0', T0, []]]), T0, 'epp-2').outcome).toBe('own');
    expect(
      two.scheduler.shared.apply(
        batch('epp-1', [
          [1, 1, 'a', 'nope', T0, []],
          [1, 2, 'b', 'a0', T0, []],
          [2, 99, T0],
          [3, 'a', 'gone', T0 + 1000],
          [4, 'x', 'y', [1]],
          [4, 'a', 'a0', [1]],
        ]),
        T0,
      ),
    ).toEqual({ outcome: 'applied', gap: 0, entries: 6, ignored: 6, resynced: false, evicted: 0 });
    expect(two.scheduler.prefixIndexBlocks).toBe(0);
    expect(
      two.scheduler.shared.apply(
        batch(
          'epp-1',
          [
            [1, 3, 'a', 'a0', T0, []],
            [1, 4, 'a', 'a1', T0, []],
          ],
          2,
        ),
        T0,
      ),
    ).toMatchObject({ ignored: 1 });
    const [a0, a1] = pods(two.fleet, 'a0', 'a1');
    expect([a0?.inFlight, a1?.inFlight]).toEqual([1, 0]);
  });

  it('in-flight entries are bounded over all peers too; forgetting and expiry give the room back', () => {
    const two = new Epp('epp-2', buildFleet(twoLocal), 'a', 1, { maxRemoteEntries: 3, remoteEntryTtlMs: 100 });
    const picks = (epp: string, ids: number[]): StateBatch => ({
      v: 1,
      pool: POOL,
      zone: 'a',
      epp,
      seq: 1,
      sentAt: T0,
      entries: ids.map((id): StateEntry => [1, id, 'a', 'a0', T0, []]),
    });
    expect(two.scheduler.shared.apply(picks('p1', [1, 2]), T0).ignored).toBe(0);
    expect(two.scheduler.shared.apply(picks('p2', [1, 2]), T0).ignored).toBe(1);
    expect(two.scheduler.shared.remoteInFlight).toBe(3);
    expect(two.scheduler.shared.forgetPeer('a', 'p1')).toBe(2);
    expect(two.scheduler.shared.remoteInFlight).toBe(1);
    expect(two.scheduler.shared.apply({ ...picks('p2', [3, 4]), seq: 2 }, T0 + 10).ignored).toBe(0);
    expect(two.scheduler.shared.expire(T0 + 100)).toMatchObject({ expired: 1 });
    expect(two.scheduler.shared.remoteInFlight).toBe(2);
    expect(pods(two.fleet, 'a0')[0]?.inFlight).toBe(2);
  });

  it("translates the origin's clock by the batch's send time: an hour of skew changes nothing", () => {
    const two = new Epp('epp-2', buildFleet(twoLocal));
    const skew = 3_600_000;
    // Picked 30 ms before the batch left, on a clock an hour ahead; received at T0 + 100. Its four
    // prompt blocks (64 tokens) are prefill a0 must do.
    two.scheduler.shared.apply(
      {
        v: 1,
        pool: POOL,
        zone: 'a',
        epp: 'epp-1',
        seq: 1,
        sentAt: T0 + 90 + skew,
        entries: [[1, 1, 'a', 'a0', T0 + 60 + skew, [1, 2, 3, 4]]],
      },
      T0 + 100,
    );
    const [a0] = pods(two.fleet, 'a0');
    // Taken as made at T0 + 70: unsampled, and its prefill (64 ms at 1 ms per token) worked off from then.
    expect(a0?.unsampledPicks).toBe(1);
    const ahead = { ms: 0, tokens: 0 };
    expect(
      two.fleet.prefillAhead(
        a0!,
        T0 + 100,
        { horizonMs: 1000, maxCharges: 16 },
        { msPerToken: 1, attentionTokens: 0, stepMs: 0, chunkTokens: 8192 },
        ahead,
      ),
    ).toBeCloseTo(34, 6);
    // A penalty of 5 s from send time lasts 5 s from receipt; a longer one is cut to this EPP's own penaltyMs (5 s).
    two.scheduler.shared.apply(
      {
        v: 1,
        pool: POOL,
        zone: 'a',
        epp: 'epp-1',
        seq: 2,
        sentAt: T0 + skew,
        entries: [
          [3, 'a', 'a0', T0 + skew + 5000],
          [3, 'a', 'a1', T0 + skew + 10_000_000],
        ],
      },
      T0 + 100,
    );
    expect(two.scheduler.isPenalised(a0!, T0 + 5099)).toBe(true);
    expect(two.scheduler.isPenalised(a0!, T0 + 5100)).toBe(false);
    const [a1] = pods(two.fleet, 'a1');
    expect(two.scheduler.isPenalised(a1!, T0 + 5099)).toBe(true);
    expect(two.scheduler.isPenalised(a1!, T0 + 5100)).toBe(false);
  });
});

describe("this EPP's entries", () => {
  it('a pick, its move to the fallback that served it, its release, and the penalty of the failed primary', () => {
    const one = new Epp('epp-1', buildFleet(twoLocal));
    const prompt = 'x'.repeat(200);
    const d = one.route(prompt, T0, ['10.0.0.1:8000', '10.0.0.2:8000']);
    const [primary, fallback] = [d.entries[0]!.endpoint, d.entries[1]!.endpoint];
    one.scheduler.reportServed(d, fallback.address, T0 + 5);
    one.scheduler.release(d, T0 + 900);
    one.scheduler.release(d, T0 + 901); // idempotent: no second release
    expect(one.out).toEqual([
      [1, 1, 'a', primary.pod, T0, (d as unknown as { prefixHashes: number[] }).prefixHashes],
      [3, 'a', primary.pod, T0 + 5 + 5000],
      [2, 1, T0 + 5],
      [1, 1, 'a', fallback.pod, T0 + 5, (d as unknown as { prefixHashes: number[] }).prefixHashes],
      [2, 1, T0 + 900],
    ]);
    expect((d as unknown as { prefixHashes: number[] }).prefixHashes).toHaveLength(4);

    // Another EPP folds them in: the charge moved, then ended; the primary is penalised there too.
    const two = new Epp('epp-2', buildFleet(twoLocal));
    two.scheduler.shared.apply(one.batch(T0 + 5), T0 + 6);
    const [p2, f2] = [two.fleet.get(POOL, 'a', primary.pod)!, two.fleet.get(POOL, 'a', fallback.pod)!];
    expect([p2.inFlight, f2.inFlight]).toEqual([0, 0]);
    expect(two.scheduler.isPenalised(p2, T0 + 100)).toBe(true);
  });

  it('nothing is produced without an outbox (sharing off)', () => {
    const scheduler = new Scheduler({ fleet: buildFleet(twoLocal), pool: POOL, zone: 'a' });
    const d = scheduler.pick({ model: 'm' }, T0);
    scheduler.commit(d, T0);
    scheduler.release(d, T0 + 1);
    expect(scheduler.shared.ownInFlight).toBe(0);
  });
});

describe('warm start', () => {
  it("a new EPP restored from a peer's snapshot routes a known prefix where it went, and counts the peer's open requests", () => {
    const prompt = 'System: answer in French. '.repeat(30);
    const one = new Epp('epp-1', buildFleet(twoLocal), 'a', 3);
    const first = primaryOf(one.route(prompt, T0)) as string;
    one.route(undefined, T0 + 1, ['10.0.0.2:8000']);
    const failed = one.route(undefined, T0 + 2, ['10.0.0.1:8000']);
    one.scheduler.reportFailed(failed, T0 + 3);
    one.out.length = 0;
    const snapshot = one.scheduler.shared.snapshot(T0 + 10);
    expect(snapshot.filter((e) => e[0] === 1)).toHaveLength(3);
    expect(snapshot.filter((e) => e[0] === 3)).toEqual([[3, 'a', 'a0', T0 + 3 + 5000]]);
    expect(snapshot.some((e) => e[0] === 4)).toBe(true);
    // The operator's view: in flight and penalties, no placements.
    expect(
      one.scheduler.shared
        .snapshot(T0 + 10, false)
        .map((e) => e[0])
        .sort(),
    ).toEqual([1, 1, 1, 3]);

    for (let seed = 1; seed <= 8; seed++) {
      const fresh = new Epp('epp-3', buildFleet(twoLocal), 'a', seed);
      fresh.scheduler.shared.apply(
        { v: 1, pool: POOL, zone: 'a', epp: 'epp-1', seq: one.seq, sentAt: T0 + 10, entries: snapshot, snapshot: { last: true } },
        T0 + 12,
      );
      expect(fresh.fleet.get(POOL, 'a', 'a0')!.inFlight + fresh.fleet.get(POOL, 'a', 'a1')!.inFlight).toBe(3);
      expect(fresh.scheduler.prefixIndexBlocks).toBe(one.scheduler.prefixIndexBlocks);
      // a0 is penalised in the snapshot: the prompt goes to the holder when that is a1, and a0's penalty fails open otherwise.
      const d = fresh.route(prompt, T0 + 13, first === 'a1' ? undefined : ['10.0.0.1:8000']);
      expect(primaryOf(d)).toBe(first);
      expect(d.prefixMatched).toBeGreaterThan(0);
    }
  });
});
