import { describe, expect, it } from 'vitest';
import { PHASES, quantile, shareAtMost, since, type PhaseHistograms, type PhaseSeries } from './extproc/phase-histogram.js';

const BOUNDS = [0.001, 0.002, 0.005, Infinity];
const empty: PhaseSeries = { cumulative: [0, 0, 0, 0], count: 0, sum: 0 };

/** Histograms where `decide` holds the given cumulative counts and every other phase nothing. */
function histograms(decide: number[], sum = 0): PhaseHistograms {
  const phases = Object.fromEntries(PHASES.map((p) => [p, empty])) as PhaseHistograms['phases'];
  phases.decide = { cumulative: decide, count: decide[decide.length - 1] as number, sum };
  return { bounds: BOUNDS, phases };
}

describe("the bench's reading of spillway_request_phase_seconds", () => {
  it('estimates quantiles as histogram_quantile does: linear inside the bucket holding the rank', () => {
    // 50 in (0, 1 ms], 40 in (1, 2], 10 in (2, 5].
    const h = histograms([50, 90, 100, 100]);
    expect(quantile(h, 'decide', 0.5)).toBeCloseTo(0.001);
    expect(quantile(h, 'decide', 0.25)).toBeCloseTo(0.0005);
    expect(quantile(h, 'decide', 0.7)).toBeCloseTo(0.0015);
    expect(quantile(h, 'decide', 0.99)).toBeCloseTo(0.002 + 0.003 * 0.9);
    // Nothing observed: no figure.
    expect(quantile(h, 'parse', 0.5)).toBeNaN();
  });

  it('a rank past the last finite bound is that bound (the +Inf bucket has no width)', () => {
    expect(quantile(histograms([0, 0, 1, 10]), 'decide', 0.99)).toBe(0.005);
  });

  it('the share within a bucket bound is exact, and only bucket bounds are accepted', () => {
    const h = histograms([50, 90, 100, 100]);
    expect(shareAtMost(h, 'decide', 0.002)).toBe(0.9);
    expect(() => shareAtMost(h, 'decide', 0.003)).toThrow(/not a bucket bound/);
  });

  it('takes what was observed between two readings', () => {
    const window = since(histograms([10, 10, 10, 10], 0.005), histograms([60, 100, 110, 110], 0.2));
    expect(window.phases.decide).toEqual({ cumulative: [50, 90, 100, 100], count: 100, sum: 0.195 });
    expect(window.phases.receive).toEqual(empty);
  });
});
