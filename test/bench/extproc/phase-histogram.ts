/**
 * The EPP's `spillway_request_phase_seconds{phase}` (docs/metrics.md) as the bench reads it: scraped
 * from /metrics before and after a run, the difference taken, and quantiles estimated the way
 * Prometheus's histogram_quantile does (linear within the bucket that holds the rank).
 */
export const PHASES = ['receive', 'parse', 'tokenize', 'pick', 'answer', 'decide'] as const;
export type Phase = (typeof PHASES)[number];

export interface PhaseSeries {
  /** Cumulative counts per bucket bound (ascending), the last bound +Inf. */
  readonly cumulative: number[];
  readonly count: number;
  readonly sum: number;
}

export interface PhaseHistograms {
  /** The bucket bounds in seconds, ascending, ending with Infinity. */
  readonly bounds: number[];
  readonly phases: Record<Phase, PhaseSeries>;
}

/** The phase histograms of the EPP serving /metrics on `metricsPort`. */
export async function readPhases(metricsPort: number): Promise<PhaseHistograms> {
  const text = await (await fetch(`http://127.0.0.1:${metricsPort}/metrics`)).text();
  const buckets = new Map<Phase, Map<number, number>>();
  const totals = new Map<Phase, { count: number; sum: number }>();
  for (const match of text.matchAll(/^spillway_request_phase_seconds_(bucket|count|sum)\{([^}]*)\} (\S+)$/gm)) {
    const labels = Object.fromEntries([...(match[2] as string).matchAll(/(\w+)="([^"]*)"/g)].map((m) => [m[1], m[2]]));
    const phase = labels['phase'] as Phase;
    const value = Number(match[3]);
    if (match[1] === 'bucket') {
      const le = labels['le'] === '+Inf' ? Infinity : Number(labels['le']);
      if (!buckets.has(phase)) buckets.set(phase, new Map());
      buckets.get(phase)?.set(le, value);
    } else {
      const total = totals.get(phase) ?? { count: 0, sum: 0 };
      total[match[1] as 'count' | 'sum'] = value;
      totals.set(phase, total);
    }
  }
  const first = buckets.get('decide');
  if (first === undefined) throw new Error('the EPP exports no spillway_request_phase_seconds (an older build?)');
  const bounds = [...first.keys()].sort((a, b) => a - b);
  const phases = Object.fromEntries(
    PHASES.map((phase) => {
      const series = buckets.get(phase);
      return [
        phase,
        {
          cumulative: bounds.map((b) => series?.get(b) ?? 0),
          count: totals.get(phase)?.count ?? 0,
          sum: totals.get(phase)?.sum ?? 0,
        },
      ];
    }),
  ) as Record<Phase, PhaseSeries>;
  return { bounds, phases };
}

/** What was observed between two readings of the same EPP. */
export function since(before: PhaseHistograms, after: PhaseHistograms): PhaseHistograms {
  const phases = Object.fromEntries(
    PHASES.map((phase) => {
      const a = after.phases[phase];
      const b = before.phases[phase];
      return [phase, { cumulative: a.cumulative.map((c, i) => c - (b.cumulative[i] ?? 0)), count: a.count - b.count, sum: a.sum - b.sum }];
    }),
  ) as Record<Phase, PhaseSeries>;
  return { bounds: after.bounds, phases };
}

/**
 * The q-quantile (0..1) of a series in seconds, as histogram_quantile estimates it: linear within the
 * bucket holding the rank (from 0 for the first bucket); the highest finite bound when the rank falls
 * in +Inf; NaN without observations.
 */
export function quantile(histograms: PhaseHistograms, phase: Phase, q: number): number {
  const { cumulative, count } = histograms.phases[phase];
  if (count === 0) return Number.NaN;
  const rank = q * count;
  const bounds = histograms.bounds;
  for (let i = 0; i < bounds.length; i++) {
    if ((cumulative[i] as number) < rank) continue;
    const upper = bounds[i] as number;
    if (upper === Infinity) return bounds[i - 1] as number;
    const lower = i === 0 ? 0 : (bounds[i - 1] as number);
    const below = i === 0 ? 0 : (cumulative[i - 1] as number);
    const inBucket = (cumulative[i] as number) - below;
    return inBucket === 0 ? upper : lower + ((upper - lower) * (rank - below)) / inBucket;
  }
  return bounds[bounds.length - 2] as number;
}

/** The share of a phase's observations at most `bound` seconds (`bound` must be a bucket bound: exact). */
export function shareAtMost(histograms: PhaseHistograms, phase: Phase, bound: number): number {
  const i = histograms.bounds.indexOf(bound);
  if (i < 0) throw new Error(`${bound} s is not a bucket bound of spillway_request_phase_seconds`);
  const { cumulative, count } = histograms.phases[phase];
  return count === 0 ? Number.NaN : (cumulative[i] as number) / count;
}
