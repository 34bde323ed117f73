import type { Logger } from 'pino';
import { Fleet } from '@spillway/fleet';
import { compileModelRewrites, type ErrorStatus, type ModelRewriter, type PreparedRequest } from '@spillway/protocol';
import { Scheduler, type Decision, type PickRequest } from '@spillway/scheduler';
import type { EppMetrics, Outcome } from './metrics.js';
import type { EppConfig } from './config.js';
import { DeadlineSweeper } from './deadlines.js';
import { LabelCache } from './label-cache.js';

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
  // Prometheus children per label set, so the request path does not build label objects.
  private readonly routed;
  private readonly objectiveRequests: LabelCache<ReturnType<EppMetrics['objectiveRequests']['labels']>>;
  private readonly running: LabelCache<ReturnType<EppMetrics['runningRequests']['labels']>>;
  private readonly entryReasons: LabelCache<ReturnType<EppMetrics['listEntries']['labels']>>;

  constructor(
    config: EppConfig,
    readonly metrics: EppMetrics,
    readonly logger: Logger,
    readonly now: () => number = Date.now,
  ) {
    this.fleet = new Fleet({ staleAfterMs: config.flags.metricsStaleMs });
    this.scheduler = new Scheduler({
      fleet: this.fleet,
      pool: config.flags.pool,
      zone: config.flags.zone,
      region: config.flags.region,
      config: config.scheduler,
      seed: (Date.now() ^ process.pid) >>> 0,
    });
    this.rewriter = config.modelRewrites.length > 0 ? compileModelRewrites(config.modelRewrites) : undefined;
    this.limits = { maxBodyBytes: config.flags.maxBodyBytes, requestTimeoutMs: config.flags.requestTimeoutMs };
    this.deadlines = new DeadlineSweeper(now);
    this.routed = metrics.requests.labels({ outcome: 'routed' });
    this.objectiveRequests = new LabelCache((key) => {
      const [model, priority] = key.split('\u0000') as [string, string];
      return metrics.objectiveRequests.labels({ model_name: model, target_model_name: model, priority });
    });
    this.running = new LabelCache((model) => metrics.runningRequests.labels({ model_name: model }));
    this.entryReasons = new LabelCache((reason) => metrics.listEntries.labels({ reason }));
  }

  pick(request: PickRequest, prepared: PreparedRequest | undefined): Decision {
    const started = process.hrtime.bigint();
    const decision = this.scheduler.pick(request, this.now());
    const seconds = Number(process.hrtime.bigint() - started) / 1e9;
    const m = this.metrics;
    m.schedulerDuration.observe(seconds);
    m.schedulerAttempts.inc({ status: decision.status === 'routed' ? 'success' : 'failure' });
    if (decision.counts.subsetIgnored > 0) m.subsetEntriesIgnored.inc(decision.counts.subsetIgnored);
    if (decision.status === 'routed') {
      m.listLength.observe(decision.entries.length);
      for (const entry of decision.entries) this.entryReasons.get(entry.reason).inc();
      if (decision.rule === 'spill') m.spills.inc();
    }
    if (this.logger.isLevelEnabled('debug')) {
      this.logger.debug(
        {
          model: prepared?.requestedModel,
          targetModel: request.model,
          status: decision.status,
          rule: decision.rule,
          destination: decision.destination,
          entries: decision.entries.map((e) => ({ address: e.address, zone: e.zone, reason: e.reason, saturated: e.saturated })),
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
    this.scheduler.commit(decision, this.now());
    this.routed.inc();
    this.objectiveRequests.get(`${model}\u0000${decision.priority}`).inc();
    this.running.get(model).inc();
  }

  reportServed(decision: Decision, served: string): void {
    const outcome = this.scheduler.reportServed(decision, served, this.now());
    if (outcome === 'fallback') {
      this.metrics.servedElsewhere.inc();
      this.logger.info({ primary: decision.entries[0]?.address, served }, 'served by a fallback; primary penalised');
    }
  }

  release(decision: Decision, model: string): void {
    this.scheduler.release(decision);
    this.running.get(model).dec();
  }

  countRejection(status: ErrorStatus, model: string, code: string): void {
    this.metrics.requests.inc({ outcome: String(status) as Outcome });
    this.metrics.objectiveErrors.inc({ model_name: model, target_model_name: model, error_code: code });
    if (status >= 500 && status !== 503) this.logger.error({ status, code }, 'request failed');
  }
}
