import type { Histogram } from 'prom-client';
import { UsageTail } from '@spillway/protocol';
import type { EppMetrics } from './metrics.js';
import { PendingCount } from './pending-count.js';
import type { PendingHistogram } from './pending-histogram.js';

type HistogramChild = ReturnType<Histogram<'model_name' | 'target_model_name'>['labels']>;

/**
 * The `error_code` of the Gateway API Inference Extension's EPP (now in llm-d; the reference EPP
 * below) for an HTTP status the EPP answered with: the same values, so
 * dashboards built for it read Spillway too. A fixed set, whatever the request.
 */
export function errorCodeOf(status: number): string {
  switch (status) {
    case 400:
    case 413:
      return 'BadRequest';
    case 404:
      return 'NotFound';
    case 429:
      return 'ResourceExhausted';
    case 503:
      return 'ServiceUnavailable';
    default:
      return 'Internal';
  }
}

/** The metric children of one (model_name, target_model_name) pair, made once and reused. */
class PairSeries {
  readonly byPriority = new Map<number, PendingCount>();
  // Batched (PendingHistogram): observed on every routed request.
  readonly requestSize: PendingHistogram;
  readonly duration: PendingHistogram;
  // Made on first use: they only ever fill when response bodies are streamed to the EPP.
  private responseChildren:
    { size: HistogramChild; input: HistogramChild; output: HistogramChild; cached: HistogramChild; ntpot: HistogramChild } | undefined;

  constructor(
    private readonly metrics: EppMetrics,
    private readonly labels: { model_name: string; target_model_name: string },
  ) {
    this.requestSize = metrics.batchedHistogram(metrics.requestSizes, labels);
    this.duration = metrics.batchedHistogram(metrics.requestDuration, labels);
  }

  requests(priority: number): PendingCount {
    // By priority: no key string is built per request. Priorities come from config, so this map stays small.
    let count = this.byPriority.get(priority);
    if (count === undefined) {
      count = new PendingCount(this.metrics.objectiveRequests.labels({ ...this.labels, priority: String(priority) }));
      this.byPriority.set(priority, count);
    }
    return count;
  }

  response(): NonNullable<PairSeries['responseChildren']> {
    const m = this.metrics;
    return (this.responseChildren ??= {
      size: m.responseSizes.labels(this.labels),
      input: m.inputTokens.labels(this.labels),
      output: m.outputTokens.labels(this.labels),
      cached: m.cachedTokens.labels(this.labels),
      ntpot: m.normalizedTimePerOutputToken.labels(this.labels),
    });
  }

  error(code: string): void {
    this.metrics.objectiveErrors.inc({ ...this.labels, error_code: code });
  }

  flush(): void {
    for (const count of this.byPriority.values()) count.flush();
  }
}

/**
 * One routed request's metric bookkeeping, from the pick to its end (its completion when the EPP
 * sees it, else the end of its charge: docs/metrics.md): its series, when it started, and (only
 * when the gateway streams the response body) the body's last bytes, where the token usage is.
 */
export class TrackedRequest {
  private body: UsageTail | undefined;
  private finished = false;

  constructor(
    readonly series: PairSeries,
    readonly running: PendingCount,
    /** ms (EPP clock) when the request's stream began. */
    readonly startedAt: number,
  ) {}

  /** A response body chunk passed through the EPP. */
  responseBody(chunk: Uint8Array): void {
    (this.body ??= new UsageTail()).push(chunk);
  }

  /** The model server answered with an error status. */
  modelServerError(): void {
    this.series.error('ModelServerError');
  }

  /** Its charge ended without a completion seen (by the endpoint's samples, at its bound): the request's end as the EPP knows it. */
  chargeEnded(at: number): void {
    this.finish(at);
  }

  /** The request ended: its duration, and its size and tokens when the response body was seen. Only the first end counts. */
  finish(now: number): void {
    if (this.finished) return;
    this.finished = true;
    this.running.dec();
    const seconds = Math.max(0, now - this.startedAt) / 1000;
    this.series.duration.observe(seconds);
    const body = this.body;
    if (body === undefined) return;
    this.body = undefined;
    const response = this.series.response();
    response.size.observe(body.bytes);
    const usage = body.usage();
    if (usage === undefined) return;
    response.input.observe(usage.inputTokens);
    response.output.observe(usage.outputTokens);
    if (usage.cachedTokens !== undefined) response.cached.observe(usage.cachedTokens);
    if (usage.outputTokens > 0) response.ntpot.observe(seconds / usage.outputTokens);
  }
}

/**
 * Per-model request metrics with the reference EPP's names and labels: `model_name` is the model
 * the client asked for, `target_model_name` the model sent upstream after rewrites, both as label
 * values (ModelLabels: configured models, everything else `other`), so the series are bounded by
 * the config file. Children are made once per label set and reused, off the request path's hot
 * allocations; the counters are batched (PendingCount) and flushed whenever metrics are read.
 */
export class RequestMetrics {
  private readonly pairs = new Map<string, Map<string, PairSeries>>();
  private readonly running = new Map<string, PendingCount>();

  constructor(private readonly metrics: EppMetrics) {
    metrics.onRead(() => this.flush());
  }

  /** A request was routed: counted, its size observed, and running until `finish`. */
  track(model: string, target: string, priority: number, requestBytes: number, startedAt: number): TrackedRequest {
    const series = this.series(model, target);
    series.requests(priority).inc();
    series.requestSize.observe(requestBytes);
    const running = this.runningOf(model);
    running.inc();
    return new TrackedRequest(series, running, startedAt);
  }

  /** A request the EPP answered with an error (400, 413, 429, 503, ...). */
  rejected(model: string, target: string, status: number): void {
    this.series(model, target).error(errorCodeOf(status));
  }

  private series(model: string, target: string): PairSeries {
    let byTarget = this.pairs.get(model);
    if (byTarget === undefined) {
      byTarget = new Map();
      this.pairs.set(model, byTarget);
    }
    let series = byTarget.get(target);
    if (series === undefined) {
      series = new PairSeries(this.metrics, { model_name: model, target_model_name: target });
      byTarget.set(target, series);
    }
    return series;
  }

  private runningOf(model: string): PendingCount {
    let running = this.running.get(model);
    if (running === undefined) {
      running = new PendingCount(this.metrics.runningRequests.labels({ model_name: model }));
      this.running.set(model, running);
    }
    return running;
  }

  private flush(): void {
    for (const running of this.running.values()) running.flush();
    for (const byTarget of this.pairs.values()) for (const series of byTarget.values()) series.flush();
  }
}
