import { describe, expect, it } from 'vitest';
import { Scheduler, shouldHold, type PricedCandidates, type SchedulerConfigInput } from '../src/index.js';
import { buildFleet, POOL, T0, threeZones, type PodSpec } from './fleet-fixture.js';

/**
 * Hold or spill as one decision. The standard pool (fleet-fixture): zone a local (r1), b (r1),
 * c (r2); a backlogged waiting request costs 100 ms, a remote zone its round trip (1 / 30 ms) plus
 * the 8 ms bias. The hold budget is 50 ms here.
 */
const FLOW: SchedulerConfigInput = { flowControl: { enabled: true, holdAboveMs: 50 } };

const withWaiting = (waiting: Record<string, number>): PodSpec[] =>
  threeZones().map((p) => ({ ...p, waiting: waiting[p.zone] ?? 0, running: 20 }));

function pick(pods: PodSpec[], config: SchedulerConfigInput, subset?: string[]) {
  const scheduler = new Scheduler({ fleet: buildFleet(pods), pool: POOL, zone: 'a', region: 'r1', config });
  return scheduler.pick({ model: 'm', subset }, T0);
}

const localSubset = threeZones()
  .filter((p) => p.zone === 'a')
  .map((p) => p.address);

describe('hold or spill (scheduler)', () => {
  it('holds when every local endpoint is past the budget and no remote one is eligible (strict subset)', () => {
    const d = pick(withWaiting({ a: 2, b: 0, c: 0 }), { ...FLOW, subsetMode: 'strict' }, localSubset);
    expect(d.status).toBe('routed');
    expect(d.hold).toBe(true);
  });

  it('does not hold while any eligible endpoint has room', () => {
    const pods = withWaiting({ a: 2 }).map((p) => (p.pod === 'a1' ? { ...p, waiting: 0 } : p));
    expect(pick(pods, { ...FLOW, subsetMode: 'strict' }, localSubset).hold).toBe(false);
  });

  it('spills at once instead of holding when a remote endpoint has room', () => {
    const d = pick(withWaiting({ a: 2, b: 0, c: 0 }), { ...FLOW, subsetMode: 'locality' }, localSubset);
    expect(d.hold).toBe(false);
    expect(d.rule).toBe('spill');
  });

  it('holds when local room is expected sooner than the best remote cost', () => {
    // a: 200 ms wait, room in 150 ms; b: 300 + 1 + 8 = 309 ms; c: 338 ms.
    const d = pick(withWaiting({ a: 2, b: 3, c: 3 }), { ...FLOW, subsetMode: 'locality' }, localSubset);
    expect(d.hold).toBe(true);
  });

  it('spills at once when waiting for local room would take longer than the best remote endpoint', () => {
    // a: 900 ms wait, room in 850 ms; b costs 309 ms.
    const d = pick(withWaiting({ a: 9, b: 3, c: 3 }), { ...FLOW, subsetMode: 'locality' }, localSubset);
    expect(d.hold).toBe(false);
    expect(d.rule).toBe('spill');
  });

  it('never holds with flow control off, whatever the load; on by default', () => {
    expect(pick(withWaiting({ a: 9, b: 9, c: 9 }), { subsetMode: 'strict', flowControl: { enabled: false } }, localSubset).hold).toBe(
      false,
    );
    expect(pick(withWaiting({ a: 9, b: 9, c: 9 }), { subsetMode: 'strict' }, localSubset).hold).toBe(true);
  });

  it('a sheddable request over shedAboveMs is still shed (429), not held', () => {
    const scheduler = new Scheduler({
      fleet: buildFleet(withWaiting({ a: 20 })),
      pool: POOL,
      zone: 'a',
      config: { ...FLOW, subsetMode: 'strict', objectives: { batch: { priority: -1 } } },
    });
    const d = scheduler.pick({ model: 'm', subset: localSubset, objective: 'batch' }, T0);
    expect(d.status).toBe(429);
    expect(d.hold).toBe(false);
  });
});

describe('shouldHold', () => {
  const priced = (rows: readonly [key: number, wait: number, local: boolean][]): PricedCandidates => ({
    count: rows.length,
    keys: Float64Array.from(rows.map((r) => r[0])),
    waits: Float64Array.from(rows.map((r) => r[1])),
    tiers: Uint8Array.from(rows.map((r) => (r[2] ? 0 : 1))),
    limitBand: 2e9,
  });

  it('reads room from the waits and fullness from the limit band', () => {
    expect(shouldHold(priced([[60, 60, true]]), 50)).toBe(true);
    expect(shouldHold(priced([[50, 50, true]]), 50)).toBe(false);
    // Full with a short wait: no room there, but room is expected soon.
    expect(shouldHold(priced([[2e9 + 10, 10, true]]), 50)).toBe(true);
    // A full remote endpoint is never cheaper than waiting at home.
    expect(
      shouldHold(
        priced([
          [500, 500, true],
          [2e9 + 5, 5, false],
        ]),
        50,
      ),
    ).toBe(true);
    expect(
      shouldHold(
        priced([
          [500, 500, true],
          [300, 290, false],
        ]),
        50,
      ),
    ).toBe(false);
    expect(shouldHold(priced([[60, 60, false]]), 50)).toBe(false);
    expect(shouldHold(priced([]), 50)).toBe(false);
  });
});
