import { readinessEventSchema, type Engine, type MetricsEvent, type ReadinessEvent, type ServiceRates } from '@spillway/events';
import type { Logger } from 'pino';
import type { Dispatcher } from 'undici';
import type { ScrapeLimits } from './budget.js';
import { sameSpec, type EndpointSpec } from './endpoint.js';
import { Prober, type ProbeOptions, type ProbeState } from './prober.js';
import { RateWindow } from '@spillway/events';
import { LatestWinsQueue } from './readiness-queue.js';
import type { Extracted } from './scrape.js';
import { ScrapeScheduler } from './scrape-scheduler.js';
import { Scraper } from './scraper.js';
import type { CollectorMetrics, ScrapeFailureReason } from './self-metrics.js';
import type { EventSink } from './sink.js';
import { validateMetrics } from './validate.js';

export interface CollectorOptions {
  pool: string;
  /** Engine for endpoints that name none; undefined = detect from the metric names. */
  defaultEngine: Engine | undefined;
  sampleIntervalMs: number;
  scrapeTimeoutMs: number;
  scrapeFailureThreshold: number;
  /** Longest back-off of a failing endpoint (the first is the probe interval, doubling from there). */
  scrapeBackoffMaxMs: number;
  /** Byte, line and CPU bounds of one scrape. */
  scrapeLimits: ScrapeLimits;
  /** Span of the counter deltas behind the service rates. */
  ratesWindowMs: number;
  metricsPath: string;
  /** `intervalMs: 0` disables probing: readiness is then the source's word alone. */
  probe: ProbeOptions;
  readinessRepublishMs: number;
  sink: EventSink;
  dispatcher: Dispatcher;
  logger: Logger;
  metrics: CollectorMetrics;
  /** Told the merged endpoint list whenever a source changes it (the KV relay follows it). */
  onEndpoints?: (endpoints: readonly EndpointSpec[]) => void;
  /** Told each server's KV-cache size in blocks whenever a sample reports it (the KV relay's turnover bound). */
  onCacheSize?: (pod: string, numBlocks: number) => void;
  /** Observes each published metrics event and its lag (scrape start to publish, ms). For benchmarks. */
  onMetricsPublished?: (event: MetricsEvent, lagMs: number) => void;
}

/** One endpoint the collector looks after. */
interface Tracked {
  spec: EndpointSpec;
  prober: Prober | undefined;
  probeState: ProbeState;
  detectedEngine: Engine | undefined;
  scraper: Scraper | undefined;
  /** The readiness last decided (and queued for publishing); undefined before the first decision. */
  decidedReady: boolean | undefined;
  lastFailureReason: ScrapeFailureReason | undefined;
  /** The scraper is backing off (logged when it starts, not on every attempt). */
  backingOff: boolean;
  /** Counter history for service rates. */
  rates: RateWindow;
  /** The last reason rates were left out, so a lasting one is logged once. */
  lastRatesIssue: string | undefined;
  /** Why the last sample failed the event schema (undefined after a good one), so a lasting rejection is logged once. */
  lastRejection: string | undefined;
}

export interface EndpointStatus {
  pod: string;
  address: string;
  zone: string;
  ready: boolean | undefined;
  probe: ProbeState;
  scraping: boolean;
  scrapeFailing: boolean;
  engine: Engine | undefined;
}

/**
 * Turns endpoint lists from readiness sources into readiness events, and scrapes of ready
 * endpoints into metrics events (docs/events.md). Each endpoint has its own prober and scraper timers,
 * so a slow or dead one never delays the others.
 */
export class Collector {
  private readonly sources = new Map<string, readonly EndpointSpec[]>();
  private readonly tracked = new Map<string, Tracked>();
  private readonly queues = new Map<string, LatestWinsQueue>();
  private readonly duplicateWarned = new Set<string>();
  private republishTimer: NodeJS.Timeout | undefined;
  /** Every scraper's ticks, spread evenly over the sample interval. */
  private readonly scheduler: ScrapeScheduler;
  private stopped = false;
  private readonly log: Logger;

  constructor(private readonly options: CollectorOptions) {
    this.log = options.logger;
    this.scheduler = new ScrapeScheduler(options.sampleIntervalMs);
  }

  start(): void {
    this.republishTimer = setInterval(() => this.republishAll('periodic'), this.options.readinessRepublishMs);
    this.options.sink.onReconnect(() => {
      if (!this.stopped) this.republishAll('reconnect');
    });
  }

