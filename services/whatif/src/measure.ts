import type { SimEvent } from './events.js';
import type { EventQueue } from './queue.js';
import type { ResolvedScenario, WindowSpec } from './resolve.js';
import { GLOBAL_ZONE, POOL } from './routers.js';
import { slope, Tally, type Figures } from './tally.js';
import type { Fleet } from '@spillway/fleet';
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
  /** Served rate below arrival rate: the backlog grows (by over 5 % of the arrival rate per second, late in the window). */
  readonly unbounded: boolean;
  /** Growth of the backlog (requests accepted but not finished) over the measured window, req/s. */
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
 * Backlog growth above this share of the arrival rate, over the second half of the measured window
 * (after queues near the knee have settled), counts as unbounded.
 */
const UNBOUNDED_SHARE = 0.05;

/**
 * What a run measures: counts over the measured window and over each fault window and the span
 * before it (ranges of arrival times, `Tally`), output-token totals at range edges, the backlog
 * every second, and each EPP's view of each endpoint (fresh or stale) during fault windows.
 */
export class Measurements {
  private readonly measured: Tally;
  private readonly windows: Window[];
  /** The measured window, then per fault window: window, before. */
  readonly ranges: Tally[];
  /** Requests accepted and not finished. */
  backlog = 0;
  private readonly backlogTimes: number[] = [];
  private readonly backlogValues: number[] = [];

  constructor(
    private readonly s: ResolvedScenario,
    private readonly wiring: {
      readonly queue: EventQueue<SimEvent>;
      readonly replicas: ReplicaSet;
      readonly fleets: () => Iterable<Fleet>;
      readonly global: boolean;
    },
  ) {
    const zones = s.zones.length;
    this.measured = new Tally(s.warmupMs, s.durationMs, zones);
    this.windows = s.windows.map((spec) => {
      const len = spec.toMs - spec.fromMs;
      const beforeFrom = Math.max(s.warmupMs, spec.fromMs - len);
      const before = spec.fromMs - beforeFrom >= 1000 ? new Tally(beforeFrom, spec.fromMs, zones) : undefined;
      return {
        spec,
        tally: new Tally(spec.fromMs, spec.toMs, zones),
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
    this.backlogValues.push(this.backlog);
    if (now + BACKLOG_EVERY_MS <= this.s.durationMs) this.wiring.queue.push(now + BACKLOG_EVERY_MS, { kind: 'backlog' });
  }

  /** An event reached an EPP's fleet. */
  delivered(now: number): void {
    for (const w of this.windows) if (now >= w.spec.fromMs && now < w.spec.toMs) w.delivered++;
  }

  /** Every EPP's view of every endpoint: fresh or stale, by the endpoint's zone, for the windows in force. */
  probe(now: number): void {
    if (now + PROBE_EVERY_MS < this.s.durationMs) this.wiring.queue.push(now + PROBE_EVERY_MS, { kind: 'probe' });
    const open = this.windows.filter((w) => now >= w.spec.fromMs && now < w.spec.toMs);
    if (open.length === 0) return;
    for (const fleet of this.wiring.fleets()) {
      for (const r of this.wiring.replicas.all) {
        const endpoint = fleet.get(POOL, this.wiring.global ? GLOBAL_ZONE : r.info.zone, r.info.pod);
        const stale = !endpoint || !fleet.isFresh(endpoint, now);
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
