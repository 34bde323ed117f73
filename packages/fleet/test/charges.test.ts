// A request's charge as the fleet keeps it: picked, started, and ended by a real signal, by the
// endpoint's samples, at its bound or at a cap — and what each does to the in-flight count and to
// the load estimate's inputs (unsampled picks, releases since the sample).
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import type { MetricsEvent, ReadinessEvent } from '@spillway/events';
import { Charge, CHARGE_BYTES, Fleet, type ChargeEnd, type Endpoint } from '@spillway/fleet';

const T0 = 1_764_420_000_000;

function readiness(pod: string, observedAt = T0): ReadinessEvent {
  return { v: 1, kind: 'readiness', pool: 'llama', zone: 'zone-a', pod, address: `10.0.0.${pod.length}:8000`, ready: true, observedAt };
}

function sample(pod: string, observedAt: number, running: number, waiting = 0): MetricsEvent {
  return {
    v: 1,
    kind: 'metrics',
    pool: 'llama',
    zone: 'zone-a',
    pod,
    observedAt,
    waitingRequests: waiting,
    runningRequests: running,
    kvCacheUsage: 0.1,
  };
}

/** A charge that records how the fleet ended it. */
class Watched extends Charge {
  ended: { reason: ChargeEnd; at: number } | undefined;
  override chargeEnded(reason: ChargeEnd, at: number): void {
    this.ended = { reason, at };
  }
}

function setUp(options: ConstructorParameters<typeof Fleet>[0] = {}): { fleet: Fleet; pod: Endpoint } {
  const fleet = new Fleet({ pickTransitMs: 2, maxSampleLagMs: 500, ...options });
  fleet.apply(readiness('p'), T0);
  fleet.apply(sample('p', T0, 0), T0);
  return { fleet, pod: fleet.get('llama', 'zone-a', 'p') as Endpoint };
}

function charged(fleet: Fleet, pod: Endpoint, at: number): Watched {
  const charge = new Watched();
  expect(fleet.charge(charge, pod, at)).toBe(true);
  return charge;
}

