import type { Logger } from 'pino';
import { Fleet } from '@spillway/fleet';
import { compileModelRewrites, type ModelRewriter, type ModelRewriteRule } from '@spillway/protocol';
import { Scheduler } from '@spillway/scheduler';
import type { EppConfig } from '../config/config.js';
import type { LiveSettings } from '../config/reload.js';
import { EppKv } from '../kv/epp-kv.js';
import { RequestControl } from '../request/control.js';
import type { BodyBudget } from '../request/body-budget.js';
import type { DeadlineSweeper } from '../request/deadlines.js';
import { newEppId } from '../shared-state/identity.js';
import { StateOutbox } from '../shared-state/outbox.js';
import { registerChargeMetrics } from '../telemetry/charge-metrics.js';
import { registerKvMetrics } from '../telemetry/kv-metrics.js';
import type { EppMetrics } from '../telemetry/metrics.js';
import { ModelLabels } from '../telemetry/model-labels.js';
import { RequestTelemetry } from '../telemetry/request-telemetry.js';

/**
 * The EPP's parts, made from its config and wired together: the view, the scheduler, the
 * shared-state outbox, the KV parts, the request control every stream calls, and the telemetry
 * it reports to. Nothing here runs on the request path; a config reload goes through reconfigure.
 */
export class EppCore {
  readonly fleet: Fleet;
  readonly scheduler: Scheduler;
  /** This EPP's entries for the pool's other EPPs (picks, releases, penalties); undefined when sharing is off. */
  readonly outbox: StateOutbox | undefined;
  /** KV events into the scheduler's block index, and prompts to token ids (kv/epp-kv.ts). */
  readonly kv: EppKv;
  /** The request path's observer: metrics, the decision log, the spill matrix. */
  readonly telemetry: RequestTelemetry;
  /** What every ext_proc stream calls (request/stream.ts). */
  readonly control: RequestControl;
  private readonly sharedBatchMs: number;

  constructor(
    config: EppConfig,
    readonly metrics: EppMetrics,
    readonly logger: Logger,
    now: () => number = Date.now,
    /** This process's id among the pool's EPPs (shared state, flow control's dispatch stagger). */
    readonly eppId: string = newEppId(),
  ) {
    const { flags } = config;
    this.fleet = new Fleet({
      staleAfterMs: flags.metricsStaleMs,
      maxClockSkewMs: flags.maxClockSkewMs,
      maxPodsPerZone: flags.maxPodsPerZone,
      maxZonesPerPool: flags.maxZonesPerPool,
      // An address belongs to one zone: when zones contest one, this EPP routes only its own zone's claimant.
      localZone: flags.zone,
    });
    const sharing = config.sharedState;
    this.sharedBatchMs = sharing.batchMs;
    this.outbox = sharing.enabled ? new StateOutbox(sharing) : undefined;
    this.scheduler = new Scheduler({
      fleet: this.fleet,
      pool: flags.pool,
      zone: flags.zone,
      region: flags.region,
      config: config.scheduler,
      seed: (Date.now() ^ process.pid) >>> 0,
      shared: {
        outbox: this.outbox,
        remoteEntryTtlMs: sharing.remoteEntryTtlMs,
        peerTimeoutMs: sharing.peerTimeoutMs,
        maxPeers: sharing.maxPeers,
        maxPeersPerZone: sharing.maxPeersPerZone,
      },
    });
    const scheduler = this.scheduler;
    this.kv = new EppKv(
      {
        enabled: flags.kvEvents,
        pool: flags.pool,
        tokenizers: config.tokenizers,
        cacheBytes: flags.tokenCacheBytes,
        maxChars: flags.tokenizeMaxChars,
      },
      scheduler,
    );
    registerChargeMetrics(metrics.registry, this.fleet);
    const kvMetrics = registerKvMetrics(metrics.registry, {
      counters: this.kv.counters,
      stats: () => scheduler.kvIndexStats,
      cache: this.kv.tokens?.cache,
    });
    this.telemetry = new RequestTelemetry({
      metrics,
      logger,
      modelLabels: new ModelLabels(config.modelRewrites, flags.metricModels),
      tokenized: kvMetrics.tokenized,
      now,
    });
    this.control = new RequestControl({
      picker: scheduler,
      tokens: this.kv,
      observer: this.telemetry,
      limits: {
        maxBodyBytes: flags.maxBodyBytes,
        requestTimeoutMs: flags.requestTimeoutMs,
        maxBufferedBodyBytes: flags.maxBufferedBodyBytes,
      },
      rewriter: rewriterOf(config.modelRewrites),
      now,
      flowControl: config.scheduler.flowControl,
      dispatchDelayMs: () => this.dispatchDelayMs(),
    });
    this.telemetry.flow.attach(this.control.flow);
  }

  /**
   * Active-active: a sample reaches every EPP of the pool at once, so after one an EPP's dispatch
   * pass waits its rank among the pool's EPPs it knows (by id, at most MAX_STAGGERED_RANK) times the
   * shared-state channel's batch delay plus `flowControl.dispatchStaggerMs` for the network. The
   * later EPP's pick then counts what earlier ones dispatched, and two EPPs do not release into
   * the same room. 0 without sharing.
   */
  private dispatchDelayMs(): number {
    if (this.outbox === undefined) return 0;
    const rank = Math.min(MAX_STAGGERED_RANK, this.scheduler.shared.rankOf(this.eppId));
    return rank * (this.sharedBatchMs + this.scheduler.config.flowControl.dispatchStaggerMs);
  }

  /** Request-body bytes held by all open streams. */
  get bodies(): BodyBudget {
    return this.control.bodies;
  }

  get deadlines(): DeadlineSweeper {
    return this.control.deadlines;
  }

  /**
   * Puts a reloaded config in force between two picks (JavaScript runs one at a time): the
   * scheduler's numbers, objectives and list length, model rewrites, the model label set and the
   * log level. What the EPP learnt (in-flight picks, penalties, prefix index) is kept.
   */
  reconfigure(settings: LiveSettings): void {
    this.scheduler.reconfigure(settings.scheduler);
    // Held requests stay held: new bounds and budget apply from now on.
    this.control.flow.reconfigure(settings.scheduler.flowControl);
    this.control.rewriter = rewriterOf(settings.modelRewrites);
    this.telemetry.modelLabels = new ModelLabels(settings.modelRewrites, settings.metricModels);
  }
}

/**
 * Ranks past this one wait as long as it: with more EPPs than that in a pool, the later ones share
 * a turn (a pass never waits more than a few batch delays for a sample's room).
 */
const MAX_STAGGERED_RANK = 3;

function rewriterOf(rules: readonly ModelRewriteRule[]): ModelRewriter | undefined {
  return rules.length > 0 ? compileModelRewrites(rules) : undefined;
}
