/**
 * Increments of one counter child, summed in a plain number on the request path and handed to
 * prom-client when the metric is read: prom-client's inc costs a hash-map lookup and validation per
 * call, several times per request. Every read of a metric (registry.metrics(), metric.get()) runs
 * its `collect`, which flushes, so readers see exactly the counts they would have seen.
 */
export class PendingCount {
  private delta = 0;
  // Touched since the last flush: a gauge's +1 -1 nets to 0 but must still create its series.
  private dirty = false;

  constructor(private readonly child: { inc(value: number): void }) {}

  inc(value = 1): void {
    this.delta += value;
    this.dirty = true;
  }

  dec(): void {
    this.delta -= 1;
    this.dirty = true;
  }

  flush(): void {
    if (!this.dirty) return;
    const delta = this.delta;
    this.delta = 0;
    this.dirty = false;
    this.child.inc(delta);
  }
}