describe('a started request stays charged past its stream', () => {
  it('a sample taken after it started accounts for it: no longer unsampled, never taken as released', () => {
    const { fleet, pod } = setUp();
    const a = charged(fleet, pod, T0 + 10);
    fleet.startCharge(a, T0 + 20, T0 + 60_000);
    expect([pod.inFlight, pod.startedInFlight, pod.unsampledPicks]).toEqual([1, 1, 1]);
    // The sample shows it running: it is the sample's load now, still in flight here.
    fleet.apply(sample('p', T0 + 100, 1), T0 + 101);
    expect([pod.inFlight, pod.unsampledPicks, pod.releasedSinceSample]).toEqual([1, 0, 0]);
    expect(a.ended).toBeUndefined();
    // Nothing ends it while the samples can hold it.
    fleet.apply(sample('p', T0 + 200, 1), T0 + 201);
    fleet.apply(sample('p', T0 + 300, 3, 2), T0 + 301);
    expect(pod.inFlight).toBe(1);
    expect(pod.releasedSinceSample).toBe(0);
  });

  it('a completion seen after the sample that counted it is a release since that sample', () => {
    const { fleet, pod } = setUp();
    const a = charged(fleet, pod, T0 + 10);
    fleet.startCharge(a, T0 + 20, T0 + 60_000);
    fleet.apply(sample('p', T0 + 100, 1), T0 + 101);
    fleet.releaseCharge(a);
    expect([pod.inFlight, pod.startedInFlight, pod.releasedSinceSample]).toEqual([0, 0, 1]);
    expect(a.ended).toBeUndefined(); // the caller ended it: nobody is told
  });

  it('when a sample can no longer hold every started charge, the surplus ends, oldest first', () => {
    const { fleet, pod } = setUp();
    const [a, b, c] = [charged(fleet, pod, T0 + 10), charged(fleet, pod, T0 + 11), charged(fleet, pod, T0 + 12)];
    for (const x of [a, b, c]) fleet.startCharge(x, T0 + 15, T0 + 60_000);
    // Picked but not started: not the samples' to end (it may not have reached the server).
    const pending = charged(fleet, pod, T0 + 13);
    fleet.apply(sample('p', T0 + 100, 3), T0 + 101);
    expect(pod.inFlight).toBe(4);
    const late = charged(fleet, pod, T0 + 150); // after the next sample's cover: unsampled
    fleet.apply(sample('p', T0 + 140, 1), T0 + 141);
    expect(a.ended).toEqual({ reason: 'samples', at: T0 + 141 });
    expect(b.ended).toEqual({ reason: 'samples', at: T0 + 141 });
    expect(c.ended).toBeUndefined();
    expect(pending.ended).toBeUndefined();
    expect([pod.inFlight, pod.startedInFlight, pod.unsampledPicks, pod.releasedSinceSample]).toEqual([3, 1, 1, 0]);
    expect(late.chargedTo).toBe(pod);
    expect(fleet.chargeCounters.endedBySamples).toBe(2);
  });

  it('a sample taken before the request started does not speak for it', () => {
    const { fleet, pod } = setUp();
    const a = charged(fleet, pod, T0 + 10);
    fleet.apply(sample('p', T0 + 50, 0), T0 + 51); // the pick is covered, the start is not yet
    fleet.startCharge(a, T0 + 60, T0 + 60_000);
    fleet.apply(sample('p', T0 + 55, 0), T0 + 61); // observed before the start (a late sample)
    expect(a.ended).toBeUndefined();
    fleet.apply(sample('p', T0 + 100, 0), T0 + 101); // after it: the request is gone
    expect(a.ended?.reason).toBe('samples');
    expect(pod.inFlight).toBe(0);
  });

  it('counts in a sample include requests no EPP charged: only what they certainly exclude ends', () => {
    const { fleet, pod } = setUp();
    const charges = [0, 1, 2, 3].map((i) => charged(fleet, pod, T0 + 10 + i));
    for (const x of charges) fleet.startCharge(x, T0 + 20, T0 + 60_000);
    // Five present (ours and another gateway's): nothing of ours certainly finished.
    fleet.apply(sample('p', T0 + 100, 4, 1), T0 + 101);
    expect(pod.inFlight).toBe(4);
    fleet.apply(sample('p', T0 + 200, 2, 1), T0 + 201);
    expect(charges.map((x) => x.ended?.reason)).toEqual(['samples', undefined, undefined, undefined]);
  });

  it('ends at its bound without a completion; an unsampled one stops loading the endpoint, a sampled one is not released', () => {
    const { fleet, pod } = setUp();
    const sampled = charged(fleet, pod, T0 + 10);
    fleet.startCharge(sampled, T0 + 20, T0 + 5_000);
    fleet.apply(sample('p', T0 + 100, 5), T0 + 101);
    const unsampled = charged(fleet, pod, T0 + 200);
    fleet.startCharge(unsampled, T0 + 210, T0 + 4_000);
    expect(fleet.expireCharges(T0 + 3_999)).toBe(0);
    expect(fleet.expireCharges(T0 + 4_500)).toBe(1);
    expect(unsampled.ended).toEqual({ reason: 'bound', at: T0 + 4_500 });
    expect([pod.inFlight, pod.unsampledPicks]).toEqual([1, 0]);
    expect(fleet.expireCharges(T0 + 5_000)).toBe(1);
    expect(sampled.ended?.reason).toBe('bound');
    expect([pod.inFlight, pod.releasedSinceSample]).toEqual([0, 0]);
    expect(fleet.charges).toEqual({ count: 0, bytes: 0, started: 0 });
  });

  it('a charge that ends otherwise leaves the bound heap: nothing fires for it later', () => {
    const { fleet, pod } = setUp();
    const xs = [0, 1, 2, 3, 4].map((i) => charged(fleet, pod, T0 + i));
    xs.forEach((x, i) => fleet.startCharge(x, T0 + 10, T0 + 1_000 * (5 - i)));
    fleet.releaseCharge(xs[4] as Charge);
    fleet.forgetCharge(xs[2] as Charge);
    expect(fleet.charges.started).toBe(3);
    expect(fleet.expireCharges(T0 + 10_000)).toBe(3);
    expect(xs.map((x) => x.ended?.reason)).toEqual(['bound', 'bound', undefined, 'bound', undefined]);
  });
});

