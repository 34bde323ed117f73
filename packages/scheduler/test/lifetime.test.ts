// A request's life as the scheduler accounts for it: picked (commit), started (its response began),
// and over — by a completion or a release before it started, or, with no such signal (behind
// Envoy's stream close), when the endpoint's samples account for it or its bound passes. Peers
// learn each step and agree; a peer's started requests are bounded by the receiver's own rule.
import { describe, expect, it } from 'vitest';
import {
  decodeStateBatch,
  encodeStateBatch,
  RELEASED_WITHOUT_COMPLETION,
  STATE_RELEASE,
  STATE_STARTED,
  type StateBatch,
  type StateEntry,
} from '@spillway/events';
import type { ChargeEnd, Endpoint, Fleet } from '@spillway/fleet';
import { Scheduler, type Decision, type SchedulerConfigInput } from '../src/index.js';
import { chargeBoundMs, usableMaxTokens } from '../src/charge-bound.js';
import { schedulerConfigSchema } from '../src/config.js';
import { buildFleet, POOL, sample, T0, type PodSpec } from './fleet-fixture.js';

const A0 = '10.0.0.1:8000';
const A1 = '10.0.0.2:8000';
const A2 = '10.0.0.3:8000';
const zoneA: PodSpec[] = [
  { pod: 'a0', zone: 'a', address: A0 },
  { pod: 'a1', zone: 'a', address: A1 },
  { pod: 'a2', zone: 'a', address: A2 },
];

class Listener {
  readonly ended: Array<{ at: number; reason: ChargeEnd }> = [];
  chargeEnded(at: number, reason: ChargeEnd): void {
    this.ended.push({ at, reason });
  }
}

class Epp {
  readonly out: StateEntry[] = [];
  readonly scheduler: Scheduler;
  seq = 0;
  constructor(
    readonly id: string,
    readonly fleet: Fleet,
    config: SchedulerConfigInput = {},
    seed = 1,
  ) {
    this.scheduler = new Scheduler({ fleet, pool: POOL, zone: 'a', seed, config, shared: { outbox: { push: (e) => this.out.push(e) } } });
  }

  /** Everything pushed since the last batch, through the wire format, sent at `sentAt`. */
  batch(sentAt: number): StateBatch {
    const batch: StateBatch = { v: 1, pool: POOL, zone: 'a', epp: this.id, seq: ++this.seq, sentAt, entries: this.out.splice(0) };
    const decoded = decodeStateBatch(encodeStateBatch(batch));
    if (!decoded.ok) throw new Error(decoded.detail);
    return decoded.batch;
  }

  route(now: number, subset?: string[], maxTokens?: number): Decision {
    const d = this.scheduler.pick({ model: 'm', prompt: 'p'.repeat(400), subset, maxTokens }, now);
    if (d.status === 'routed') this.scheduler.commit(d, now);
    return d;
  }
}

const pod = (fleet: Fleet, name: string): Endpoint => fleet.get(POOL, 'a', name) as Endpoint;
const primaryOf = (d: Decision) => d.entries[0]?.endpoint.pod;
/** Where the next request would go (picked, not sent: it charges nothing). */
const next = (epp: Epp, now: number, subset: string[]) => primaryOf(epp.scheduler.pick({ model: 'm', prompt: 'q', subset }, now));
const spec = (name: string, running: number, waiting = 0): PodSpec => ({
  ...(zoneA.find((p) => p.pod === name) as PodSpec),
  running,
  waiting,
});

