import type { Logger } from 'pino';
import { Fleet } from '@spillway/fleet';
import { compileModelRewrites, type ErrorStatus, type ModelRewriter, type PreparedRequest } from '@spillway/protocol';
import { Scheduler, type Decision, type PickRequest } from '@spillway/scheduler';
import type { PendingCount, EppMetrics, Outcome } from '../telemetry/metrics.js';
import type { PendingHistogram } from '../telemetry/pending-histogram.js';
import type { EppConfig } from '../config/config.js';
import type { LiveSettings } from '../config/reload.js';
import { BodyBudget } from '../request/body-budget.js';
import { DeadlineSweeper } from '../request/deadlines.js';
import { DecisionLog } from '../telemetry/decision-log.js';
import { LabelCache } from '../telemetry/label-cache.js';
import { capLabel, ModelLabels } from '../telemetry/model-labels.js';
import { RequestMetrics, type TrackedRequest } from '../telemetry/request-metrics.js';
import { StateOutbox } from '../shared-state/outbox.js';
import { SpillMatrix } from '../telemetry/spill-matrix.js';
import { EppKv } from '../kv/epp-kv.js';

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
  /** Replaced by reconfigure (a config reload); read once per request. */
  rewriter: ModelRewriter | undefined;
  /** This EPP's entries for the pool's other EPPs (picks, releases, penalties); undefined when sharing is off. */
  readonly outbox: StateOutbox | undefined;
  readonly limits: EppLimits;
  readonly deadlines: DeadlineSweeper;
  /** The last decisions, for `GET /debug/decisions`. */
  readonly decisions = new DecisionLog();
  /** Requests per second from this EPP's zone into each zone, for the operators' view. */
  readonly spill: SpillMatrix;
  /** Request-body bytes held by all open streams (--max-buffered-body-bytes). */
  readonly bodies: BodyBudget;
  /** KV events into the scheduler's block index, and prompts to token ids (kv/epp-kv.ts). */
  readonly kv: EppKv;
  // Prometheus children per label set, so the request path does not build label objects.
  // Batched (see PendingCount): the per-request counters with fixed labels.
  private readonly routed: PendingCount;
  private readonly attemptSucceeded: PendingCount;
  private readonly attemptFailed: PendingCount;
  private readonly spills: PendingCount;
  private readonly entryReasons: LabelCache<PendingCount>;
  private readonly pickSeconds: PendingHistogram;
  private readonly listLength: PendingHistogram;
  /** Client-chosen model names to label values: configured models, everything else `other`. Replaced by reconfigure. */
  modelLabels: ModelLabels;
  /** Per-model request metrics, keyed by label values: at most the configured models plus `other`. */
  private readonly requestMetrics: RequestMetrics;

  constructor(
    config: EppConfig,
    readonly metrics: EppMetrics,
    readonly logger: Logger,
    readonly now: () => number = Date.now,
  ) {
    this.fleet = new Fleet({
      staleAfterMs: config.flags.metricsStaleMs,
      maxClockSkewMs: config.flags.maxClockSkewMs,
      maxPodsPerZone: config.flags.maxPodsPerZone,
    });
    const sharing = config.sharedState;
    this.outbox = sharing.enabled ? new StateOutbox(sharing) : undefined;
    this.scheduler = new Scheduler({
      fleet: this.fleet,
      pool: config.flags.pool,
      zone: config.flags.zone,
      region: config.flags.region,
      config: config.scheduler,
      seed: (Date.now() ^ process.pid) >>> 0,
      shared: {
        outbox: this.outbox,
        remoteEntryTtlMs: sharing.remoteEntryTtlMs,
        peerTimeoutMs: sharing.peerTimeoutMs,
        maxPeers: sharing.maxPeers,
      },
    });
    this.kv = new EppKv(
      {
        enabled: config.flags.kvEvents,
        pool: config.flags.pool,
        tokenizers: config.tokenizers,
        cacheBytes: config.flags.tokenCacheBytes,
        maxChars: config.flags.tokenizeMaxChars,
      },
      this.scheduler,
      metrics.registry,
    );
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
    this.pickSeconds = metrics.batchedHistogram(metrics.schedulerDuration);
    this.listLength = metrics.batchedHistogram(metrics.listLength);
    this.requestMetrics = new RequestMetrics(metrics);
    // Reasons are the scheduler's fixed EntryReason set, far below the cache limit: the cache never resets.
    this.entryReasons = new LabelCache((reason) => metrics.batched(metrics.listEntries.labels({ reason })));
  }

  pick(request: PickRequest, prepared: PreparedRequest | undefined): Decision {
    // Token ids for the precise block index, when the request's model has a tokenizer and pods report KV blocks.
    const tokenIds = prepared === undefined ? undefined : this.kv.promptTokenIds(prepared);
    if (tokenIds !== undefined) request = { ...request, promptTokenIds: tokenIds };
    // performance.now() (a double, sub-microsecond) rather than hrtime.bigint(): no BigInt per reading.
    const started = performance.now();
    const decision = this.scheduler.pick(request, this.now());
    const seconds = (performance.now() - started) / 1e3;
    const m = this.metrics;
    this.pickSeconds.observe(seconds);
    this.decisions.record(decision);
    (decision.status === 'routed' ? this.attemptSucceeded : this.attemptFailed).inc();
    if (decision.counts.subsetIgnored > 0) m.subsetEntriesIgnored.inc(decision.counts.subsetIgnored);
    if (decision.status === 'routed') {
      this.listLength.observe(decision.entries.length);
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

  /**
   * The destination is being sent: charge the pick and start the request's metrics. `requestBytes`
   * is the body as the client sent it; `startedAt` when its stream began (ms, this clock).
   */
  commit(decision: Decision, request: PreparedRequest | undefined, requestBytes: number, startedAt: number): TrackedRequest {
    const now = this.now();
    this.scheduler.commit(decision, now);
    this.spill.record(this.scheduler.zone, decision.entries[0]?.zone ?? '', now);
    this.routed.inc();
    const labels = this.modelLabels;
    const target = request?.model ?? '';
    return this.requestMetrics.track(
      labels.of(request?.requestedModel ?? target),
      labels.of(target),
      decision.priority,
      requestBytes,
      startedAt,
    );
  }

  reportServed(decision: Decision, served: string): void {
    const outcome = this.scheduler.reportServed(decision, served, this.now());
    if (outcome === 'fallback') {
      this.metrics.servedElsewhere.inc();
      // Per request, so debug; the periodic summary (telemetry/summary-log.ts) counts them at info.
      this.logger.debug({ primary: decision.entries[0]?.address, served }, 'served by a fallback; primary penalised');
    }
  }

  /**
   * The primary answered 5xx, or the gateway could not reach it (Envoy then reports its own 503):
   * it is penalised like a primary the gateway did not serve.
   */
  reportFailed(decision: Decision, status: number): void {
    if (!this.scheduler.reportFailed(decision, this.now())) return;
    this.metrics.primaryFailed.inc();
    this.logger.debug({ primary: decision.entries[0]?.address, status }, 'primary failed; penalised');
  }

  /** The stream ended, however: the pick's charge is released and the request's metrics observed. */
  release(decision: Decision, tracked: TrackedRequest | undefined): void {
    const now = this.now();
    this.scheduler.release(decision, now);
    tracked?.finish(now);
  }

  /** An error answer (400, 413, 429, 503, ...); `request` when the body was understood. */
  countRejection(status: ErrorStatus, code: string, request: PreparedRequest | undefined): void {
    this.metrics.requests.inc({ outcome: String(status) as Outcome });
    const target = request?.model ?? '';
    this.requestMetrics.rejected(this.modelLabels.of(request?.requestedModel ?? target), this.modelLabels.of(target), status);
    if (status >= 500 && status !== 503) this.logger.error({ status, code }, 'request failed');
  }

  /**
   * Puts a reloaded config in force between two picks (JavaScript runs one at a time): the
   * scheduler's numbers, objectives and list length, model rewrites, the model label set and the
   * log level. What the EPP learnt (in-flight picks, penalties, prefix index) is kept.
   */
  reconfigure(settings: LiveSettings): void {
    this.scheduler.reconfigure(settings.scheduler);
    this.rewriter = settings.modelRewrites.length > 0 ? compileModelRewrites(settings.modelRewrites) : undefined;
    this.modelLabels = new ModelLabels(settings.modelRewrites, settings.metricModels);
  }
}
