import type { Logger } from 'pino';
import { Fleet } from '@spillway/fleet';
import { compileModelRewrites, type ErrorStatus, type ModelRewriter, type PreparedRequest } from '@spillway/protocol';
import { Scheduler, type Decision, type PickRequest } from '@spillway/scheduler';
import { PendingCount, type EppMetrics, type Outcome } from './metrics.js';
import type { EppConfig } from './config.js';
import { BodyBudget } from './body-budget.js';
import { DeadlineSweeper } from './deadlines.js';
import { DecisionLog } from './decision-log.js';
import { LabelCache } from './label-cache.js';
import { capLabel, ModelLabels } from './model-labels.js';
import { SpillMatrix } from './ui/spill-matrix.js';

/** One target model's batched metric children. */
interface ModelCounts {
  readonly running: PendingCount;
  readonly byPriority: Map<number, PendingCount>;
}

export interface EppLimits {
  maxBodyBytes: number;
  requestTimeoutMs: number;
}

/**
 * What every ext_proc stream shares: the view, the scheduler, and the bookkeeping around each pick
 * (metrics, the debug log line per decision). The stream handler calls only these methods, so the
 * request path reads as protocol -> core -> scheduler.
 */
export class EppCore {
  readonly fleet: Fleet;
  readonly scheduler: Scheduler;
  readonly rewriter: ModelRewriter | undefined;
  readonly limits: EppLimits;
  readonly deadlines: DeadlineSweeper;
  /** The last decisions, for `GET /debug/decisions`. */
  readonly decisions = new DecisionLog();
  /** Requests per second from this EPP's zone into each zone, for the operators' view. */
  readonly spill: SpillMatrix;
  /** Request-body bytes held by all open streams (--max-buffered-body-bytes). */
  readonly bodies: BodyBudget;
  // Prometheus children per label set, so the request path does not build label objects.
  // Batched (see PendingCount): the per-request counters with fixed labels.
  private readonly routed: PendingCount;
  private readonly attemptSucceeded: PendingCount;
  private readonly attemptFailed: PendingCount;
  private readonly spills: PendingCount;
  private readonly entryReasons: LabelCache<PendingCount>;
  /** Client-chosen model names to label values: configured models, everything else `other`. */
  readonly modelLabels: ModelLabels;
  // Per model label: running requests and requests by priority, batched. Keyed by label value, so
  // it holds at most the configured models plus `other`.
  private readonly models = new Map<string, ModelCounts>();

  constructor(
    config: EppConfig,
    readonly metrics: EppMetrics,
    readonly logger: Logger,
    readonly now: () => number = Date.now,
  ) {
    this.fleet = new Fleet({ staleAfterMs: config.flags.metricsStaleMs, maxClockSkewMs: config.flags.maxClockSkewMs, maxPodsPerZone: config.flags.maxPodsPerZone });
    this.scheduler = new Scheduler({
      fleet: this.fleet,
      pool: config.flags.pool,
      zone: config.flags.zone,
      region: config.flags.region,
      config: config.scheduler,
      seed: (Date.now() ^ process.pid) >>> 0,
    });
    this.rewriter = config.modelRewrites.length > 0 ? compileModelRewrites(config.modelRewrites) : undefined;
    this.modelLabels = new ModelLabels(config.modelRewrites, config.flags.metricModels);
    this.limits = { maxBodyBytes: config.flags.maxBodyBytes, requestTimeoutMs: config.flags.requestTimeoutMs };
    this.deadlines = new DeadlineSweeper(now);
    this.bodies = new BodyBudget(config.flags.maxBufferedBodyBytes);
    this.spill = new SpillMatrix(now());
    this.routed = metrics.batched(metrics.requests.labels({ outcome: 'routed' }));
    this.attemptSucceeded = metrics.batched(metrics.schedulerAttempts.labels({ status: 'success' }));
    this.attemptFailed = metrics.batched(metrics.schedulerAttempts.labels({ status: 'failure' }));
    this.spills = metrics.batched(metrics.spills);
    metrics.onRead(() => this.flushModels());
    // Reasons are the scheduler's fixed EntryReason set, far below the cache limit: the cache never resets.
    this.entryReasons = new LabelCache((reason) => metrics.batched(metrics.listEntries.labels({ reason })));
  }

