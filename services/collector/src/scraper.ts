import type { Engine } from '@spillway/events';
import type { Dispatcher } from 'undici';
import { GetError, getText, originOf } from './http-get.js';
import { ExtractError, extractSample, type Extracted } from './scrape.js';
import type { ScrapeFailureReason } from './self-metrics.js';

export interface ScraperOptions {
  intervalMs: number;
  timeoutMs: number;
  path: string;
  /** Consecutive failures after which the endpoint is tried only every `backoffMs`. */
  failureThreshold: number;
  backoffMs: number;
}

export interface ScrapeHooks {
  /** A good sample; `startedAt` is the wall-clock start of the scrape, `startedPerf` its monotonic start. */
  onSample(extracted: Extracted, startedAt: number, startedPerf: number): void;
  onFailure(reason: ScrapeFailureReason, message: string, consecutive: number, startedPerf: number): void;
  /** The endpoint answered again after `failures` consecutive failures. */
  onRecovered(failures: number): void;
  onSkipped(): void;
}

/**
 * Scrapes one endpoint's metrics on its own timer. Endpoints never wait on each other: each has
 * its own interval and promise, and a scrape that is still running when the next tick comes makes
 * that tick a skip rather than a second request (no pile-up on a slow server). After
 * `failureThreshold` consecutive failures the endpoint publishes nothing (the EPP sees its metrics
 * go stale) and is retried only every `backoffMs` until it answers again.
 */
export class Scraper {
  private timer: NodeJS.Timeout | undefined;
  private startTimer: NodeJS.Timeout | undefined;
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

  /** True after `failureThreshold` consecutive failures, until a scrape succeeds. */
  get failing(): boolean {
    return this.failures >= this.options.failureThreshold;
  }

  start(): void {
    // A random phase spreads hundreds of endpoints over the interval instead of bursting together.
    this.startTimer = setTimeout(() => {
      void this.tick();
      this.timer = setInterval(() => void this.tick(), this.options.intervalMs);
    }, Math.random() * this.options.intervalMs);
  }

  stop(): void {
    this.stopped = true;
    clearTimeout(this.startTimer);
    clearInterval(this.timer);
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
      const text = await getText(this.dispatcher, originOf(this.address), this.options.path, this.options.timeoutMs);
      if (this.stopped) return;
      const extracted = extractSample(text, this.engine());
      const failures = this.failures;
      this.failures = 0;
      if (failures > 0) this.hooks.onRecovered(failures);
      this.hooks.onSample(extracted, startedAt, startedPerf);
    } catch (error) {
      if (this.stopped) return;
      this.failures++;
      if (this.failing) this.nextAttemptAt = performance.now() + this.options.backoffMs;
      const reason: ScrapeFailureReason = error instanceof GetError || error instanceof ExtractError ? error.reason : 'connect';
      this.hooks.onFailure(reason, (error as Error).message, this.failures, startedPerf);
    } finally {
      this.inFlight = false;
    }
  }
}