  /** Stops probing and scraping and waits for queued readiness publishes. Publishes no tombstones: a restarting collector must not empty the pool. */
  async stop(): Promise<void> {
    this.stopped = true;
    clearInterval(this.republishTimer);
    for (const t of this.tracked.values()) this.halt(t);
    this.scheduler.stop();
    await this.settled();
  }

  /** Resolves when every queued readiness event has been published (or failed). */
  async settled(): Promise<void> {
    await Promise.all([...this.queues.values()].map((q) => q.settled()));
  }

  status(): EndpointStatus[] {
    return [...this.tracked.values()].map((t) => ({
      pod: t.spec.pod,
      address: t.spec.address,
      zone: t.spec.zone,
      ready: t.decidedReady,
      probe: t.probeState,
      scraping: t.scraper !== undefined,
      scrapeFailing: t.scraper?.failing ?? false,
      engine: this.engineOf(t),
    }));
  }

  /**
   * Replaces everything one source (`file`, `kube`, ...) says. Endpoints no source lists any more
   * get a tombstone; when two sources list the same pod, the source that reported first wins.
   */
  setEndpoints(source: string, endpoints: readonly EndpointSpec[]): void {
    if (this.stopped) return;
    this.sources.set(source, endpoints);
    const merged = new Map<string, EndpointSpec>();
    for (const [name, list] of this.sources) {
      for (const spec of list) {
        if (!merged.has(spec.pod)) merged.set(spec.pod, spec);
        else if (!this.duplicateWarned.has(`${name}/${spec.pod}`)) {
          this.duplicateWarned.add(`${name}/${spec.pod}`);
          this.log.warn({ source: name, pod: spec.pod }, 'pod listed by more than one source; the first source wins');
        }
      }
    }
    for (const [pod, t] of this.tracked) {
      if (!merged.has(pod)) {
        this.log.info({ pod, address: t.spec.address }, 'endpoint removed; publishing tombstone');
        this.untrack(t);
        this.enqueue(this.readinessEvent(t.spec, false, this.engineOf(t), true));
      }
    }
    for (const spec of merged.values()) {
      const t = this.tracked.get(spec.pod);
      if (!t) this.track(spec);
      else if (!sameSpec(t.spec, spec)) this.update(t, spec);
    }
    this.refreshGauge();
    this.options.onEndpoints?.([...merged.values()]);
  }

  private track(spec: EndpointSpec): void {
    const t: Tracked = {
      spec,
      prober: undefined,
      probeState: this.options.probe.intervalMs > 0 ? 'unknown' : 'up',
      detectedEngine: undefined,
      scraper: undefined,
      decidedReady: undefined,
      lastFailureReason: undefined,
      backingOff: false,
      rates: new RateWindow(this.options.ratesWindowMs),
      lastRatesIssue: undefined,
      lastRejection: undefined,
    };
    this.tracked.set(spec.pod, t);
    this.log.info({ pod: spec.pod, address: spec.address, zone: spec.zone }, 'endpoint added');
    if (this.options.probe.intervalMs > 0) {
      t.prober = new Prober(
        this.options.dispatcher,
        spec.address,
        this.options.probe,
        (state) => {
          t.probeState = state;
          this.log.info({ pod: t.spec.pod, probe: state }, 'probe state changed');
          this.decide(t, false);
        },
        (reason) => this.options.metrics.probeFailures.inc({ reason }),
      );
      t.prober.start();
    }
    this.decide(t, false);
  }

  private update(t: Tracked, spec: EndpointSpec): void {
    const old = t.spec;
    if (old.address !== spec.address || old.zone !== spec.zone) {
      // A new address is a new server to probe and scrape; a new zone is a new subject, and the
      // old one must not keep advertising the pod.
      if (old.zone !== spec.zone) this.enqueue(this.readinessEvent(old, false, this.engineOf(t), true));
      this.untrack(t);
      this.track(spec);
      return;
    }
    t.spec = spec;
    this.decide(t, true);
  }

  private untrack(t: Tracked): void {
    this.halt(t);
    this.tracked.delete(t.spec.pod);
  }

  private halt(t: Tracked): void {
    t.prober?.stop();
    t.scraper?.stop();
    t.scraper = undefined;
  }

  private isReady(t: Tracked): boolean | undefined {
    if (!t.spec.sourceReady) return false;
    if (t.probeState === 'unknown') return undefined;
    return t.probeState === 'up';
  }

