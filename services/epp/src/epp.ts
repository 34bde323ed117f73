import type { Server as HttpServer } from 'node:http';
import pino, { type Logger } from 'pino';
import type { NatsConnection } from '@nats-io/nats-core';
import { jetstreamManager } from '@nats-io/jetstream';
import { connectNats, ensureStream, describeDifferences, startReader, type EventReader } from '@spillway/bus';
import { extProcService, HealthService } from '@spillway/protocol';
import type { EppConfig } from './config.js';
import { EppCore } from './core.js';
import { HealthState } from './health.js';
import { EppMetrics } from './metrics.js';
import { bindGrpc, grpcCredentials, newGrpcServer, shutdownGrpc, startMetricsServer } from './servers.js';
import { handleStream } from './stream.js';
import { refreshViewGauges } from './view-gauges.js';

export interface RunningEpp {
  readonly grpcPort: number;
  readonly healthPort: number;
  readonly metricsPort: number;
  readonly core: EppCore;
  readonly health: HealthState;
  readonly metrics: EppMetrics;
  /** Resolves once the replay has caught up and the EPP reports ready. */
  readonly ready: Promise<void>;
  reader(): EventReader | undefined;
  close(): Promise<void>;
}

export interface StartOptions {
  logger?: Logger;
  /** How often readiness and staleness are re-evaluated. */
  tickMs?: number;
}

/**
 * Wires the parts: gRPC servers first (reporting NOT_SERVING), then NATS in the background — the
 * stream ensured, the replay started into the fleet — and readiness once the replay caught up.
 * A NATS outage never stops picking: the EPP keeps serving its last view, marks it stale, and
 * reports NOT_SERVING only after `viewStaleLimitMs` without NATS.
 */
export async function startEpp(config: EppConfig, options: StartOptions = {}): Promise<RunningEpp> {
  const { flags } = config;
  const logger = options.logger ?? pino({ level: flags.logLevel, base: { service: 'spillway-epp', pool: flags.pool, zone: flags.zone } });
  const metrics = new EppMetrics();
  const core = new EppCore(config, metrics, logger);
  const health = new HealthState();

  const credentials = grpcCredentials(flags);
  const grpc = newGrpcServer();
  grpc.addService(extProcService, { process: (call: Parameters<typeof handleStream>[1]) => handleStream(core, call) });
  grpc.addService(HealthService, health.implementation());
  const healthServer = newGrpcServer();
  healthServer.addService(HealthService, health.implementation());
  const grpcPort = await bindGrpc(grpc, flags.host, flags.grpcPort, credentials);
  const healthPort = await bindGrpc(healthServer, flags.host, flags.healthPort, credentials);
  // The view's gauges are computed when Prometheus asks, off the request path.
  const metricsServer = await startMetricsServer(metrics.registry, flags.host, flags.metricsPort, {
    isReady: () => health.isReady,
    beforeScrape: () => refreshViewGauges(metrics, core.fleet, core.scheduler, flags.pool, Date.now()),
    recentDecisions: (limit) => core.decisions.recent(limit),
  });
  logger.info({ grpcPort, healthPort, metricsPort: metricsServer.port, tls: flags.tlsCert !== undefined }, 'listening');

  let nc: NatsConnection | undefined;
  let reader: EventReader | undefined;
  let closed = false;
  let markReady!: () => void;
  const ready = new Promise<void>((resolve) => (markReady = resolve));

  const connectAndFollow = async (): Promise<void> => {
    nc = await connectNats(config.nats);
    if (closed) return;
    logger.info({ servers: config.nats.servers }, 'connected to NATS');
    if (flags.ensureStream) await ensureStreamWithRetry(nc, flags.stream, logger, () => closed);
    if (closed) return;
    reader = startReader(nc, { pool: flags.pool, sink: core.fleet, stream: flags.stream, logger });
    await reader.caughtUp;
    logger.info({ pods: core.fleet.pool(flags.pool)?.readyCount ?? 0, events: core.fleet.counters }, 'replay caught up');
  };
  const following = connectAndFollow().catch((error: unknown) => {
    if (!closed) logger.error({ err: error }, 'NATS setup failed');
  });

  // Readiness: caught up once, and not stale past the limit.
  const tick = setInterval(() => {
    const status = reader?.status;
    const now = Date.now();
    const caughtUp = status?.caughtUp === true;
    const staleFor = status?.staleSince === undefined ? 0 : now - status.staleSince;
    metrics.caughtUp.set(caughtUp ? 1 : 0);
    metrics.natsConnected.set(status?.connection === 'connected' ? 1 : 0);
    metrics.viewStaleSeconds.set(staleFor / 1000);
    const isReady = caughtUp && staleFor <= flags.viewStaleLimitMs;
    if (isReady !== health.isReady) logger.info({ ready: isReady, staleForMs: staleFor }, 'readiness changed');
    health.setReady(isReady);
    if (isReady) markReady();
  }, options.tickMs ?? 200);
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
    core,
    health,
    metrics,
    ready,
    reader: () => reader,
    close: async () => {
      if (closed) return;
      closed = true;
      clearInterval(tick);
      clearInterval(housekeeping);
      core.deadlines.close();
      health.setReady(false);
      health.closeWatchers();
      await Promise.all([shutdownGrpc(grpc, 2000), shutdownGrpc(healthServer, 2000), closeHttp(metricsServer.server)]);
      await reader?.close();
      await nc?.close();
      await following;
    },
  };
}

async function ensureStreamWithRetry(nc: NatsConnection, stream: string, logger: Logger, stop: () => boolean): Promise<void> {
  for (let attempt = 0; !stop(); attempt++) {
    try {
      const jsm = await jetstreamManager(nc);
      const result = await ensureStream(jsm, { name: stream });
      if (result.created) logger.info({ stream }, 'created stream');
      for (const difference of describeDifferences(result)) logger.warn({ stream, difference }, 'existing stream differs from the defaults; left unchanged');
      return;
    } catch (error) {
      logger.warn({ err: error, stream, attempt }, 'cannot ensure the stream yet; retrying');
      await new Promise((r) => setTimeout(r, Math.min(5000, 250 * 2 ** Math.min(attempt, 5))));
    }
  }
}

function closeHttp(server: HttpServer): Promise<void> {
  return new Promise((resolve) => {
    server.closeAllConnections();
    server.close(() => resolve());
  });
}