describe('a started request without a completion signal', () => {
  it('stays charged after its stream; a sample that shows it running takes it over; one that shows it gone ends it', () => {
    const epp = new Epp('epp-1', buildFleet(zoneA));
    const listener = new Listener();
    const d = epp.route(T0 + 10, [A0]);
    epp.scheduler.start(d, T0 + 20, listener);
    const a0 = pod(epp.fleet, 'a0');
    // The stream ends here behind Envoy >= 1.37: nothing is released.
    expect([a0.inFlight, a0.startedInFlight, a0.unsampledPicks]).toEqual([1, 1, 1]);
    sample(epp.fleet, spec('a0', 1), T0 + 100);
    expect([a0.inFlight, a0.unsampledPicks, a0.releasedSinceSample]).toEqual([1, 0, 0]);
    sample(epp.fleet, spec('a0', 1), T0 + 200);
    expect(listener.ended).toEqual([]);
    sample(epp.fleet, spec('a0', 0), T0 + 300);
    expect(listener.ended).toEqual([{ at: T0 + 300, reason: 'samples' }]);
    expect([a0.inFlight, a0.releasedSinceSample]).toEqual([0, 0]);
    // Released later (a completion after all): nothing left to release, nothing counted twice.
    epp.scheduler.release(d, T0 + 400);
    expect(a0.releasedSinceSample).toBe(0);
    // Peers heard pick, start, and an end no one takes for a completion.
    expect(epp.batch(T0 + 500).entries.map((e) => [e[0], e[0] === STATE_RELEASE ? e[2] : undefined])).toEqual([
      [1, undefined],
      [STATE_RELEASE, RELEASED_WITHOUT_COMPLETION],
      [STATE_STARTED, undefined],
    ]);
  });

  it('a completion seen releases it at once: the sample that counted it over-reports until the next', () => {
    const epp = new Epp('epp-1', buildFleet(zoneA));
    const d = epp.route(T0 + 10, [A0]);
    epp.scheduler.start(d, T0 + 20);
    sample(epp.fleet, spec('a0', 1), T0 + 100);
    epp.scheduler.release(d, T0 + 150);
    const a0 = pod(epp.fleet, 'a0');
    expect([a0.inFlight, a0.releasedSinceSample]).toEqual([0, 1]);
    const entries = epp.batch(T0 + 200).entries;
    expect(entries.filter((e) => e[0] === STATE_RELEASE)).toEqual([[STATE_RELEASE, 1, T0 + 150]]);
  });

  it('ends at its bound: the prompt at the prefill rate plus the output limit at the measured inter-token time, with slack', () => {
    const rates = { windowMs: 2000, promptTokensPerS: 1000, generationTokensPerS: 500, requestsPerS: 4, itlMs: 20, queueMs: 100 };
    const epp = new Epp('epp-1', buildFleet(zoneA.map((p) => ({ ...p, rates }))), {
      rates: { default: { prefillTokensPerS: 10_000 } },
      charges: { slack: 2, minMs: 0 },
    });
    const listener = new Listener();
    const d = epp.route(T0, [A0], 200);
    epp.scheduler.start(d, T0 + 5, listener);
    // 400 characters are 100 tokens: 2 × (100 ms queue + 10 ms prefill + 200 × 20 ms).
    const bound = 2 * (100 + 10 + 200 * 20);
    expect(epp.scheduler.expireCharges(T0 + 5 + bound - 1)).toBe(0);
    // A pick finds charges past their bound ended before it prices anything.
    epp.scheduler.pick({ model: 'm', prompt: 'x' }, T0 + 5 + bound);
    expect(listener.ended).toEqual([{ at: T0 + 5 + bound, reason: 'bound' }]);
    expect(pod(epp.fleet, 'a0').inFlight).toBe(0);
  });

  it('the bound takes the configured default for a missing, negative, fractional or absurd output limit, and is capped', () => {
    const config = schedulerConfigSchema.parse({ charges: { defaultMaxTokens: 100, interTokenMs: 10, slack: 1, minMs: 0, maxMs: 60_000 } });
    const fleet = buildFleet(zoneA);
    const a0 = pod(fleet, 'a0');
    const bound = (maxTokens: number | undefined) => chargeBoundMs(config.charges, a0, 1000, 0, maxTokens);
    expect(bound(undefined)).toBe(1000);
    for (const bad of [-5, 0, 2.5, Number.NaN, Number.POSITIVE_INFINITY]) expect(bound(bad)).toBe(1000);
    expect(bound(50)).toBe(500);
    expect(bound(1e15)).toBe(60_000);
    expect(usableMaxTokens(1e15)).toBe(100_000_000);
    expect(chargeBoundMs(config.charges, a0, 1000, -10, 1)).toBe(10);
    expect(chargeBoundMs(config.charges, a0, 1000, Number.NaN, 1)).toBe(10);
    expect(() => schedulerConfigSchema.parse({ charges: { minMs: 5000, maxMs: 1000 } })).toThrow(/minMs/);
  });

  it('a request over before its response began is released as before: unsampled load goes at once', () => {
    const epp = new Epp('epp-1', buildFleet(zoneA));
    const d = epp.route(T0 + 10, [A0]);
    epp.scheduler.release(d, T0 + 12);
    expect(pod(epp.fleet, 'a0').inFlight).toBe(0);
    expect(pod(epp.fleet, 'a0').unsampledPicks).toBe(0);
    epp.scheduler.start(d, T0 + 20); // a late start changes nothing
    expect(pod(epp.fleet, 'a0').inFlight).toBe(0);
  });
});