  /** Re-evaluates readiness: publishes when it changed (or `force`), and runs the scraper only while ready. */
  private decide(t: Tracked, force: boolean): void {
    if (this.stopped || this.tracked.get(t.spec.pod) !== t) return;
    const ready = this.isReady(t);
    if (ready === undefined) return;
    if (ready && !t.scraper) this.startScraper(t);
    if (!ready && t.scraper) {
      t.scraper.stop();
      t.scraper = undefined;
    }
    if (ready !== t.decidedReady || force) {
      t.decidedReady = ready;
      this.enqueue(this.readinessEvent(t.spec, ready, this.engineOf(t), false));
    }
    this.refreshGauge();
  }

  private engineOf(t: Tracked): Engine | undefined {
    return t.spec.engine ?? this.options.defaultEngine ?? t.detectedEngine;
  }

  private startScraper(t: Tracked): void {
    const o = this.options;
    t.scraper = new Scraper(
      o.dispatcher,
      t.spec.address,
      () => this.engineOf(t),
      {
        timeoutMs: o.scrapeTimeoutMs,
        path: o.metricsPath,
        failureThreshold: o.scrapeFailureThreshold,
        backoffMs: Math.min(Math.max(o.sampleIntervalMs, o.probe.intervalMs || 1_000), o.scrapeBackoffMaxMs),
        maxBackoffMs: o.scrapeBackoffMaxMs,
        limits: o.scrapeLimits,
      },
      {
        onSample: (extracted, startedAt, startedPerf) => this.publishSample(t, extracted, startedAt, startedPerf),
        onFailure: (reason, message, consecutive, retryInMs) => {
          o.metrics.scrapeFailures.inc({ reason });
          const wasFailing = t.backingOff;
          t.backingOff = retryInMs !== undefined;
          // One line when failures start, change kind, or turn into a back-off; not one per attempt.
          const loud = consecutive === 1 || reason !== t.lastFailureReason || (t.backingOff && !wasFailing);
          t.lastFailureReason = reason;
          const fields = { pod: t.spec.pod, address: t.spec.address, reason, consecutive, retryInMs, error: message };
          if (loud)
            this.log.warn(
              fields,
              retryInMs !== undefined ? 'scrape failing; metrics stop and the endpoint is backed off until it answers' : 'scrape failed',
            );
          else this.log.debug(fields, 'scrape failed');
          if (t.backingOff !== wasFailing) this.refreshGauge();
        },
        onRecovered: (failures) => {
          t.lastFailureReason = undefined;
          t.backingOff = false;
          this.log.info({ pod: t.spec.pod, failures }, 'scrape recovered');
          this.refreshGauge();
        },
        onSkipped: () => o.metrics.scrapesSkipped.inc(),
      },
    );
    t.scraper.start(this.scheduler);
  }

  private publishSample(t: Tracked, extracted: Extracted, startedAt: number, startedPerf: number): void {
    const o = this.options;
    if (t.spec.engine === undefined && o.defaultEngine === undefined && t.detectedEngine !== extracted.engine) {
      t.detectedEngine = extracted.engine;
      this.log.info({ pod: t.spec.pod, engine: extracted.engine }, 'engine detected');
      // The readiness event names the engine; tell the EPP now rather than in 30 s.
      if (t.decidedReady !== undefined) this.enqueue(this.readinessEvent(t.spec, t.decidedReady, extracted.engine, false));
    }
    const candidate: MetricsEvent = {
      v: 1,
      kind: 'metrics',
      pool: o.pool,
      zone: t.spec.zone,
      pod: t.spec.pod,
      observedAt: startedAt,
      ...extracted.sample,
    };
    const cache = extracted.sample.cache;
    if (cache !== undefined) o.onCacheSize?.(t.spec.pod, cache.numBlocks);
    const rates = this.serviceRates(t, extracted, startedPerf);
    if (rates) candidate.rates = rates;
    const parsed = validateMetrics(candidate);
    if (!parsed.ok) {
      o.metrics.scrapeFailures.inc({ reason: 'invalid' });
      // Counted every time, logged loudly when it starts or changes: a server stuck on a bad value would otherwise log 10 lines a second.
      const fields = { pod: t.spec.pod, error: parsed.message };
      if (parsed.message !== t.lastRejection) this.log.warn(fields, 'metrics sample rejected by the event schema');
      else this.log.debug(fields, 'metrics sample rejected by the event schema');
      t.lastRejection = parsed.message;
      return;
    }
    t.lastRejection = undefined;
    const sent = o.sink.publishMetrics(parsed.event);
    const lagMs = performance.now() - startedPerf;
    o.metrics.scrapeDuration.observe({ engine: extracted.engine }, lagMs / 1000);
    if (sent) {
      o.metrics.eventsPublished.inc({ kind: 'metrics' });
      o.onMetricsPublished?.(parsed.event, lagMs);
    } else {
      o.metrics.eventsDropped.inc({ kind: 'metrics', reason: 'disconnected' });
    }
  }

