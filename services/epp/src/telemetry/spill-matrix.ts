/** What SpillMatrix.snapshot reports. */
export interface SpillSnapshot {
  /** Seconds the rates average over: the window, or the time since start when shorter. */
  readonly windowS: number;
  /** Every zone counted so far, in the order first seen (the last may be `(other)`). */
  readonly zones: readonly string[];
  /** perS[from][to]: requests per second from gateway zone `zones[from]` to serving zone `zones[to]`. */
  readonly perS: readonly (readonly number[])[];
  /** series[to]: requests picked into `zones[to]` in each of the last `window` seconds, oldest first (this second last, partial). */
  readonly series: readonly (readonly number[])[];
}

/** Where zones past `maxZones` are counted. */
export const OTHER_ZONE = '(other)';

/**
 * Requests per second from each gateway zone to each serving zone over the last minute, counted on
 * the request path. A ring of per-second slots, each a zone-by-zone block of counters: recording is
 * two Map lookups and an increment, with no allocation once both zones are known (a slot is zeroed
 * in place when a new second reuses it). Memory is fixed at `window × maxZones²` counters; zones
 * past `maxZones - 1` share the last index, `(other)`, so hostile zone names cannot grow it.
 *
 * Pure: the clock is handed in. This EPP records its own picks (from its zone); a source of other
 * EPPs' picks may record theirs with their gateway zone.
 */
export class SpillMatrix {
  private readonly zones: string[] = [];
  private readonly index = new Map<string, number>();
  private readonly counts: Uint32Array;
  /** The epoch second each slot counts, -1 when unused. */
  private readonly seconds: Float64Array;
  private readonly block: number;

  constructor(
    /** When counting started (ms): rates of a younger matrix average over its age. */
    private readonly startedAt: number,
    readonly window = 60,
    readonly maxZones = 32,
  ) {
    if (!Number.isInteger(window) || window < 1) throw new Error(`window must be a positive integer (seconds), got ${window}`);
    if (!Number.isInteger(maxZones) || maxZones < 2) throw new Error(`maxZones must be an integer of at least 2, got ${maxZones}`);
    this.block = maxZones * maxZones;
    this.counts = new Uint32Array(window * this.block);
    this.seconds = new Float64Array(window).fill(-1);
  }

  /** One request from a gateway in zone `from`, picked into zone `to`, at `now` (ms). */
  record(from: string, to: string, now: number): void {
    const second = Math.floor(now / 1000);
    const slot = second % this.window;
    const offset = slot * this.block;
    if (this.seconds[slot] !== second) {
      this.counts.fill(0, offset, offset + this.block);
      this.seconds[slot] = second;
    }
    this.counts[offset + this.indexOf(from) * this.maxZones + this.indexOf(to)]! += 1;
  }

  snapshot(now: number): SpillSnapshot {
    const current = Math.floor(now / 1000);
    const n = this.zones.length;
    const totals = Array.from({ length: n }, () => new Array<number>(n).fill(0));
    const series = Array.from({ length: n }, () => new Array<number>(this.window).fill(0));
    for (let age = 0; age < this.window; age++) {
      const second = current - age;
      const slot = ((second % this.window) + this.window) % this.window;
      if (this.seconds[slot] !== second) continue;
      const offset = slot * this.block;
      for (let from = 0; from < n; from++) {
        const row = totals[from]!;
        for (let to = 0; to < n; to++) {
          const count = this.counts[offset + from * this.maxZones + to]!;
          if (count === 0) continue;
          row[to]! += count;
          series[to]![this.window - 1 - age]! += count;
        }
      }
    }
    const windowS = Math.min(this.window, Math.max(1, (now - this.startedAt) / 1000));
    return { windowS, zones: [...this.zones], perS: totals.map((row) => row.map((count) => count / windowS)), series };
  }

  private indexOf(zone: string): number {
    const known = this.index.get(zone);
    if (known !== undefined) return known;
    if (this.zones.length === this.maxZones - 1) this.zones.push(OTHER_ZONE);
    if (this.zones.length >= this.maxZones) return this.maxZones - 1;
    const next = this.zones.length;
    this.zones.push(zone);
    this.index.set(zone, next);
    return next;
  }
}