describe('the endpoint that served it', () => {
  it('no served endpoint named: the charge stays on the primary', () => {
    const epp = new Epp('epp-1', buildFleet(zoneA));
    const d = epp.route(T0, [A0]);
    epp.scheduler.start(d, T0 + 5);
    expect(pod(epp.fleet, 'a0').startedInFlight).toBe(1);
  });

  it('a fallback outside the list served it: the charge moves there, and starts there', () => {
    const epp = new Epp('epp-1', buildFleet(zoneA), { maxEndpoints: 1 });
    const d = epp.route(T0, [A0]);
    expect(d.destination).toBe(A0);
    expect(epp.scheduler.reportServed(d, A2, T0 + 3)).toBe('fallback');
    epp.scheduler.start(d, T0 + 5);
    expect([pod(epp.fleet, 'a0').inFlight, pod(epp.fleet, 'a2').inFlight, pod(epp.fleet, 'a2').startedInFlight]).toEqual([0, 1, 1]);
  });

  it('served where no known pod is: nothing this EPP sees carries it, so the charge ends (never as a completion)', () => {
    const epp = new Epp('epp-1', buildFleet(zoneA));
    const d = epp.route(T0, [A0]);
    expect(epp.scheduler.reportServed(d, '10.9.9.9:8000', T0 + 3)).toBe('fallback');
    epp.scheduler.start(d, T0 + 5);
    expect([pod(epp.fleet, 'a0').inFlight, pod(epp.fleet, 'a0').releasedSinceSample]).toEqual([0, 0]);
    expect(epp.batch(T0 + 10).entries.filter((e) => e[0] === STATE_RELEASE)).toEqual([[STATE_RELEASE, 1, RELEASED_WITHOUT_COMPLETION]]);
  });
});

describe('picks between samples see started requests', () => {
  // Three pods of a zone at their learnt batch size of 2, no queue: a new request waits at any of
  // them. Six long requests pinned to a0 and a1 start (their streams end at once, behind Envoy).
  const full = zoneA.map((p) => ({ ...p, running: 2 }));
  function backlogged(): Epp {
    const epp = new Epp('epp-1', buildFleet(full));
    for (const p of full) {
      sample(epp.fleet, { ...p, waiting: 1 }, T0 + 1);
      sample(epp.fleet, { ...p, waiting: 1 }, T0 + 2);
      sample(epp.fleet, { ...p, waiting: 0 }, T0 + 3);
      expect(pod(epp.fleet, p.pod).batchCapacity).toBe(2);
    }
    return epp;
  }

  it('avoid the loaded pods until a sample shows the requests gone, then stop avoiding them', () => {
    const epp = backlogged();
    for (let i = 0; i < 6; i++) {
      const d = epp.route(T0 + 10 + i, [i % 2 === 0 ? A0 : A1]);
      epp.scheduler.start(d, T0 + 20 + i);
    }
    // Long after the picks (their prefills are done): only the charges say a0 and a1 hold 5 each.
    const picks = Array.from({ length: 20 }, (_, i) => next(epp, T0 + 2_000 + i * 100, [A0, A1, A2]));
    expect(new Set(picks)).toEqual(new Set(['a2']));
    // The requests finished; the samples say so: their charges end, and picks spread again.
    for (const p of full) sample(epp.fleet, { ...p, running: 0 }, T0 + 5_000);
    expect([pod(epp.fleet, 'a0').inFlight, pod(epp.fleet, 'a1').inFlight]).toEqual([0, 0]);
    const after = Array.from({ length: 30 }, (_, i) => next(epp, T0 + 5_001 + i, [A0, A1, A2]));
    expect(new Set(after)).toEqual(new Set(['a0', 'a1', 'a2']));
  });

  it('a peer avoids them too: it learns the starts and keeps the charges past the streams', () => {
    const one = backlogged();
    const two = new Epp('epp-2', buildFleet(full), {}, 7);
    for (const p of full) {
      sample(two.fleet, { ...p, waiting: 1 }, T0 + 1);
      sample(two.fleet, { ...p, waiting: 1 }, T0 + 2);
      sample(two.fleet, { ...p, waiting: 0 }, T0 + 3);
    }
    for (let i = 0; i < 6; i++) one.scheduler.start(one.route(T0 + 10 + i, [i % 2 === 0 ? A0 : A1]), T0 + 20 + i);
    two.scheduler.shared.apply(one.batch(T0 + 30), T0 + 31, 'epp-2');
    expect([pod(two.fleet, 'a0').startedInFlight, pod(two.fleet, 'a1').startedInFlight]).toEqual([3, 3]);
    const picks = Array.from({ length: 20 }, (_, i) => next(two, T0 + 2_000 + i * 100, [A0, A1, A2]));
    expect(new Set(picks)).toEqual(new Set(['a2']));
    // The same samples end them on both EPPs; the origin's word arrives after and changes nothing.
    for (const p of full) {
      sample(one.fleet, { ...p, running: 0 }, T0 + 5_000);
      sample(two.fleet, { ...p, running: 0 }, T0 + 5_000);
    }
    expect([pod(two.fleet, 'a0').inFlight, pod(two.fleet, 'a1').inFlight]).toEqual([0, 0]);
    const result = two.scheduler.shared.apply(one.batch(T0 + 5_010), T0 + 5_011, 'epp-2');
    expect(result.outcome).toBe('applied');
    expect(two.scheduler.shared.remoteInFlight).toBe(0);
  });
});