describe('the caps on charges', () => {
  it('an endpoint at its cap ends its oldest started charge for a new one; with none started the new one is refused', () => {
    const { fleet, pod } = setUp({ maxChargesPerEndpoint: 3 });
    const [a, b, c] = [charged(fleet, pod, T0 + 1), charged(fleet, pod, T0 + 2), charged(fleet, pod, T0 + 3)];
    fleet.startCharge(b, T0 + 4, T0 + 60_000);
    fleet.startCharge(c, T0 + 4, T0 + 50_000);
    const d = charged(fleet, pod, T0 + 5);
    expect(b.ended).toEqual({ reason: 'cap', at: T0 + 5 });
    expect([a.ended, c.ended]).toEqual([undefined, undefined]);
    expect(pod.inFlight).toBe(3);
    fleet.startCharge(c, T0 + 6, T0 + 70_000); // started already: unchanged
    fleet.forgetCharge(c);
    const e = charged(fleet, pod, T0 + 7);
    expect(pod.inFlight).toBe(3);
    expect(fleet.charge(new Charge(), pod, T0 + 8)).toBe(false);
    expect([fleet.chargeCounters.evicted, fleet.chargeCounters.refused]).toEqual([1, 1]);
    expect([d.chargedTo, e.chargedTo]).toEqual([pod, pod]);
  });

  it('the fleet at its byte cap ends the started charge nearest its bound', () => {
    const { fleet, pod } = setUp({ maxChargeBytes: 3 * CHARGE_BYTES });
    fleet.apply(readiness('q'), T0);
    const q = fleet.get('llama', 'zone-a', 'q') as Endpoint;
    const a = charged(fleet, pod, T0 + 1);
    const b = charged(fleet, q, T0 + 2);
    const c = charged(fleet, pod, T0 + 3);
    fleet.startCharge(a, T0 + 4, T0 + 9_000);
    fleet.startCharge(b, T0 + 4, T0 + 8_000);
    charged(fleet, pod, T0 + 5);
    expect(b.ended?.reason).toBe('cap');
    expect([a.ended, c.ended]).toEqual([undefined, undefined]);
    expect(fleet.charges.bytes).toBe(3 * CHARGE_BYTES);
  });
});

/** The fleet's own counts, recomputed from the charges a test holds. */
function invariants(fleet: Fleet, pod: Endpoint, held: readonly Charge[], sampled: boolean): void {
  const mine = held.filter((c) => c.chargedTo === pod);
  const until = (pod as unknown as { sampledUntil: number }).sampledUntil;
  expect(pod.inFlight).toBe(mine.length);
  expect(pod.startedInFlight).toBe(mine.filter((c) => c.started).length);
  expect(pod.unsampledPicks).toBe(mine.filter((c) => c.chargedAt > until).length);
  expect(fleet.charges.count).toBe(mine.length);
  expect(fleet.charges.started).toBe(mine.filter((c) => c.started).length);
  expect(fleet.charges.bytes).toBe(mine.length * CHARGE_BYTES);
  // A sample just applied can hold every started charge it covers.
  const m = pod.metrics;
  if (sampled && m !== undefined) {
    const covered = mine.filter((c) => c.startedAt <= until).length;
    expect(covered).toBeLessThanOrEqual(m.runningRequests + m.waitingRequests);
  }
}

