import { describe, expect, it } from 'vitest';
import type { Endpoint } from '@spillway/fleet';
import { Scheduler, type EntryCost, type SchedulerConfigInput } from '../src/index.js';
import { buildFleet, POOL, T0, threeZones } from './fleet-fixture.js';

/**
 * Scheduler.explain: how the scheduler sees one endpoint whatever the request, for the EPP's view.
 * Waits follow the standard pool (fleet-fixture): a backlogged waiting request costs 100 ms; zone b
 * is 1 ms away in the same region, zone c 30 ms in another; zoneBiasMs is 8.
 */
function setup(pods = threeZones(), config: SchedulerConfigInput = {}) {
  const fleet = buildFleet(pods);
  const scheduler = new Scheduler({ fleet, pool: POOL, zone: 'a', region: 'r1', config });
  const pod = (name: string): Endpoint => {
    const endpoint = [...(fleet.pool(POOL)?.endpoints() ?? [])].find((e) => e.pod === name);
    if (!endpoint) throw new Error(`no pod ${name}`);
    return endpoint;
  };
  return { fleet, scheduler, pod };
}

/** An idle step of the fixture's pods: the default 7 ms, slowed by their KV use of 0.1 (× (1 + 2.75 × 0.1)). */
const STEP = 7 * (1 + 2.75 * 0.1);
/** Without a prompt an endpoint costs its queue, half a step to be admitted and one step of prefill. */
const at = (queueMs: number): { waitMs: number; prefillMs: number } => ({ waitMs: queueMs + STEP / 2, prefillMs: STEP });

describe('Scheduler.explain', () => {
  it('gives the request-independent cost components of each endpoint', () => {
    const { scheduler, pod } = setup();
    const a2 = scheduler.explain(pod('a2'), T0)?.cost as EntryCost;
    expect(a2).toMatchObject({ loraMs: 0, rttMs: 0, biasMs: 0, displacementMs: 0, stale: false, full: false, running: 0, slots: 256 });
    expect(a2.waitMs).toBeCloseTo(at(200).waitMs, 1);
    expect(a2.prefillMs).toBeCloseTo(at(200).prefillMs, 1);
    expect(a2.totalMs).toBeCloseTo(200 + 1.5 * STEP, 1);
    expect(a2.stepMs).toBeCloseTo(STEP, 1);
    const b1 = scheduler.explain(pod('b1'), T0)?.cost as EntryCost;
    expect(b1).toMatchObject({ rttMs: 1, biasMs: 8 });
    expect(b1.waitMs).toBeCloseTo(at(100).waitMs, 1);
    expect(b1.totalMs).toBeCloseTo(109 + 1.5 * STEP + b1.displacementMs, 1);
    const c0 = scheduler.explain(pod('c0'), T0)?.cost as EntryCost;
    expect(c0).toMatchObject({ rttMs: 30, biasMs: 8 });
    expect(c0.totalMs).toBeCloseTo(38 + 1.5 * STEP + c0.displacementMs, 1);
  });

  it('marks stale samples and adds their uncertainty', () => {
    const { scheduler, pod } = setup(threeZones({ b0: { metricsAge: 5000 } }));
    const cost = scheduler.explain(pod('b0'), T0)?.cost;
    expect(cost?.stale).toBe(true);
    expect(cost?.suspect).toBe(true); // b1 still reports
    expect(cost?.uncertaintyMs).toBeGreaterThan(0);
  });

  it('reports the penalty left after a failed primary, and nothing once it expired', () => {
    const { scheduler } = setup();
    const decision = scheduler.pick({ model: 'llama' }, T0);
    const primary = decision.entries[0]?.endpoint;
    if (!primary) throw new Error('no primary');
    expect(scheduler.explain(primary, T0)?.penaltyLeftMs).toBe(0);
    scheduler.reportFailed(decision, T0);
    expect(scheduler.explain(primary, T0 + 1000)?.penaltyLeftMs).toBe(4000);
    expect(scheduler.explain(primary, T0 + 5000)?.penaltyLeftMs).toBe(0);
  });

  it('prices with the cost model under the weighted policy too', () => {
    const { scheduler, pod } = setup(threeZones(), { policy: 'weighted' });
    const cost = scheduler.explain(pod('a1'), T0)?.cost as EntryCost;
    expect(cost.waitMs).toBeCloseTo(at(100).waitMs, 1);
    expect(cost.totalMs).toBeCloseTo(100 + 1.5 * STEP, 1);
  });

  it('changes nothing a pick sees', () => {
    const fleet = buildFleet(threeZones());
    const plain = new Scheduler({ fleet: buildFleet(threeZones()), pool: POOL, zone: 'a', region: 'r1', seed: 7 });
    const explained = new Scheduler({ fleet, pool: POOL, zone: 'a', region: 'r1', seed: 7 });
    for (const endpoint of fleet.pool(POOL)?.endpoints() ?? []) explained.explain(endpoint, T0);
    const a = plain.pick({ model: 'llama', prompt: 'x'.repeat(400) }, T0);
    const b = explained.pick({ model: 'llama', prompt: 'x'.repeat(400) }, T0);
    expect(b.destination).toBe(a.destination);
    expect(b.entries.map((e) => e.cost)).toEqual(a.entries.map((e) => e.cost));
  });

  it('is undefined for a pool the fleet does not know', () => {
    const fleet = buildFleet(threeZones());
    const scheduler = new Scheduler({ fleet, pool: 'other', zone: 'a' });
    const endpoint = fleet.pool(POOL)?.endpoints().next().value;
    if (!endpoint) throw new Error('no endpoint');
    expect(scheduler.explain(endpoint, T0)).toBeUndefined();
  });
});