describe("a peer's started requests", () => {
  it('are bounded by the receiver’s own rule, whatever the origin allows', () => {
    const one = new Epp('epp-1', buildFleet(zoneA), { charges: { maxMs: 3_600_000, minMs: 0 } });
    const two = new Epp('epp-2', buildFleet(zoneA), { charges: { maxMs: 5_000, minMs: 0 } });
    const d = one.route(T0, [A0], 1_000_000);
    one.scheduler.start(d, T0 + 5);
    two.scheduler.shared.apply(one.batch(T0 + 6), T0 + 7, 'epp-2');
    expect(pod(two.fleet, 'a0').startedInFlight).toBe(1);
    expect(two.scheduler.expireCharges(T0 + 5_004)).toBe(0);
    expect(two.scheduler.expireCharges(T0 + 5_006)).toBe(1);
    expect(two.scheduler.shared.remoteInFlight).toBe(0);
    expect(pod(one.fleet, 'a0').inFlight).toBe(1); // the origin's own bound is its own
  });

  it('outlive the remote-entry TTL once started, and go with their peer', () => {
    const one = new Epp('epp-1', buildFleet(zoneA));
    const two = new Epp('epp-2', buildFleet(zoneA));
    const started = one.route(T0, [A0]);
    one.route(T0 + 1, [A1]); // never starts: the TTL forgets it
    one.scheduler.start(started, T0 + 5);
    two.scheduler.shared.apply(one.batch(T0 + 6), T0 + 7, 'epp-2');
    const ttl = two.scheduler.shared.remoteEntryTtlMs;
    two.scheduler.shared.apply(one.batch(T0 + ttl - 10), T0 + ttl - 10, 'epp-2'); // a heartbeat
    expect(two.scheduler.shared.expire(T0 + ttl + 10).expired).toBe(1);
    expect([pod(two.fleet, 'a0').inFlight, pod(two.fleet, 'a1').inFlight]).toEqual([1, 0]);
    expect(two.scheduler.shared.forgetPeer('a', 'epp-1')).toBe(1);
    expect([pod(two.fleet, 'a0').inFlight, pod(two.fleet, 'a0').releasedSinceSample]).toEqual([0, 0]);
  });

  it('a start for a request the receiver does not hold is ignored and counted', () => {
    const two = new Epp('epp-2', buildFleet(zoneA));
    const result = two.scheduler.shared.apply(
      { v: 1, pool: POOL, zone: 'a', epp: 'epp-1', seq: 1, sentAt: T0, entries: [[STATE_STARTED, 42, T0, 10, 10]] },
      T0 + 1,
      'epp-2',
    );
    expect(result.ignored).toBe(1);
  });

  it('a warm start hands a starting peer the started requests too', () => {
    const one = new Epp('epp-1', buildFleet(zoneA));
    one.scheduler.start(one.route(T0, [A0]), T0 + 5);
    one.route(T0 + 6, [A1]);
    const snapshot = one.scheduler.shared.snapshot(T0 + 10, false);
    const fresh = new Epp('epp-3', buildFleet(zoneA));
    const batch = decodeStateBatch(
      encodeStateBatch({ v: 1, pool: POOL, zone: 'a', epp: 'epp-1', seq: 0, sentAt: T0 + 10, entries: snapshot, snapshot: { last: true } }),
    );
    if (!batch.ok) throw new Error(batch.detail);
    fresh.scheduler.shared.apply(batch.batch, T0 + 11, 'epp-3');
    expect([pod(fresh.fleet, 'a0').startedInFlight, pod(fresh.fleet, 'a1').inFlight, pod(fresh.fleet, 'a1').startedInFlight]).toEqual([
      1, 1, 0,
    ]);
  });
});

describe('the caps', () => {
  it('an endpoint full of charges ends its oldest started one for a new pick, counted', () => {
    const epp = new Epp('epp-1', buildFleet(zoneA), { charges: { maxPerEndpoint: 2 } });
    const listener = new Listener();
    const first = epp.route(T0, [A0]);
    epp.scheduler.start(first, T0 + 1, listener);
    epp.scheduler.start(epp.route(T0 + 2, [A0]), T0 + 3);
    epp.route(T0 + 4, [A0]);
    expect(listener.ended).toEqual([{ at: T0 + 4, reason: 'cap' }]);
    expect(pod(epp.fleet, 'a0').inFlight).toBe(2);
    expect(epp.fleet.chargeCounters.evicted).toBe(1);
  });
});
