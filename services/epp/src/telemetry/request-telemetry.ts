import type { Logger } from 'pino';
import type { ErrorStatus, PreparedRequest } from '@spillway/protocol';
import type { Counter } from 'prom-client';
import type { Decision, PickRequest } from '@spillway/scheduler';
import type { FlowOutcome, RequestObserver, RequestPhase, RequestRecord, TokenizeOutcome } from '../request/observer.js';
import { DecisionLog } from './decision-log.js';
import { FlowMetrics } from './flow-metrics.js';
import { LabelCache } from './label-cache.js';
import type { EppMetrics, Outcome } from './metrics.js';
import type { PendingCount } from './pending-count.js';
import { capLabel, type ModelLabels } from './model-labels.js';
import type { PendingHistogram } from './pending-histogram.js';
import { RequestMetrics } from './request-metrics.js';
import { SpillMatrix } from './spill-matrix.js';

/** Stale subset entries, and gateway zones the pool does not have, are logged at most this often (they are counted always). */
const UNMATCHED_LOG_EVERY_MS = 60_000;

export interface RequestTelemetryParts {
  readonly metrics: EppMetrics;
  readonly logger: Logger;
  readonly modelLabels: ModelLabels;
  /** Observes one prompt's tokenization (telemetry/kv-metrics.ts). */
  readonly tokenized: (outcome: TokenizeOutcome, seconds: number) => void;
  readonly now?: () => number;
}

/**
 * The request path's observer: what the request control reports becomes Prometheus metrics (read
 * by the periodic summary too), the decision log behind `GET /debug/decisions`, the spill matrix
 * of the operators' view, and debug lines.
 */
export class RequestTelemetry implements RequestObserver {
  /** The last decisions, for `GET /debug/decisions`. */
  readonly decisions = new DecisionLog();
  /** Requests per second from each gateway zone (the zone each request was picked for) into each zone, for the operators' view. */
  readonly spill: SpillMatrix;
  /** Client-chosen model names to label values: configured models, everything else `other`. Replaced by a config reload. */
  modelLabels: ModelLabels;
  readonly tokenized: (outcome: TokenizeOutcome, seconds: number) => void;
  /** Flow control's counters and gauges (its queue attaches once the request control exists). */
  readonly flow: FlowMetrics;
  private readonly metrics: EppMetrics;
  private readonly logger: Logger;
  private readonly now: () => number;
  private unmatchedLoggedAt = Number.NEGATIVE_INFINITY;
  private unknownZoneLoggedAt = Number.NEGATIVE_INFINITY;
  /** spillway_gateway_zone_unknown_total by reason (rare: not batched). */
  private readonly zoneUnknown: Counter.Internal;
  private readonly zoneMalformed: Counter.Internal;
  // Prometheus children per label set, so the request path does not build label objects.
  // Batched (see PendingCount): the per-request counters with fixed labels.
  private readonly routed: PendingCount;
  private readonly attemptSucceeded: PendingCount;
  private readonly attemptFailed: PendingCount;
  private readonly spills: PendingCount;
  private readonly entryReasons: LabelCache<PendingCount>;
  private readonly pickSeconds: PendingHistogram;
  private readonly listLength: PendingHistogram;
  /** `spillway_request_phase_seconds`, one batched series per phase (a fixed set). */
  private readonly phaseSeconds: Record<RequestPhase | 'tokenize' | 'pick', PendingHistogram>;
  /** Per-model request metrics, keyed by label values: at most the configured models plus `other`. */
  private readonly requestMetrics: RequestMetrics;

  constructor(parts: RequestTelemetryParts) {
    const metrics = parts.metrics;
    this.metrics = metrics;
    this.logger = parts.logger;
    this.modelLabels = parts.modelLabels;
    this.now = parts.now ?? Date.now;
    // Every phase's series exists from the start, at zero, so a reader's before-and-after sees each.
    const phase = (name: RequestPhase | 'tokenize' | 'pick'): PendingHistogram => {
      metrics.requestPhases.zero({ phase: name });
      return metrics.batchedHistogram(metrics.requestPhases, { phase: name });
    };
    this.phaseSeconds = {
      receive: phase('receive'),
      parse: phase('parse'),
      tokenize: phase('tokenize'),
      pick: phase('pick'),
      answer: phase('answer'),
      decide: phase('decide'),
    };
    const tokenizePhase = this.phaseSeconds.tokenize;
    this.tokenized = (outcome, seconds) => {
      parts.tokenized(outcome, seconds);
      tokenizePhase.observe(seconds);
    };
    this.spill = new SpillMatrix(this.now());
    this.routed = metrics.batched(metrics.requests.labels({ outcome: 'routed' }));
    this.attemptSucceeded = metrics.batched(metrics.schedulerAttempts.labels({ status: 'success' }));
    this.attemptFailed = metrics.batched(metrics.schedulerAttempts.labels({ status: 'failure' }));
    this.spills = metrics.batched(metrics.spills);
    this.pickSeconds = metrics.batchedHistogram(metrics.schedulerDuration);
    this.listLength = metrics.batchedHistogram(metrics.listLength);
    this.requestMetrics = new RequestMetrics(metrics);
    this.flow = new FlowMetrics(metrics.registry);
    this.zoneUnknown = metrics.gatewayZoneUnknown.labels({ reason: 'unknown' });
    this.zoneMalformed = metrics.gatewayZoneUnknown.labels({ reason: 'malformed' });
    // Exported as 0 from the start, so a rate over them needs no first occurrence.
    this.zoneUnknown.inc(0);
    this.zoneMalformed.inc(0);
    // Reasons are the scheduler's fixed EntryReason set, far below the cache limit: the cache never resets.
    this.entryReasons = new LabelCache((reason) => metrics.batched(metrics.listEntries.labels({ reason })));
  }

