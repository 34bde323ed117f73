import type { Counter } from 'prom-client';

/**
 * Makes a Prometheus counter follow plain-number sources (bumped where things happen, off
 * prom-client): the returned function, called from the counter's `collect`, advances each labelled
 * series by what its source grew since the last scrape. Every series is touched, so each exists
 * from the first scrape.
 */
export function mirrorCounter<L extends string>(
  counter: Counter<L>,
  sources: readonly [Partial<Record<L, string>>, () => number][],
): () => void {
  const reported = sources.map(() => 0);
  return () => {
    sources.forEach(([labels, read], i) => {
      const value = read();
      const delta = value - (reported[i] as number);
      counter.inc(labels, Math.max(0, delta));
      reported[i] = value;
    });
  };
}
