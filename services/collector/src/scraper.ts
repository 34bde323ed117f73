import type { Engine } from '@spillway/events';
import type { Dispatcher } from 'undici';
import { BudgetError, type ScrapeLimits } from './budget.js';
import { GetError, getStreamed, originOf } from './http-get.js';
import { ExtractError, ScrapeReader, type Extracted } from './scrape.js';
import type { ScrapeFailureReason } from './self-metrics.js';

export interface ScraperOptions {
  timeoutMs: number;
  path: string;
  /** Consecutive failures after which the endpoint is backed off. */
  failureThreshold: number;
  /** First back-off delay; it doubles with every further failure up to `maxBackoffMs`. */
  backoffMs: number;
  maxBackoffMs: number;
  limits: ScrapeLimits;
}

export interface ScrapeHooks {
  /** A good sample; `startedAt` is the wall-clock start of the scrape, `startedPerf` its monotonic start. */
  onSample(extracted: Extracted, startedAt: number, startedPerf: number): void;
  /** `retryInMs`: when the endpoint is backed off, the delay before its next attempt. */
  onFailure(reason: ScrapeFailureReason, message: string, consecutive: number, retryInMs: number | undefined): void;
  /** The endpoint answered again after `failures` consecutive failures. */
  onRecovered(failures: number): void;
  onSkipped(): void;
}

/**
 * Scrapes one endpoint's metrics once per tick of a shared scheduler. Endpoints never wait on each
 * other: each has its own promise, and a scrape that is still running when the next tick comes makes
 * that tick a skip rather than a second request (no pile-up on a slow server). Every scrape is
 * bounded in bytes, kept lines and CPU (ScrapeLimits) as well as time.
 *
 * After `failureThreshold` consecutive failures the endpoint publishes nothing (the EPP sees its
 * metrics go stale) and is backed off: retried after `backoffMs`, then twice that, and so on up to
 * `maxBackoffMs`, until it answers again. A scrape that exceeds its budget (`too-large`,
 * `too-slow`) backs off at once: such a server will not shrink by itself, and every attempt costs.
 */
export class Scraper {
  private unschedule: (() => void) | undefined;
  private inFlight = false;
  private stopped = false;
  private failures = 0;
  private nextAttemptAt = 0;

  constructor(
    private readonly dispatcher: Dispatcher,
    private readonly address: string,
    private readonly engine: () => Engine | undefined,
    private readonly options: ScraperOptions,
    private readonly hooks: ScrapeHooks,
  ) {}

  /** True after `failureThreshold` consecutive failures (or one over budget), until a scrape succeeds. */
  get failing(): boolean {
    return this.failures >= this.options.failureThreshold;
  }

  /**
   * Ticks once per interval of `scheduler` (the collector's ScrapeScheduler, shared by every
   * scraper so their starts are spread evenly over the interval), until stopped.
   */
  start(scheduler: { add(tick: () => void): () => void }): void {
    if (this.stopped || this.unschedule !== undefined) return;
    this.unschedule = scheduler.add(() => void this.tick());
  }

  stop(): void {
    this.stopped = true;
    this.unschedule?.();
    this.unschedule = undefined;
  }

  private async tick(): Promise<void> {
    if (this.stopped) return;
    if (this.inFlight) {
      this.hooks.onSkipped();
      return;
    }
    if (this.failing && performance.now() < this.nextAttemptAt) return;
    this.inFlight = true;
    const startedAt = Date.now();
    const startedPerf = performance.now();
    try {
      const reader = new ScrapeReader(this.engine(), this.options.limits);
      const { timeoutMs, limits, path } = this.options;
      await getStreamed(this.dispatcher, { origin: originOf(this.address), path, timeoutMs, maxBytes: limits.maxBytes }, (chunk) =>
        reader.push(chunk),
      );
      if (this.stopped) return;
      const extracted = reader.finish();
      const failures = this.failures;
      this.failures = 0;
      if (failures > 0) this.hooks.onRecovered(failures);
      this.hooks.onSample(extracted, startedAt, startedPerf);
    } catch (error) {
      if (this.stopped) return;
      const overBudget = error instanceof BudgetError || (error instanceof GetError && error.reason === 'too-large');
      this.failures = overBudget ? Math.max(this.failures + 1, this.options.failureThreshold) : this.failures + 1;
      let retryInMs: number | undefined;
      if (this.failing) {
        retryInMs = this.backoffDelay();
        this.nextAttemptAt = performance.now() + retryInMs;
      }
      const reason: ScrapeFailureReason =
        error instanceof GetError || error instanceof ExtractError || error instanceof BudgetError ? error.reason : 'connect';
      this.hooks.onFailure(reason, (error as Error).message, this.failures, retryInMs);
    } finally {
      this.inFlight = false;
    }
  }

  /** backoffMs × 2^(failures beyond the threshold), capped. */
  private backoffDelay(): number {
    const doublings = Math.min(this.failures - this.options.failureThreshold, 30);
    return Math.min(this.options.maxBackoffMs, this.options.backoffMs * 2 ** doublings);
  }
}