  phase(phase: RequestPhase, seconds: number): void {
    this.phaseSeconds[phase].observe(seconds);
  }

  picked(decision: Decision, request: PickRequest, prepared: PreparedRequest | undefined, seconds: number): void {
    this.pickSeconds.observe(seconds);
    this.phaseSeconds.pick.observe(seconds);
    this.decisions.record(decision);
    (decision.status === 'routed' ? this.attemptSucceeded : this.attemptFailed).inc();
    if (decision.counts.subsetIgnored > 0) this.metrics.subsetEntriesIgnored.inc(decision.counts.subsetIgnored);
    if (decision.counts.subsetUnmatched > 0) this.subsetUnmatched(decision);
    if (decision.gatewayZone === 'unknown' || decision.gatewayZone === 'malformed') this.unknownGatewayZone(decision, request);
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
          zone: decision.zone,
          gatewayZone: decision.gatewayZone,
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
  }

  /**
   * Subset entries that named no routable pod: counted, and logged at most once a minute with the
   * first of them. In locality mode a stale hint (pods rescheduled) silently narrows the zone's
   * local candidates and sends its traffic cross-zone; this is how an operator finds out.
   */
  private subsetUnmatched(decision: Decision): void {
    this.metrics.subsetEntriesUnmatched.inc(decision.counts.subsetUnmatched);
    const now = this.now();
    if (now - this.unmatchedLoggedAt < UNMATCHED_LOG_EVERY_MS) return;
    this.unmatchedLoggedAt = now;
    this.logger.warn(
      {
        unmatched: decision.counts.subsetUnmatched,
        entries: decision.subsetUnmatchedEntries,
        subsetEntries: decision.counts.subsetEntries,
        rule: decision.rule,
        requestId: decision.requestId,
      },
      'subset hint names endpoints that are not routable pods of the pool (stale hint?)',
    );
  }

  /**
   * The gateway named a zone the pool has no pod in, or a value that is not a zone name: the
   * request was picked for this EPP's zone. Counted, and logged at most once a minute with the
   * value (cut like a label value): a gateway whose zone is misconfigured, or a zone whose pods
   * are all gone, sends its requests to be priced from the wrong place.
   */
  private unknownGatewayZone(decision: Decision, request: PickRequest): void {
    (decision.gatewayZone === 'unknown' ? this.zoneUnknown : this.zoneMalformed).inc();
    const now = this.now();
    if (now - this.unknownZoneLoggedAt < UNMATCHED_LOG_EVERY_MS) return;
    this.unknownZoneLoggedAt = now;
    this.logger.warn(
      {
        gatewayZone: typeof request.zone === 'string' ? capLabel(request.zone) : request.zone,
        reason: decision.gatewayZone,
        pickedFor: decision.zone,
        requestId: decision.requestId,
      },
      'the gateway names a zone the pool has no pod in (or not a zone name); picked for this EPP zone',
    );
  }

  committed(
    decision: Decision,
    prepared: PreparedRequest | undefined,
    requestBytes: number,
    startedAt: number,
    now: number,
  ): RequestRecord {
    this.spill.record(decision.zone, decision.entries[0]?.zone ?? '', now);
    this.routed.inc();
    const labels = this.modelLabels;
    const target = prepared?.model ?? '';
    return this.requestMetrics.track(
      labels.of(prepared?.requestedModel ?? target),
      labels.of(target),
      decision.priority,
      requestBytes,
      startedAt,
    );
  }

  servedByFallback(decision: Decision, served: string): void {
    this.metrics.servedElsewhere.inc();
    // Per request, so debug; the periodic summary (telemetry/summary-log.ts) counts them at info.
    this.logger.debug({ primary: decision.entries[0]?.address, served }, 'served by a fallback; primary penalised');
  }

  primaryFailed(decision: Decision, status: number): void {
    this.metrics.primaryFailed.inc();
    this.logger.debug({ primary: decision.entries[0]?.address, status }, 'primary failed; penalised');
  }

  rejected(status: ErrorStatus, code: string, prepared: PreparedRequest | undefined): void {
    this.metrics.requests.inc({ outcome: String(status) as Outcome });
    const target = prepared?.model ?? '';
    this.requestMetrics.rejected(this.modelLabels.of(prepared?.requestedModel ?? target), this.modelLabels.of(target), status);
    if (status >= 500 && status !== 503) this.logger.error({ status, code }, 'request failed');
  }

  protocolViolation(reason: string): void {
    this.logger.warn({ reason }, 'ext_proc protocol violation');
  }

  requestTimedOut(timeoutMs: number): void {
    this.logger.warn({ timeoutMs }, 'request not complete in time; ending the stream');
  }

  flowHeld(priority: number, flow: string): void {
    this.flow.held(priority, flow);
  }

  flowLeft(priority: number, flow: string, outcome: FlowOutcome, waitedMs: number): void {
    this.flow.left(priority, flow, outcome, waitedMs);
  }
}