  pick(request: PickRequest, prepared: PreparedRequest | undefined): Decision {
    // performance.now() (a double, sub-microsecond) rather than hrtime.bigint(): no BigInt per reading.
    const started = performance.now();
    const decision = this.scheduler.pick(request, this.now());
    const seconds = (performance.now() - started) / 1e3;
    const m = this.metrics;
    m.schedulerDuration.observe(seconds);
    this.decisions.record(decision);
    (decision.status === 'routed' ? this.attemptSucceeded : this.attemptFailed).inc();
    if (decision.counts.subsetIgnored > 0) m.subsetEntriesIgnored.inc(decision.counts.subsetIgnored);
    if (decision.status === 'routed') {
      m.listLength.observe(decision.entries.length);
      for (const entry of decision.entries) this.entryReasons.get(entry.reason).inc();
      if (decision.rule === 'spill') this.spills.inc();
    }
    if (this.logger.isLevelEnabled('debug')) {
      this.logger.debug(
        {
          // Client-chosen: cut like a label value, so one request cannot write a megabyte line.
          model: prepared === undefined ? undefined : capLabel(prepared.requestedModel),
          targetModel: capLabel(request.model),
          status: decision.status,
          rule: decision.rule,
          destination: decision.destination,
          entries: decision.entries.map((e) => ({ address: e.address, zone: e.zone, reason: e.reason, full: e.full, cost: e.cost })),
          localOverloaded: decision.localOverloaded,
          counts: decision.counts,
          priority: decision.priority,
          pickMicros: Math.round(seconds * 1e6),
        },
        'decision',
      );
    }
    return decision;
  }

  commit(decision: Decision, model: string): void {
    const now = this.now();
    this.scheduler.commit(decision, now);
    this.spill.record(this.scheduler.zone, decision.entries[0]?.zone ?? '', now);
    this.routed.inc();
    const label = this.modelLabels.of(model);
    const counts = this.modelCounts(label);
    // By priority: no key string is built per request. Priorities come from config, so this map stays small.
    let requests = counts.byPriority.get(decision.priority);
    if (requests === undefined) {
      requests = new PendingCount(this.metrics.objectiveRequests.labels({ model_name: label, target_model_name: label, priority: String(decision.priority) }));
      counts.byPriority.set(decision.priority, requests);
    }
    requests.inc();
    counts.running.inc();
  }

  reportServed(decision: Decision, served: string): void {
    const outcome = this.scheduler.reportServed(decision, served, this.now());
    if (outcome === 'fallback') {
      this.metrics.servedElsewhere.inc();
      this.logger.info({ primary: decision.entries[0]?.address, served }, 'served by a fallback; primary penalised');
    }
  }

  /**
   * The primary answered 5xx, or the gateway could not reach it (Envoy then reports its own 503):
   * it is penalised like a primary the gateway did not serve.
   */
  reportFailed(decision: Decision, status: number): void {
    if (!this.scheduler.reportFailed(decision, this.now())) return;
    this.metrics.primaryFailed.inc();
    this.logger.info({ primary: decision.entries[0]?.address, status }, 'primary failed; penalised');
  }

  release(decision: Decision, model: string): void {
    this.scheduler.release(decision);
    this.modelCounts(this.modelLabels.of(model)).running.dec();
  }

  private modelCounts(label: string): ModelCounts {
    let counts = this.models.get(label);
    if (counts === undefined) {
      counts = { running: new PendingCount(this.metrics.runningRequests.labels({ model_name: label })), byPriority: new Map() };
      this.models.set(label, counts);
    }
    return counts;
  }

  private flushModels(): void {
    for (const counts of this.models.values()) {
      counts.running.flush();
      for (const requests of counts.byPriority.values()) requests.flush();
    }
  }

  countRejection(status: ErrorStatus, model: string, code: string): void {
    this.metrics.requests.inc({ outcome: String(status) as Outcome });
    const label = this.modelLabels.of(model);
    this.metrics.objectiveErrors.inc({ model_name: label, target_model_name: label, error_code: code });
    if (status >= 500 && status !== 503) this.logger.error({ status, code }, 'request failed');
  }
}
