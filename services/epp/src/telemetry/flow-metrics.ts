import { Counter, Gauge, Histogram, type Registry } from 'prom-client';
import type { BandStats } from '@spillway/scheduler';
import type { FlowOutcome } from '../request/observer.js';

/** Seconds a request waits in flow control's queue: from a few ms (the next sample) to maxHoldMs. */
const WAIT_BUCKETS = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60];
/** Fairness ids that get a label of their own; the rest are `other` (the header is client-chosen). */
export const FLOW_LABELS = 16;
/** Priority bands that get a label of their own (bands come from the configured objectives). */
export const BAND_LABELS = 32;

/** What the gauges read when scraped: flow control's queue. */
export interface FlowSource {
  readonly size: number;
  readonly bytes: number;
  readonly flows: number;
  bandStats(): BandStats[];
}

/**
 * Flow control's metrics (docs/metrics.md). Labels are bounded: `band` is the priority (at most
 * BAND_LABELS distinct, then `other`), `flow` the fairness id for the first FLOW_LABELS ids this
 * EPP saw (`default` without one), every later id `other`, so a flood of made-up ids cannot grow
 * the series.
 */
export class FlowMetrics {
  private readonly outcomes: Counter<'band' | 'flow' | 'outcome'>;
  private readonly waits: Histogram<'band' | 'outcome'>;
  private readonly flowLabels = new Map<string, string>();
  private readonly bandLabels = new Map<number, string>();
  private source: FlowSource | undefined;

  constructor(registry: Registry) {
    const registers = [registry];
    this.outcomes = new Counter({
      name: 'spillway_flow_control_requests_total',
      help: 'Requests flow control held (outcome held) and how each left its queue: dispatched, expired (maxHoldMs: 429/503 queue_timeout), evicted (a higher band took its place: queue_full), refused (the queue was full: queue_full), cancelled (its stream went away), unroutable (nothing eligible at its turn), shutdown. By band (priority) and flow (fairness id; bounded, `other` past the first 16).',
      labelNames: ['band', 'flow', 'outcome'] as const,
      registers,
    });
    this.waits = new Histogram({
      name: 'spillway_flow_control_wait_seconds',
      help: 'Time a request spent held, by band and how it left the queue.',
      labelNames: ['band', 'outcome'] as const,
      buckets: WAIT_BUCKETS,
      registers,
    });
    const source = (): FlowSource | undefined => this.source;
    const bandLabel = (priority: number): string => this.band(priority);
    const gauge = (name: string, help: string, read: (s: FlowSource) => number): void => {
      new Gauge({
        name,
        help,
        registers,
        collect() {
          const from = source();
          this.set(from === undefined ? 0 : read(from));
        },
      });
    };
    gauge(
      'spillway_flow_control_held_bytes',
      'Bytes flow control holds (bodies, headers, fairness ids; bounded by maxHeldBytes).',
      (s) => s.bytes,
    );
    gauge('spillway_flow_control_flows', 'Flows (band, fairness id) with a request held.', (s) => s.flows);
    new Gauge({
      name: 'spillway_flow_control_held_requests',
      help: 'Requests flow control holds now, by band (priority).',
      labelNames: ['band'] as const,
      registers,
      collect() {
        this.reset();
        const bands = source()?.bandStats() ?? [];
        for (const band of bands) this.inc({ band: bandLabel(band.priority) }, band.requests);
      },
    });
  }

  /** The queue the gauges read. */
  attach(source: FlowSource): void {
    this.source = source;
  }

  held(priority: number, flow: string): void {
    this.outcomes.inc({ band: this.band(priority), flow: this.flow(flow), outcome: 'held' });
  }

  left(priority: number, flow: string, outcome: FlowOutcome, waitedMs: number): void {
    const band = this.band(priority);
    this.outcomes.inc({ band, flow: this.flow(flow), outcome });
    if (outcome !== 'refused') this.waits.observe({ band, outcome }, waitedMs / 1000);
  }

  private flow(id: string): string {
    const known = this.flowLabels.get(id);
    if (known !== undefined) return known;
    if (this.flowLabels.size >= FLOW_LABELS) return 'other';
    const label = id === '' ? 'default' : id;
    this.flowLabels.set(id, label);
    return label;
  }

  private band(priority: number): string {
    const known = this.bandLabels.get(priority);
    if (known !== undefined) return known;
    if (this.bandLabels.size >= BAND_LABELS) return 'other';
    const label = String(priority);
    this.bandLabels.set(priority, label);
    return label;
  }
}
