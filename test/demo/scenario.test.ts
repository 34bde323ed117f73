/** infra/demo/scenario.ts: the phases scaled to a duration, and the capacity estimate. */
import { describe, expect, it } from 'vitest';
import { MIN_DURATION_S, PHASE_WEIGHTS, phaseAt, planScenario, serverCapacity, type ScenarioOptions } from '../../infra/demo/scenario.js';

const base: ScenarioOptions = {
  zones: ['zone-a', 'zone-b', 'zone-c'],
  baseRate: 5,
  capacity: { 'zone-a': 20, 'zone-b': 20, 'zone-c': 14 },
  overloadZone: 'zone-a',
  overloadFactor: 1.5,
  downZone: 'zone-b',
};
const NAMES = ['balanced', 'overload', 'zone-down', 'recovery'];

describe('planScenario', () => {
  it('plays balanced, overload, zone-down, recovery, scaled to exactly the duration', () => {
    const phases = planScenario({ ...base, durationMs: 30_000 });
    expect(phases.map((p) => p.name)).toEqual(NAMES);
    expect(phases[0]!.startMs).toBe(0);
    expect(phases.at(-1)!.endMs).toBe(30_000);
    for (let i = 1; i < phases.length; i++) expect(phases[i]!.startMs).toBe(phases[i - 1]!.endMs);
    // 15:25:15:25 of 30 s, on whole seconds: boundaries at 5.625 -> 6, 15 -> 15, 20.625 -> 21.
    expect(phases.map((p) => [p.startMs, p.endMs])).toEqual([
      [0, 6000],
      [6000, 15_000],
      [15_000, 21_000],
      [21_000, 30_000],
    ]);
  });

  it('keeps every phase non-empty, in proportion and on whole seconds for any duration from the minimum', () => {
    const total = Object.values(PHASE_WEIGHTS).reduce((a, b) => a + b, 0);
    for (let seconds = MIN_DURATION_S; seconds <= 600; seconds++) {
      const phases = planScenario({ ...base, durationMs: seconds * 1000 });
      expect(phases.at(-1)!.endMs).toBe(seconds * 1000);
      phases.forEach((p, i) => {
        const length = p.endMs - p.startMs;
        expect(length).toBeGreaterThanOrEqual(1000);
        expect(p.startMs % 1000).toBe(0);
        const ideal = (seconds * 1000 * Object.values(PHASE_WEIGHTS)[i]!) / total;
        expect(Math.abs(length - ideal)).toBeLessThanOrEqual(1000);
      });
    }
  });

  it('without a duration plays the default lengths, then balanced load forever', () => {
    const phases = planScenario(base);
    expect(phases.map((p) => p.name)).toEqual([...NAMES, 'steady']);
    expect(phases[1]!.endMs - phases[1]!.startMs).toBe(PHASE_WEIGHTS.overload * 1000);
    expect(phases.at(-1)!.endMs).toBe(Infinity);
    expect(phaseAt(phases, 10 * 86_400_000)?.name).toBe('steady');
  });

  it('rejects a duration too short for the scenario', () => {
    expect(() => planScenario({ ...base, durationMs: (MIN_DURATION_S - 1) * 1000 })).toThrow(RangeError);
  });

  it('pushes only the overloaded zone past its capacity, and kills then restarts the down zone', () => {
    const [balanced, overload, down, recovery] = planScenario({ ...base, durationMs: 20_000 });
    expect(balanced!.rates).toEqual({ 'zone-a': 5, 'zone-b': 5, 'zone-c': 5 });
    expect(overload!.rates).toEqual({ 'zone-a': 30, 'zone-b': 5, 'zone-c': 5 });
    expect(down!.actions).toEqual([{ kind: 'kill-servers', zone: 'zone-b' }]);
    expect(recovery!.actions).toEqual([{ kind: 'restart-servers', zone: 'zone-b' }]);
    expect(recovery!.rates).toEqual(balanced!.rates);
    expect([balanced, overload].flatMap((p) => p!.actions)).toEqual([]);
  });

  it('never sends the overloaded zone less than twice the base rate', () => {
    const [, overload] = planScenario({ ...base, baseRate: 40, durationMs: 20_000 });
    expect(overload!.rates['zone-a']).toBe(80);
  });
});

describe('phaseAt', () => {
  it('finds the phase at an offset, and nothing after the end', () => {
    const phases = planScenario({ ...base, durationMs: 30_000 });
    expect(phaseAt(phases, 0)?.name).toBe('balanced');
    expect(phaseAt(phases, 5999)?.name).toBe('balanced');
    expect(phaseAt(phases, 6000)?.name).toBe('overload');
    expect(phaseAt(phases, 29_999)?.name).toBe('recovery');
    expect(phaseAt(phases, 30_000)).toBeUndefined();
  });
});

describe('serverCapacity', () => {
  it('is max-num-seqs over the service time of a full batch', () => {
    const engine = { maxNumSeqs: 4, prefillOverheadMs: 30, prefillPerTokenMs: 1, interTokenMs: 10, loadFactor: 2 };
    // (30 + 10 prompt tokens + 9 decode steps x 10) x 2 = 260 ms; 4 at once.
    expect(serverCapacity(engine, 10, 10)).toBeCloseTo(4000 / 260);
    expect(serverCapacity(engine, 10, 10, 2)).toBeCloseTo(8000 / 260);
    expect(serverCapacity({ ...engine, maxNumSeqs: 1 }, 10, 10)).toBeCloseTo(1000 / 130);
  });
});
