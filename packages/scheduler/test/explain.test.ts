import { describe, expect, it } from 'vitest';
import type { Endpoint } from '@spillway/fleet';
import { Scheduler, type SchedulerConfigInput } from '../src/index.js';
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

describe('Scheduler.explain', () => {
  it('gives the request-independent cost components of each endpoint', () => {
    const { scheduler, pod } = setup();
    expect(scheduler.explain(pod('a2'), T0)?.cost).toMatchObject({
      waitMs: 200,
      prefillMs: 0,
      loraMs: 0,
      rttMs: 0,
      biasMs: 0,
      totalMs: 200,
      stale: false,
      full: false,
    });
    expect(scheduler.explain(pod('b1'), T0)?.cost).toMatchObject({ waitMs: 100, rttMs: 1, biasMs: 8, totalMs: 109 });
    expect(scheduler.explain(pod('c0'), T0)?.cost).toMatchObject({ waitMs: 0, rttMs: 30, biasMs: 8, totalMs: 38 });
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
    expect(scheduler.explain(pod('a1'), T0)?.cost).toMatchObject({ waitMs: 100, totalMs: 100 });
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
