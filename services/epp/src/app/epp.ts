import pino, { type Logger } from 'pino';
import type { EventReader } from '@spillway/bus';
import type { EppConfig } from '../config/config.js';
import { watchEppConfig } from '../config/watch.js';
import { SharedStateCounters } from '../shared-state/counters.js';
import { BUILD } from '../telemetry/build-info.js';
import { EppMetrics } from '../telemetry/metrics.js';
import { registerSharedStateMetrics } from '../telemetry/shared-state-metrics.js';
import { startSummaryLog } from '../telemetry/summary-log.js';
import { ViewStatus } from '../telemetry/view-staleness.js';
import { EppCore } from './core.js';
import { drainExtProc } from './drain.js';
import { HealthState } from './health.js';
import { NatsFollower } from './nats.js';
import { Readiness } from './readiness.js';
import { startServers } from './servers.js';

/** How often charges past their bound are looked for between picks (a heap peek when there is none). */
const CHARGE_EXPIRY_MS = 250;

export interface RunningEpp {
  readonly grpcPort: number;
  readonly healthPort: number;
  readonly metricsPort: number;
  /** Where the operators' view is served (the metrics port unless --ui-port); undefined with --ui false. */
  readonly uiPort: number | undefined;
  readonly core: EppCore;
  readonly health: HealthState;
  readonly metrics: EppMetrics;
  /** This EPP's id among the pool's EPPs, and the shared-state channel's counters (undefined when sharing is off). */
  readonly eppId: string;
  readonly sharedState: SharedStateCounters | undefined;
  /** Resolves once the replay has caught up and the EPP reports ready. */
  readonly ready: Promise<void>;
  reader(): EventReader | undefined;
  /**
   * A graceful stop (SIGTERM, app/drain.ts): NOT_SERVING, time for the gateways' health checks to
   * notice, streams in flight finished, then close(). close() during a drain cuts it short.
   */
  drain(): Promise<void>;
  /** Stops at once: NOT_SERVING, streams in flight get 2 s. */
  close(): Promise<void>;
}

export interface StartOptions {
  logger?: Logger;
  /** How often readiness and staleness are re-evaluated. */
  tickMs?: number;
  /** How often the config file is re-read besides on change events (config/watch.ts). */
  configPollMs?: number;
  /** Period of the info-level activity summary (telemetry/summary-log.ts). */
  summaryMs?: number;
}

/**
 * Wires the parts: the servers first (reporting NOT_SERVING), then NATS in the background —
 * connected with retries, the stream ensured, the replay started into the fleet — and readiness
 * once the replay caught up (app/readiness.ts). Readiness then stays SERVING: a NATS outage never
 * stops picking, the EPP keeps serving its last view and exports and logs the view's age.
 */
export async function startEpp(config: EppConfig, options: StartOptions = {}): Promise<RunningEpp> {
  const { flags } = config;
  // The pool is logged once, below; every line carries the service and zone.
  const logger = options.logger ?? pino({ level: flags.logLevel, base: { service: 'spillway-epp', zone: flags.zone } });
  logger.info(
    { version: BUILD.version, pool: flags.pool, zone: flags.zone, region: flags.region, stream: flags.stream, nats: config.nats.servers },
    'starting',
  );
  for (const warning of config.warnings) logger.warn(warning);
  const metrics = new EppMetrics();
  const core = new EppCore(config, metrics, logger);
  const eppId = core.eppId;
  const health = new HealthState();
  const configWatch = watchEppConfig(config, core, metrics, logger, options.configPollMs);
  const summary = startSummaryLog(metrics, logger, options.summaryMs);
  const sharedCounters = sharedStateCounters(core, metrics);
  // Without sharing there is no warm start to wait for.
  const readiness = new Readiness(health, new ViewStatus(metrics, logger), logger, sharedCounters !== undefined);
  const nats = new NatsFollower({ config, core, readiness, logger, eppId, sharedCounters });
  const servers = await startServers({ config, core, metrics, health, logger, readerStatus: () => nats.status });
  nats.start();

  const tick = setInterval(() => readiness.evaluate(nats.status), options.tickMs ?? 200);
  tick.unref();
  // Started requests past their bound stop loading their endpoints (and end their records) even
  // while no pick comes to find them.
  const charges = setInterval(() => core.scheduler.expireCharges(Date.now()), CHARGE_EXPIRY_MS);
  charges.unref();
  const housekeeping = setInterval(() => {
    const now = Date.now();
    core.scheduler.prune(now);
    // An hour is far past the 30 s readiness re-publish: nothing older than a tombstone is still coming.
    core.fleet.pruneDeleted(now - 3_600_000);
  }, 60_000);
  housekeeping.unref();

  let closed = false;
  const close = async (): Promise<void> => {
    if (closed) return;
    closed = true;
    nats.abort();
    clearInterval(tick);
    clearInterval(charges);
    clearInterval(housekeeping);
    configWatch?.close();
    summary.close();
    core.control.close();
    readiness.close();
    await servers.close();
    await nats.close();
  };
  return {
    grpcPort: servers.grpcPort,
    healthPort: servers.healthPort,
    metricsPort: servers.metricsPort,
    uiPort: servers.uiPort,
    core,
    health,
    metrics,
    eppId,
    sharedState: sharedCounters,
    ready: readiness.ready,
    reader: () => nats.reader,
    drain: async () => {
      if (closed) return;
      await drainExtProc({
        readiness,
        extProc: servers.extProc,
        logger,
        delayMs: flags.drainDelayMs,
        timeoutMs: flags.drainTimeoutMs,
      });
      await close();
    },
    close,
  };
}

/** The shared-state channel's counters, exported as metrics; undefined when sharing is off. */
function sharedStateCounters(core: EppCore, metrics: EppMetrics): SharedStateCounters | undefined {
  const outbox = core.outbox;
  if (outbox === undefined) return undefined;
  const counters = new SharedStateCounters();
  const shared = core.scheduler.shared;
  registerSharedStateMetrics(metrics.registry, {
    counters,
    outboxDropped: () => outbox.dropped,
    peerCount: () => shared.peerCount,
    ownInFlight: () => shared.ownInFlight,
    remoteInFlight: () => shared.remoteInFlight,
  });
  return counters;
}
