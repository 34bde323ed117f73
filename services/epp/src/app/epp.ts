import pino, { type Logger } from 'pino';
import type { NatsConnection } from '@nats-io/nats-core';
import { jetstreamManager } from '@nats-io/jetstream';
import { connectNatsWithRetry, ensureStream, describeDifferences, startReader, type EventReader } from '@spillway/bus';
import { extProcService, HealthService } from '@spillway/protocol';
import { ServerCredentials } from '@grpc/grpc-js';
import { BUILD } from '../telemetry/build-info.js';
import type { EppConfig } from '../config/config.js';
import { watchEppConfig } from '../config/watch.js';
import { EppCore } from './core.js';
import { HealthState } from './health.js';
import { EppMetrics } from '../telemetry/metrics.js';
import { bindGrpc, grpcCredentials, isLoopback, newGrpcServer, shutdownGrpc } from './grpc.js';
import { closeHttp, startMetricsServer } from './http.js';
import { handleStream } from '../request/stream.js';
import { startChannel, type RunningChannel } from '../shared-state/channel.js';
import { SharedStateCounters } from '../shared-state/counters.js';
import { newEppId } from '../shared-state/identity.js';
import { registerSharedStateMetrics } from '../telemetry/shared-state-metrics.js';
import { createView, startViewServer } from '../ui/view.js';
import { refreshViewGauges } from '../telemetry/view-gauges.js';
import { StaleViewLog } from '../telemetry/view-staleness.js';
import { startSummaryLog } from '../telemetry/summary-log.js';

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
 * Wires the parts: gRPC servers first (reporting NOT_SERVING), then NATS in the background —
 * connected with retries, the stream ensured, the replay started into the fleet — and readiness
 * once the replay caught up. Readiness then stays SERVING: a NATS outage never stops
 * picking, the EPP keeps serving its last view and exports and logs the view's age.
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
  const health = new HealthState();
  const configWatch = watchEppConfig(config, core, metrics, logger, options.configPollMs);
  const summary = startSummaryLog(metrics, logger, options.summaryMs);
  const eppId = newEppId();
  const sharedCounters = core.outbox === undefined ? undefined : new SharedStateCounters();
  if (core.outbox !== undefined && sharedCounters !== undefined) {
    const outbox = core.outbox;
    const shared = core.scheduler.shared;
    registerSharedStateMetrics(metrics.registry, {
      counters: sharedCounters,
      outboxDropped: () => outbox.dropped,
      peerCount: () => shared.peerCount,
      ownInFlight: () => shared.ownInFlight,
      remoteInFlight: () => shared.remoteInFlight,
    });
  }

  const credentials = grpcCredentials(config.tls);
  const grpc = newGrpcServer(flags.connectionTimeoutMs);
  grpc.addService(extProcService, { process: (call: Parameters<typeof handleStream>[1]) => handleStream(core.control, call) });
  grpc.addService(HealthService, health.implementation());
  const healthServer = newGrpcServer(flags.connectionTimeoutMs);
  healthServer.addService(HealthService, health.implementation());
  const grpcPort = await bindGrpc(grpc, flags.host, flags.grpcPort, credentials);
  // Kubelet gRPC probes cannot present client certificates: plaintext unless asked otherwise.
  const healthTls = flags.healthTls && config.tls !== undefined;
  const healthPort = await bindGrpc(
    healthServer,
    flags.host,
    flags.healthPort,
    healthTls ? credentials : ServerCredentials.createInsecure(),
  );
  let nc: NatsConnection | undefined;
  let reader: EventReader | undefined;
  // The operators' view (docs/ui.md): computed when asked, off the request path.
  const view = flags.ui
    ? createView(
        {
          fleet: core.fleet,
          scheduler: core.scheduler,
          decisions: core.telemetry.decisions,
          spill: core.telemetry.spill,
          isReady: () => health.isReady,
          readerStatus: () => reader?.status,
        },
        logger,
      )
    : undefined;
  // The view's gauges are computed when Prometheus asks, off the request path.
  const metricsServer = await startMetricsServer(
    metrics.registry,
    flags.host,
    flags.metricsPort,
    {
      isReady: () => health.isReady,
      beforeScrape: () => refreshViewGauges(metrics, core.fleet, core.scheduler, flags.pool, Date.now()),
      recentDecisions: (limit) => core.telemetry.decisions.recent(limit),
      routes: flags.uiPort === undefined ? view : undefined,
    },
    flags.connectionTimeoutMs,
  );
  const viewServer =
    view !== undefined && flags.uiPort !== undefined
      ? await startViewServer(view, flags.host, flags.uiPort, flags.connectionTimeoutMs)
      : undefined;
  const uiPort = view === undefined ? undefined : (viewServer?.port ?? metricsServer.port);
  logger.info(
    {
      host: flags.host,
      grpcPort,
      healthPort,
      metricsPort: metricsServer.port,
      uiPort,
      tls: config.tls !== undefined,
      mtls: config.tls?.clientCa !== undefined,
      healthTls,
    },
    'listening',
  );
  if (config.tls === undefined && !isLoopback(flags.host)) {
    logger.warn(
      { host: flags.host, grpcPort },
      'ext_proc is served in plaintext on a non-loopback address: any client that reaches this port can have requests picked and can report served endpoints that penalise pods. Use --tls-cert, --tls-key and --tls-client-ca (mTLS) with the gateway, or a network policy (see docs/security.md)',
    );
  }

  let channel: RunningChannel | undefined;
  // Without sharing there is no warm start to wait for.
  let warm = sharedCounters === undefined;
  let closed = false;
  const stop = new AbortController();
  const stopped = new Promise<void>((resolve) => stop.signal.addEventListener('abort', () => resolve(), { once: true }));
  let markReady!: () => void;
  const ready = new Promise<void>((resolve) => (markReady = resolve));

  // Readiness: SERVING once the first replay caught up, and it stays so (docs/hardening.md, finding 14).
  const staleLog = new StaleViewLog(logger);
  const evaluate = (): void => {
    const status = reader?.status;
    const now = Date.now();
    const staleFor = status?.staleSince === undefined ? 0 : now - status.staleSince;
    metrics.caughtUp.set(status?.caughtUp === true ? 1 : 0);
    metrics.natsConnected.set(status?.connection === 'connected' ? 1 : 0);
    metrics.viewStaleSeconds.set(staleFor / 1000);
    staleLog.update(status?.staleSince, now, status?.connection);
    if (status?.caughtUp === true && warm && !health.isReady) {
      logger.info('ready');
      health.setReady(true);
      markReady();
    }
  };
  const ensure = (connection: NatsConnection) => ensureStreamLogged(connection, flags.stream, logger);
  const connectAndFollow = async (): Promise<void> => {
    const connection = await connectNatsWithRetry(config.nats, { logger, signal: stop.signal });
    if (connection === undefined) return;
    nc = connection;
    if (closed) return;
    logger.info({ servers: config.nats.servers }, 'connected to NATS');
    if (flags.ensureStream) await ensureStreamWithRetry(() => ensure(connection), logger, flags.stream, stop.signal);
    if (closed) return;
    core.kv.follow(connection, logger);
    reader = startReader(connection, {
      pool: flags.pool,
      sink: core.kv.readerSink(core.fleet),
      stream: flags.stream,
      logger,
      // A stream deleted while running is created again, as at start, when this EPP may create it.
      onStreamMissing: flags.ensureStream ? () => ensure(connection) : undefined,
    });
    await Promise.race([reader.caughtUp, stopped]);
    if (closed) return;
    logger.info({ pods: core.fleet.pool(flags.pool)?.readyCount ?? 0, events: core.fleet.counters }, 'replay caught up');
    // Ready now rather than at the next tick: the time to SERVING is what a rollout waits on.
    if (warm) evaluate();
    if (core.outbox !== undefined && sharedCounters !== undefined) {
      // After the replay: peers' entries name endpoints, which the view must know. Ready after the warm start.
      channel = startChannel(
        connection,
        { pool: flags.pool, zone: flags.zone, epp: eppId },
        core.scheduler.shared,
        core.outbox,
        config.sharedState,
        sharedCounters,
        logger,
      );
      await Promise.race([channel.warm, stopped]);
      warm = true;
      if (!closed) evaluate();
    }
  };
  const following = connectAndFollow().catch((error: unknown) => {
    if (!closed) logger.error({ err: error }, 'NATS setup failed');
  });

  const tick = setInterval(evaluate, options.tickMs ?? 200);
  tick.unref();
  const housekeeping = setInterval(() => {
    const now = Date.now();
    core.scheduler.prune(now);
    // An hour is far past the 30 s readiness re-publish: nothing older than a tombstone is still coming.
    core.fleet.pruneDeleted(now - 3_600_000);
  }, 60_000);
  housekeeping.unref();

  return {
    grpcPort,
    healthPort,
    metricsPort: metricsServer.port,
    uiPort,
    core,
    health,
    metrics,
    eppId,
    sharedState: sharedCounters,
    ready,
    reader: () => reader,
    close: async () => {
      if (closed) return;
      closed = true;
      // Stops connecting, ensuring and waiting at once, whatever state NATS setup is in.
      stop.abort();
      clearInterval(tick);
      clearInterval(housekeeping);
      configWatch?.close();
      summary.close();
      core.control.close();
      health.setReady(false);
      health.closeWatchers();
      await Promise.all([
        shutdownGrpc(grpc, 2000),
        shutdownGrpc(healthServer, 2000),
        closeHttp(metricsServer.server),
        viewServer && closeHttp(viewServer.server),
      ]);
      await following;
      await channel?.close();
      await core.kv.close();
      await reader?.close();
      await nc?.close();
    },
  };
}

async function ensureStreamLogged(nc: NatsConnection, stream: string, logger: Logger): Promise<void> {
  const jsm = await jetstreamManager(nc);
  const result = await ensureStream(jsm, { name: stream });
  if (result.created) logger.info({ stream }, 'created stream');
  for (const difference of describeDifferences(result))
    logger.warn({ stream, difference }, 'existing stream differs from the defaults; left unchanged');
}

async function ensureStreamWithRetry(ensure: () => Promise<void>, logger: Logger, stream: string, signal: AbortSignal): Promise<void> {
  const aborted = new Promise<void>((resolve) => signal.addEventListener('abort', () => resolve(), { once: true }));
  for (let attempt = 0; !signal.aborted; attempt++) {
    try {
      await Promise.race([ensure(), aborted]);
      return;
    } catch (error) {
      if (signal.aborted) return;
      logger.warn({ err: error, stream, attempt }, 'cannot ensure the stream yet; retrying');
      await Promise.race([new Promise((r) => setTimeout(r, Math.min(5000, 250 * 2 ** Math.min(attempt, 5)))), aborted]);
    }
  }
}