type Op =
  | { kind: 'charge'; dt: number }
  | { kind: 'start'; i: number; boundMs: number }
  | { kind: 'release'; i: number }
  | { kind: 'forget'; i: number }
  | { kind: 'sample'; running: number; waiting: number; lagMs: number }
  | { kind: 'expire' }
  | { kind: 'tick'; ms: number };

const op: fc.Arbitrary<Op> = fc.oneof(
  fc.record({ kind: fc.constant('charge' as const), dt: fc.integer({ min: -50, max: 5 }) }),
  { arbitrary: fc.record({ kind: fc.constant('start' as const), i: fc.nat(12), boundMs: fc.integer({ min: 0, max: 3_000 }) }), weight: 3 },
  fc.record({ kind: fc.constant('release' as const), i: fc.nat(12) }),
  fc.record({ kind: fc.constant('forget' as const), i: fc.nat(12) }),
  {
    arbitrary: fc.record({
      kind: fc.constant('sample' as const),
      running: fc.nat(8),
      waiting: fc.nat(3),
      lagMs: fc.integer({ min: -300, max: 600 }),
    }),
    weight: 2,
  },
  fc.record({ kind: fc.constant('expire' as const) }),
  fc.record({ kind: fc.constant('tick' as const), ms: fc.integer({ min: 1, max: 400 }) }),
);

describe('charges (property)', () => {
  it('every count the load estimate reads stays what the charges say, whatever the order of events', () => {
    const ended = { endedBySamples: 0, endedByBound: 0, evicted: 0, refused: 0 };
    fc.assert(
      fc.property(fc.array(op, { minLength: 30, maxLength: 150 }), fc.integer({ min: 2, max: 12 }), (ops, cap) => {
        const { fleet, pod } = setUp({ maxChargesPerEndpoint: cap });
        const held: Watched[] = [];
        let now = T0 + 1_000;
        let observed = T0;
        let releasedBefore = 0;
        for (const o of ops) {
          switch (o.kind) {
            case 'charge': {
              const c = new Watched();
              if (fleet.charge(c, pod, now + o.dt)) held.push(c);
              break;
            }
            case 'start':
              if (held[o.i]) fleet.startCharge(held[o.i] as Charge, now, now + o.boundMs);
              break;
            case 'release':
              if (held[o.i]) fleet.releaseCharge(held[o.i] as Charge);
              break;
            case 'forget':
              if (held[o.i]) fleet.forgetCharge(held[o.i] as Charge);
              break;
            case 'sample':
              observed = Math.max(observed + 1, now - o.lagMs);
              fleet.apply(sample('p', observed, o.running, o.waiting), now);
              releasedBefore = 0;
              break;
            case 'expire': {
              fleet.expireCharges(now);
              const overdue = held.filter((c) => c.chargedTo !== undefined && c.endsBy <= now);
              expect(overdue).toEqual([]);
              break;
            }
            case 'tick':
              now += o.ms;
              break;
          }
          // Releases since the sample grow only by real releases, never by the fleet's own ends.
          expect(pod.releasedSinceSample).toBeGreaterThanOrEqual(releasedBefore);
          if (o.kind !== 'release') expect(pod.releasedSinceSample).toBe(releasedBefore);
          releasedBefore = pod.releasedSinceSample;
          invariants(fleet, pod, held, o.kind === 'sample');
          for (const c of held) if (c.ended !== undefined) expect(c.chargedTo).toBeUndefined();
        }
        for (const key of Object.keys(ended) as (keyof typeof ended)[]) ended[key] += fleet.chargeCounters[key];
      }),
      { numRuns: 400 },
    );
    // Not a test of quiet runs: every way a charge ends happened.
    expect(
      Object.values(ended).every((count) => count > 20),
      JSON.stringify(ended),
    ).toBe(true);
  });
});
