import { describe, expect, it } from 'vitest';
import { Scheduler } from '../src/index.js';
import { buildFleet, POOL, T0, threeZones } from './fleet-fixture.js';

// A live config reload: Scheduler.reconfigure puts a new config in force between picks and keeps
// what the scheduler learnt (in-flight accounting, penalties, prefix index).
const prompt = 'You are a helpful assistant. '.repeat(20);

function scheduler(config = {}) {
  const fleet = buildFleet(threeZones());
  return { fleet, scheduler: new Scheduler({ fleet, pool: POOL, zone: 'a', region: 'r1', config, seed: 7 }) };
}

describe('Scheduler.reconfigure', () => {
  it('puts every number in force from the next pick: list length, objectives, policy', () => {
    const { scheduler: s } = scheduler();
    expect(s.pick({ model: 'llama' }, T0).entries).toHaveLength(3);
    expect(s.priorityOf('batch')).toBe(0);
    s.reconfigure({ maxEndpoints: 1, objectives: { batch: { priority: -1 } }, policy: 'weighted' });
    const d = s.pick({ model: 'llama', objective: 'batch' }, T0);
    expect(d.entries).toHaveLength(1);
    expect(d.priority).toBe(-1);
    expect(d.sheddable).toBe(true);
    expect(s.config.policy).toBe('weighted');
    expect(s.config.maxEndpoints).toBe(1);
  });

  it('keeps in-flight accounting, penalties and the prefix index across a reload', () => {
    const { fleet, scheduler: s } = scheduler();
    const first = s.pick({ model: 'llama', prompt }, T0);
    s.commit(first, T0);
    const primary = first.entries[0]!.endpoint;
    expect(fleet.get(POOL, primary.zone, primary.pod)?.inFlight).toBe(1);
    const blocks = s.prefixIndexBlocks;
    expect(blocks).toBeGreaterThan(0);
    // Another request, pinned to c0 by its subset, served by c1 instead: c0 is penalised.
    const other = s.pick({ model: 'llama', subset: ['10.0.2.1:8000'] }, T0);
    s.commit(other, T0);
    s.reportServed(other, '10.0.2.2:8000', T0);
    const penalised = other.entries[0]!.endpoint;
    expect(s.isPenalised(penalised, T0 + 1)).toBe(true);

    s.reconfigure({ zoneBiasMs: 20, penaltyMs: 1000 });
    expect(s.prefixIndexBlocks).toBe(blocks);
    expect(s.isPenalised(penalised, T0 + 1)).toBe(true);
    // The prompt's holder still wins on its cached prefix (once the first request's prefill there is done).
    const again = s.pick({ model: 'llama', prompt }, T0 + 100);
    expect(again.entries[0]?.address).toBe(primary.address);
    // A decision made before the reload is released against the same accounting.
    s.release(first);
    expect(fleet.get(POOL, primary.zone, primary.pod)?.inFlight).toBe(0);
  });

  it('empties the prefix index only when the block geometry changes', () => {
    const { scheduler: s } = scheduler();
    s.commit(s.pick({ model: 'llama', prompt }, T0), T0);
    expect(s.prefixIndexBlocks).toBeGreaterThan(0);
    s.reconfigure({ prefix: { lruCapacity: 1000 } });
    expect(s.prefixIndexBlocks).toBeGreaterThan(0);
    s.reconfigure({ prefix: { blockTokens: 32 } });
    expect(s.prefixIndexBlocks).toBe(0);
  });

  it('rejects a bad config whole and keeps the old one', () => {
    const { scheduler: s } = scheduler({ maxEndpoints: 2 });
    expect(() => s.reconfigure({ maxEndpoints: 0 })).toThrow();
    expect(() => s.reconfigure({ zoneBiasMs: 5, nonsense: true } as never)).toThrow();
    expect(s.config.maxEndpoints).toBe(2);
    expect(s.config.zoneBiasMs).toBe(8);
    expect(s.pick({ model: 'llama' }, T0).entries).toHaveLength(2);
  });
});
