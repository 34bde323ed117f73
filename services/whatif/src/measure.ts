import type { SimEvent } from './events.js';
import type { EventQueue } from './queue.js';
import type { ResolvedScenario, WindowSpec } from './resolve.js';
import type { EppRouter } from './routers.js';
import { slope, Tally, type Figures } from './tally.js';
import type { ReplicaSet } from './replicas.js';

export interface WindowResult extends Figures {
  readonly name: string;
  readonly fromS: number;
  readonly toS: number;
  /** Per endpoint zone: the share of (EPP, endpoint, probe) observations whose metrics were stale. */
  readonly staleShareByZone: Readonly<Record<string, number>>;
  /** Events applied to any EPP's fleet during the window. */
  readonly eventsDelivered: number;
  /** The same figures over the span of equal length just before the window (from the warm-up on). */
  readonly before?: Figures & { readonly fromS: number; readonly toS: number };
}

export interface RunResult extends Figures {
  readonly strategy: string;
  readonly seed: number;
  /**
   * Served rate below arrival rate: the replicas' waiting queues grow (by over 5 % of the arrival
   * rate per second, late in the window). A batch growing towards its limit is not counted: it is
   * bounded by the batch size.
   */
  readonly unbounded: boolean;
  /** Growth of the replicas' waiting queues (summed) over the measured window, req/s. */
  readonly queueGrowthPerS: number;
  readonly windows: readonly WindowResult[];
}

interface Window {
  readonly spec: WindowSpec;
  readonly tally: Tally;
  readonly before: Tally | undefined;
  readonly stale: number[];
  readonly observed: number[];
  delivered: number;
}

const PROBE_EVERY_MS = 250;
const BACKLOG_EVERY_MS = 1000;
/**
 * Queue growth above this share of the arrival rate, over the second half of the measured window
 * (after queues near the knee have settled), counts as unbounded.
 */
const UNBOUNDED_SHARE = 0.05;

/**
 * What a run measures: counts over the measured window and over each fault window and the span
 * before it (ranges of arrival times, `Tally`), output-token totals at range edges, the replicas'
 * waiting queues every second, and each picker's view of each endpoint (fresh or stale) during fault windows.
 */
export class Measurements {
  private readonly measured: Tally;
  private readonly windows: Window[];
  /** The measured window, then per fault window: window, before. */
  readonly ranges: Tally[];
  private readonly backlogTimes: number[] = [];
  private readonly backlogValues: number[] = [];

  constructor(
    private readonly s: ResolvedScenario,
    private readonly wiring: {
      readonly queue: EventQueue<SimEvent>;
      readonly replicas: ReplicaSet;
      /** Every picker's current router (its view of the replicas). */
      readonly routers: () => Iterable<EppRouter>;
    },
  ) {
    const zones = s.zones.length;
    const tenants = s.workload.tenants?.map((t) => t.name);
    this.measured = new Tally(s.warmupMs, s.durationMs, zones, tenants);
    this.windows = s.windows.map((spec) => {
      const len = spec.toMs - spec.fromMs;
      const beforeFrom = Math.max(s.warmupMs, spec.fromMs - len);
      const before = spec.fromMs - beforeFrom >= 1000 ? new Tally(beforeFrom, spec.fromMs, zones, tenants) : undefined;
      return {
        spec,
        tally: new Tally(spec.fromMs, spec.toMs, zones, tenants),
        before,
        stale: new Array<number>(zones).fill(0),
        observed: new Array<number>(zones).fill(0),
        delivered: 0,
      };
    });
    this.ranges = [this.measured, ...this.windows.flatMap((w) => (w.before ? [w.tally, w.before] : [w.tally]))];
  }

  /** Range edges, the first probe and the first backlog sample. */
  start(): void {
    const queue = this.wiring.queue;
    for (const range of this.ranges) {
      queue.push(range.fromMs, { kind: 'mark', tally: range, edge: 'start' });
      queue.push(range.toMs, { kind: 'mark', tally: range, edge: 'end' });
    }
  }

  /** The periodic samplers (probe only when there are fault windows). */
  startSamplers(): void {
    if (this.windows.length > 0) this.wiring.queue.push(0, { kind: 'probe' });
    this.wiring.queue.push(this.s.warmupMs, { kind: 'backlog' });
  }

  /** Applies `f` to every range holding this arrival time. */
  count(arrivalAt: number, f: (t: Tally) => void): void {
    for (const range of this.ranges) if (range.contains(arrivalAt)) f(range);
  }

  mark(e: SimEvent<'mark'>): void {
    if (e.edge === 'start') e.tally.tokensAtStart = this.wiring.replicas.totalTokens();
    else e.tally.tokensAtEnd = this.wiring.replicas.totalTokens();
  }

  backlogSample(now: number): void {
    this.backlogTimes.push(now / 1000);
    this.backlogValues.push(this.wiring.replicas.waiting());
    if (now + BACKLOG_EVERY_MS <= this.s.durationMs) this.wiring.queue.push(now + BACKLOG_EVERY_MS, { kind: 'backlog' });
  }

  /** An event reached an EPP's fleet. */
  delivered(now: number): void {
    for (const w of this.windows) if (now >= w.spec.fromMs && now < w.spec.toMs) w.delivered++;
  }

  /** Every picker's view of every endpoint: fresh or stale (older than `staleAfterMs`), by the endpoint's zone, for the windows in force. */
  probe(now: number): void {
    if (now + PROBE_EVERY_MS < this.s.durationMs) this.wiring.queue.push(now + PROBE_EVERY_MS, { kind: 'probe' });
    const open = this.windows.filter((w) => now >= w.spec.fromMs && now < w.spec.toMs);
    if (open.length === 0) return;
    for (const router of this.wiring.routers()) {
      for (const r of this.wiring.replicas.all) {
        const stale = router.isStale(r.info.index, now, this.s.signals.staleAfterMs);
        for (const w of open) {
          (w.observed[r.info.zoneIndex] as number)++;
          if (stale) (w.stale[r.info.zoneIndex] as number)++;
        }
      }
    }
  }

  result(strategy: string, seed: number): RunResult {
    const s = this.s;
    const zones = s.zones.map((z) => z.zone);
    const figures = this.measured.figures(zones);
    const growth = slope(this.backlogTimes, this.backlogValues);
    const half = Math.floor(this.backlogTimes.length / 2);
    const lateGrowth = slope(this.backlogTimes.slice(half), this.backlogValues.slice(half));
    const arrivalRate = figures.arrivals / ((s.durationMs - s.warmupMs) / 1000);
    const windows: WindowResult[] = this.windows.map((w) => {
      const staleShareByZone = Object.fromEntries(
        zones.map((z, i) => [
          z,
          (w.observed[i] as number) > 0 ? Math.round(((w.stale[i] as number) / (w.observed[i] as number)) * 10_000) / 10_000 : 0,
        ]),
      );
      return {
        name: w.spec.name,
        fromS: w.spec.fromMs / 1000,
        toS: w.spec.toMs / 1000,
        ...w.tally.figures(zones),
        staleShareByZone,
        eventsDelivered: w.delivered,
        ...(w.before ? { before: { fromS: w.before.fromMs / 1000, toS: w.before.toMs / 1000, ...w.before.figures(zones) } } : {}),
      };
    });
    return {
      strategy,
      seed,
      ...figures,
      unbounded: lateGrowth > UNBOUNDED_SHARE * arrivalRate,
      queueGrowthPerS: Math.round(growth * 100) / 100,
      windows,
    };
  }
}
