import type { Logger } from 'pino';
import type { Counter } from 'prom-client';
import type { EppMetrics } from './metrics.js';

/** One summary line per this period at most. */
export const DEFAULT_SUMMARY_MS = 30_000;

/** What happened in one period, from the counters' differences. */
export interface ActivitySummary {
  requests: number;
  /** Requests by outcome: routed, 400, 429, 503, ... (only those that occurred). */
  outcomes: Record<string, number>;
  /** Routed requests whose primary was in another zone. */
  spills: number;
  /** Requests the gateway served from a fallback (the primary was penalised). */
  fallbacks: number;
  /** Primaries that answered 5xx or could not be reached (penalised). */
  primaryFailures: number;
}

/**
 * Per-request events are debug lines; at info the EPP says what happened once per period instead:
 * requests by outcome, spills, fallbacks used and failed primaries, from the same counters
 * Prometheus reads. An idle period writes nothing, so a quiet EPP keeps a quiet log, and an
 * incident costs one line per period however many requests it touches.
 */
export class SummaryLog {
  private last = new Map<string, number>();

  constructor(
    private readonly metrics: EppMetrics,
    private readonly logger: Logger,
  ) {}

  /** Computes the period's summary and logs it when anything happened; returns it (tests). */
  async flush(periodMs: number): Promise<ActivitySummary | undefined> {
    const m = this.metrics;
    const [outcomes, spills, fallbacks, primaryFailures] = await Promise.all([
      this.deltas(m.requests, 'outcome'),
      this.deltas(m.spills),
      this.deltas(m.servedElsewhere),
      this.deltas(m.primaryFailed),
    ]);
    const requests = Object.values(outcomes).reduce((a, b) => a + b, 0);
    const summary: ActivitySummary = {
      requests,
      outcomes,
      spills: spills[''] ?? 0,
      fallbacks: fallbacks[''] ?? 0,
      primaryFailures: primaryFailures[''] ?? 0,
    };
    if (requests === 0 && summary.fallbacks === 0 && summary.primaryFailures === 0) return undefined;
    this.logger.info({ periodS: Math.round(periodMs / 1000), ...summary }, 'activity');
    return summary;
  }

  /** The counter's increase since the last call, per value of `label` ('' without one); zeros left out. */
  private async deltas(counter: Counter, label?: string): Promise<Record<string, number>> {
    const out: Record<string, number> = {};
    const { name, values } = await counter.get();
    for (const { value, labels } of values) {
      const key = label === undefined ? '' : String(labels[label] ?? '');
      const id = `${name}/${key}`;
      const delta = value - (this.last.get(id) ?? 0);
      this.last.set(id, value);
      if (delta > 0) out[key] = delta;
    }
    return out;
  }
}

/** Runs a SummaryLog every `periodMs`. */
export function startSummaryLog(metrics: EppMetrics, logger: Logger, periodMs = DEFAULT_SUMMARY_MS): { close(): void } {
  const summary = new SummaryLog(metrics, logger);
  const timer = setInterval(() => {
    summary.flush(periodMs).catch((error: unknown) => logger.warn({ err: error }, 'activity summary failed'));
  }, periodMs);
  timer.unref();
  return { close: () => clearInterval(timer) };
}
