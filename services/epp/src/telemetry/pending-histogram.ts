import type { Histogram } from 'prom-client';

/** What a histogram series holds inside prom-client 15 (`hashMap` values): checked before use. */
interface SeriesValues {
  labels: object;
  bucketValues: Record<number, number>;
  sum: number;
  count: number;
}
interface HistogramInternals {
  hashMap: Record<string, SeriesValues>;
  upperBounds: number[];
  zero(labels: object): void;
  observe(labels: object, value: number): void;
}

function internalsOf(histogram: Histogram<string>): HistogramInternals | undefined {
  const h = histogram as unknown as Partial<HistogramInternals>;
  const ok =
    typeof h.hashMap === 'object' &&
    h.hashMap !== null &&
    Array.isArray(h.upperBounds) &&
    h.upperBounds.every((b) => typeof b === 'number') &&
    typeof h.zero === 'function';
  return ok ? (h as HistogramInternals) : undefined;
}

/**
 * Observations of one histogram series, counted per bucket in a typed array on the request path and
 * added to prom-client's series when the metric is read (its `collect` flushes). prom-client's own
 * observe builds a label hash string, validates the labels and allocates a closure and an object
 * per call, several times per request. A reader sees what observing each value would show: the
 * same buckets (a value counts in the first bucket whose bound is ≥ it) and count, and the same sum
 * up to floating-point rounding (the values are added in another order). Adding to the series reaches into prom-client's internals, so their shape is checked
 * first; should an update change them, every observation goes through prom-client's public
 * observe instead.
 */
export class PendingHistogram {
  private readonly internals: HistogramInternals | undefined;
  private readonly bounds: Float64Array;
  /** Per bucket; the last slot counts values above every bound (+Inf only, as prom-client does). */
  private readonly counts: Float64Array;
  private sum = 0;
  private count = 0;

  constructor(
    private readonly histogram: Histogram<string>,
    /** The series' label values. */
    private readonly labels: Record<string, string> = {},
  ) {
    this.internals = internalsOf(histogram);
    this.bounds = Float64Array.from(this.internals?.upperBounds ?? []);
    this.counts = new Float64Array(this.bounds.length + 1);
  }

  observe(value: number): void {
    if (this.internals === undefined) {
      this.histogram.observe(this.labels, value);
      return;
    }
    // prom-client refuses non-finite values the same way.
    if (!Number.isFinite(value)) throw new TypeError(`Value is not a valid number: ${value}`);
    const bounds = this.bounds;
    let i = 0;
    while (i < bounds.length && value > (bounds[i] as number)) i++;
    this.counts[i] = (this.counts[i] as number) + 1;
    this.sum += value;
    this.count++;
  }

  flush(): void {
    const internals = this.internals;
    if (internals === undefined || this.count === 0) return;
    const series = this.series(internals);
    const bounds = internals.upperBounds;
    for (let i = 0; i < bounds.length; i++) {
      const n = this.counts[i] as number;
      if (n > 0) series.bucketValues[bounds[i] as number] = (series.bucketValues[bounds[i] as number] ?? 0) + n;
    }
    series.sum += this.sum;
    series.count += this.count;
    this.counts.fill(0);
    this.sum = 0;
    this.count = 0;
  }

  /**
   * This series in prom-client's map (the one with the same label values, however it was made),
   * created through the public `zero` when there is none. Reads are rare and series few.
   */
  private series(internals: HistogramInternals): SeriesValues {
    const names = Object.keys(this.labels);
    const same = (labels: object): boolean => {
      const other = labels as Record<string, unknown>;
      return Object.keys(other).length === names.length && names.every((name) => other[name] === this.labels[name]);
    };
    const find = (): SeriesValues | undefined => {
      for (const key in internals.hashMap) {
        const values = internals.hashMap[key] as SeriesValues;
        if (same(values.labels)) return values;
      }
      return undefined;
    };
    const found = find();
    if (found !== undefined) return found;
    internals.zero(this.labels);
    return find() as SeriesValues;
  }
}