  /** This scrape's rates from the endpoint's counter history; problems are counted and logged once per kind. */
  private serviceRates(t: Tracked, extracted: Extracted, startedPerf: number): ServiceRates | undefined {
    const { counters, invalid } = extracted.counters;
    const update = t.rates.update(startedPerf, counters);
    const issue = invalid.length > 0 ? 'invalid-counter' : update.reset ? 'counter-reset' : update.outOfRange ? 'out-of-range' : undefined;
    if (issue !== undefined) {
      this.options.metrics.ratesOmitted.inc({ reason: issue });
      const fields = { pod: t.spec.pod, reason: issue, series: invalid.length > 0 ? invalid : undefined };
      if (issue !== t.lastRatesIssue)
        this.log.warn(
          fields,
          issue === 'counter-reset'
            ? 'model-server counters went down (restart?); rates start afresh'
            : 'service rates left out of the sample',
        );
      else this.log.debug(fields, 'service rates left out of the sample');
    }
    t.lastRatesIssue = issue;
    return update.rates;
  }

  private readinessEvent(spec: EndpointSpec, ready: boolean, engine: Engine | undefined, deleted: boolean): ReadinessEvent {
    const event: ReadinessEvent = {
      v: 1,
      kind: 'readiness',
      pool: this.options.pool,
      zone: spec.zone,
      pod: spec.pod,
      address: spec.address,
      ready,
      observedAt: Date.now(),
    };
    if (spec.region !== undefined) event.region = spec.region;
    if (deleted) event.deleted = true;
    if (engine !== undefined) event.engine = engine;
    if (spec.labels !== undefined) event.labels = { ...spec.labels };
    return event;
  }

  private enqueue(candidate: ReadinessEvent): void {
    const parsed = readinessEventSchema.safeParse(candidate);
    if (!parsed.success) {
      this.options.metrics.eventsDropped.inc({ kind: 'readiness', reason: 'invalid' });
      this.log.error({ pod: candidate.pod, error: parsed.error.issues[0]?.message }, 'readiness event rejected by the event schema');
      return;
    }
    let queue = this.queues.get(candidate.pod);
    if (!queue) {
      queue = new LatestWinsQueue((event) => this.sendReadiness(event));
      this.queues.set(candidate.pod, queue);
    }
    queue.push(parsed.data);
  }

  private async sendReadiness(event: ReadinessEvent): Promise<void> {
    try {
      await this.options.sink.publishReadiness(event);
      this.options.metrics.eventsPublished.inc({ kind: 'readiness' });
      this.log.debug({ pod: event.pod, ready: event.ready, deleted: event.deleted }, 'readiness published');
    } catch (error) {
      // Not retried here: the periodic re-publish and the re-publish on reconnect restore it.
      this.options.metrics.eventsDropped.inc({ kind: 'readiness', reason: 'publish-failed' });
      this.log.warn({ pod: event.pod, ready: event.ready, error: (error as Error).message }, 'readiness publish failed');
    }
  }

  private republishAll(why: string): void {
    // Forget the queues of removed pods once their tombstones are out.
    for (const [pod, queue] of this.queues) if (queue.idle && !this.tracked.has(pod)) this.queues.delete(pod);
    let count = 0;
    for (const t of this.tracked.values()) {
      if (t.decidedReady === undefined) continue;
      this.enqueue(this.readinessEvent(t.spec, t.decidedReady, this.engineOf(t), false));
      count++;
    }
    this.log.debug({ why, count }, 'readiness re-published');
  }

  private refreshGauge(): void {
    const counts: Record<string, number> = { ready: 0, 'not-ready': 0, unknown: 0, 'scrape-failing': 0 };
    for (const t of this.tracked.values()) {
      const state = t.decidedReady === undefined ? 'unknown' : t.decidedReady ? 'ready' : 'not-ready';
      counts[state] = (counts[state] ?? 0) + 1;
      if (t.scraper?.failing) counts['scrape-failing'] = (counts['scrape-failing'] ?? 0) + 1;
    }
    for (const [state, value] of Object.entries(counts)) this.options.metrics.endpoints.set({ state }, value);
  }
}
