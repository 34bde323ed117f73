/**
 * spillway-xds, wired (docs/xds.md): the pool's NATS stream is replayed and followed into a Fleet
 * exactly as the EPP does (@spillway/bus), readiness changes are coalesced for `--push-delay-ms`,
 * and the hub (hub.ts, pure) decides what each connected node is sent. This file only moves bytes
 * between sockets and the hub.
 */
import { createServer as createHttpServer, type Server as HttpServer } from 'node:http';
import pino, { type Logger } from 'pino';
import { Server, ServerCredentials, status as GrpcStatus, type ServerDuplexStream } from '@grpc/grpc-js';
import type { NatsConnection } from '@nats-io/nats-core';
import { jetstreamManager } from '@nats-io/jetstream';
import { connectNatsWithRetry, describeDifferences, ensureStream, startReader, type EventReader } from '@spillway/bus';
import { Fleet } from '@spillway/fleet';
import { HealthService } from '@spillway/protocol';
import type { XdsConfig } from './config.js';
import { XdsHealth } from './health.js';
import { XdsHub, type HubObserver, type XdsTransport } from './hub.js';
import { AggregatedDiscoveryServiceService } from '@spillway/xds-protocol';
import { kindOf, type DiscoveryRequest, type DiscoveryResponse } from '@spillway/xds-protocol';
import { XdsMetrics } from './metrics.js';
import { RateLimiter } from './rate-limit.js';
import type { XdsSession } from './session.js';
import { RoutingChangeSink } from './view-sink.js';

export const CONTROL_PLANE = 'spillway-xds';
/** A discovery request is a node and a few names; Envoy's node metadata is the bulk of it. */
const MAX_REQUEST_BYTES = 1024 * 1024;
const LOG_INTERVAL_MS = 60_000;

type AdsCall = ServerDuplexStream<DiscoveryRequest, DiscoveryResponse>;

export interface RunningXds {
  readonly port: number;
  readonly healthPort: number;
  readonly metricsPort: number;
  readonly hub: XdsHub;
  readonly fleet: Fleet;
  readonly health: XdsHealth;
  readonly metrics: XdsMetrics;
  /** Resolves once the first replay has caught up and nodes are answered. */
  readonly ready: Promise<void>;
  reader(): EventReader | undefined;
  close(): Promise<void>;
}

export interface StartXdsOptions {
  logger?: Logger;
}

export async function startXds(config: XdsConfig, options: StartXdsOptions = {}): Promise<RunningXds> {
  const { flags } = config;
  const logger = options.logger ?? pino({ level: flags.logLevel, base: { service: 'spillway-xds', pool: flags.pool } });
  logger.info(
    { pool: flags.pool, stream: flags.stream, nats: config.nats.servers, clusterName: flags.clusterName, zones: flags.zones },
    'starting',
  );

  const fleet = new Fleet({ maxClockSkewMs: flags.maxClockSkewMs, maxPodsPerZone: flags.maxPodsPerZone });
  const calls = new Map<XdsSession, AdsCall>();
  const transport: XdsTransport = {
    send(session, out) {
      const call = calls.get(session);
      if (call !== undefined && !call.destroyed && call.writable) call.write(out.response);
    },
    close(session, code, message) {
      const call = calls.get(session);
      calls.delete(session);
      if (call === undefined || call.destroyed) return;
      call.emit('error', {
        code: code === 'INVALID_ARGUMENT' ? GrpcStatus.INVALID_ARGUMENT : GrpcStatus.RESOURCE_EXHAUSTED,
        details: message,
      });
    },
  };
  const logs = new RateLimiter(LOG_INTERVAL_MS);
  const observer: HubObserver = {
    request(session, outcome) {
      if (outcome.kind === 'nack') {
        const type = kindOf(outcome.typeUrl);
        if (logs.allow(`nack\u0000${type}\u0000${outcome.version}`, Date.now()))
          logger.warn(
            { node: session.node?.id, zone: session.node?.zone, type, version: outcome.version, error: outcome.message },
            'a node rejected a response (NACK); it keeps its last good version, and this version is not sent to it again (logged once a minute per type and version)',
          );
      } else if (outcome.kind === 'ack') {
        logger.debug({ node: session.node?.id, type: kindOf(outcome.typeUrl), version: outcome.version }, 'ack');
      }
    },
    refused(session, reason, message) {
      if (logs.allow(`refused\u0000${reason}\u0000${session.node?.zone ?? ''}`, Date.now()))
        logger.warn(
          { node: session.node?.id, zone: session.node?.zone, reason },
          `stream refused: ${message} (logged once a minute per reason and zone)`,
        );
    },
  };
  const hub = new XdsHub(
    () => fleet.pool(flags.pool),
    { pool: flags.pool, clusterName: flags.clusterName, zones: flags.zones, maxNodes: flags.maxNodes, controlPlane: CONTROL_PLANE },
    transport,
    observer,
  );
  const health = new XdsHealth();
  let reader: EventReader | undefined;
  const metrics = new XdsMetrics({ hub, fleet, pool: flags.pool, reader: () => reader?.status });

  // Coalescing: the first change of a batch starts the wait, changes during it join the batch.
  let batchStart: number | undefined;
  let pushTimer: NodeJS.Timeout | undefined;
  const push = (): void => {
    pushTimer = undefined;
    const started = batchStart ?? performance.now();
    batchStart = undefined;
    const sent = hub.flush();
    if (sent > 0) metrics.pushSeconds.observe((performance.now() - started) / 1000);
  };
  const sink = new RoutingChangeSink(fleet, () => {
    hub.changed();
    if (!hub.isReady || pushTimer !== undefined) return;
    batchStart = performance.now();
    pushTimer = setTimeout(push, flags.pushDelayMs);
  });

  const adsServer = newGrpcServer(flags.connectionTimeoutMs);
  adsServer.addService(AggregatedDiscoveryServiceService, {
    streamAggregatedResources: (call: AdsCall) => handleStream(hub, calls, call),
  });
  adsServer.addService(HealthService, health.implementation());
  const healthServer = newGrpcServer(flags.connectionTimeoutMs);
  healthServer.addService(HealthService, health.implementation());
  const port = await bindGrpc(adsServer, flags.host, flags.port);
  const healthPort = await bindGrpc(healthServer, flags.host, flags.healthPort);
  const metricsServer = await startHttp(flags.host, flags.metricsPort, flags.connectionTimeoutMs, (path) => {
    if (path === '/metrics')
      return metrics.registry.metrics().then((text) => ({ status: 200, type: metrics.registry.contentType, body: text }));
    if (path === '/healthz') return { status: 200, type: 'text/plain', body: 'ok\n' };
    if (path === '/readyz')
      return health.isReady ? { status: 200, type: 'text/plain', body: 'ok\n' } : { status: 503, type: 'text/plain', body: 'not ready\n' };
    if (path === '/debug/nodes') return { status: 200, type: 'application/json', body: JSON.stringify(debugNodes(hub, calls)) };
    return undefined;
  });
  logger.info({ host: flags.host, port, healthPort, metricsPort: metricsServer.port }, 'listening');

  let nc: NatsConnection | undefined;
  let closed = false;
  const stop = new AbortController();
  const stopped = new Promise<void>((resolve) => stop.signal.addEventListener('abort', () => resolve(), { once: true }));
  let markReady!: () => void;
  const ready = new Promise<void>((resolve) => (markReady = resolve));
  const ensure = async (connection: NatsConnection): Promise<void> => {
    const result = await ensureStream(await jetstreamManager(connection), { name: flags.stream });
    if (result.created) logger.info({ stream: flags.stream }, 'created stream');
    for (const difference of describeDifferences(result))
      logger.warn({ stream: flags.stream, difference }, 'existing stream differs from the defaults; left unchanged');
  };
  const follow = async (): Promise<void> => {
    const connection = await connectNatsWithRetry(config.nats, { logger, signal: stop.signal });
    if (connection === undefined || closed) return;
    nc = connection;
    logger.info({ servers: config.nats.servers }, 'connected to NATS');
    if (flags.ensureStream) await retrying(() => ensure(connection), logger, stop.signal);
    if (closed) return;
    reader = startReader(connection, {
      pool: flags.pool,
      sink,
      stream: flags.stream,
      logger,
      onStreamMissing: flags.ensureStream ? () => ensure(connection) : undefined,
    });
    await Promise.race([reader.caughtUp, stopped]);
    if (closed) return;
    logger.info({ pods: fleet.pool(flags.pool)?.readyCount ?? 0, events: fleet.counters }, 'replay caught up; answering nodes');
    hub.setReady();
    health.setReady(true);
    markReady();
  };
  const following = follow().catch((error: unknown) => {
    if (!closed) logger.error({ err: error }, 'NATS setup failed');
  });
  const housekeeping = setInterval(() => fleet.pruneDeleted(Date.now() - 3_600_000), 60_000);
  housekeeping.unref();

  return {
    port,
    healthPort,
    metricsPort: metricsServer.port,
    hub,
    fleet,
    health,
    metrics,
    ready,
    reader: () => reader,
    close: async () => {
      if (closed) return;
      closed = true;
      stop.abort();
      clearInterval(housekeeping);
      if (pushTimer !== undefined) clearTimeout(pushTimer);
      health.setReady(false);
      health.closeWatchers();
      for (const call of calls.values()) if (!call.destroyed) call.end();
      calls.clear();
      await Promise.all([shutdownGrpc(adsServer, 2000), shutdownGrpc(healthServer, 2000), closeHttp(metricsServer.server)]);
      await following;
      await reader?.close();
      await nc?.close();
    },
  };
}

/** One ADS stream: a session in the hub for as long as the call lives. */
function handleStream(hub: XdsHub, calls: Map<XdsSession, AdsCall>, call: AdsCall): void {
  const session = hub.open();
  if (session === undefined) {
    call.emit('error', {
      code: GrpcStatus.RESOURCE_EXHAUSTED,
      details: 'spillway-xds serves its --max-nodes nodes already; try another replica or later',
    });
    return;
  }
  calls.set(session, call);
  const forget = (): void => {
    calls.delete(session);
    hub.close(session);
  };
  call.on('data', (request: DiscoveryRequest) => hub.onRequest(session, request));
  call.on('end', () => {
    forget();
    if (!call.destroyed && call.writable) call.end();
  });
  call.on('cancelled', forget);
  call.on('close', forget);
  call.on('error', forget);
}

/** What /debug/nodes shows: each connected node, its place and what it has ACKed (bounded by --max-nodes). */
function debugNodes(hub: XdsHub, calls: Map<XdsSession, AdsCall>) {
  return {
    ready: hub.isReady,
    memory: hub.memory(),
    nodes: [...calls.keys()].map((session) => ({
      id: session.node?.id,
      zone: session.node?.zone,
      region: session.node?.region,
      userAgent: session.node?.userAgent,
      accountedBytes: session.accountedBytes,
      types: Object.fromEntries(
        [...session.subscribedTypes()].map((t) => [kindOf(t), { acked: session.ackedVersion(t), awaitingAck: session.awaitingAck(t) }]),
      ),
    })),
  };
}

function newGrpcServer(silentMs: number): Server {
  return new Server({
    'grpc.max_receive_message_length': MAX_REQUEST_BYTES,
    'grpc.keepalive_permit_without_calls': 1,
    'grpc.http2.min_ping_interval_without_data_ms': 5_000,
    'grpc.keepalive_time_ms': silentMs,
    'grpc.keepalive_timeout_ms': silentMs,
  });
}

function bindGrpc(server: Server, host: string, port: number): Promise<number> {
  const address = host.includes(':') ? `[${host}]:${port}` : `${host}:${port}`;
  return new Promise((resolve, reject) => {
    server.bindAsync(address, ServerCredentials.createInsecure(), (error, bound) =>
      error ? reject(new Error(`cannot listen on ${address}: ${error.message}`)) : resolve(bound),
    );
  });
}

function shutdownGrpc(server: Server, graceMs: number): Promise<void> {
  return new Promise((resolve) => {
    const force = setTimeout(() => {
      server.forceShutdown();
      resolve();
    }, graceMs);
    force.unref();
    server.tryShutdown(() => {
      clearTimeout(force);
      resolve();
    });
  });
}

interface HttpReply {
  status: number;
  type: string;
  body: string;
}

function startHttp(
  host: string,
  port: number,
  silentMs: number,
  route: (path: string) => HttpReply | Promise<HttpReply> | undefined,
): Promise<{ server: HttpServer; port: number }> {
  const server = createHttpServer((req, res) => {
    const path = (req.url ?? '/').split('?', 1)[0] ?? '/';
    const reply = req.method === 'GET' ? route(path) : undefined;
    Promise.resolve(reply ?? { status: 404, type: 'text/plain', body: 'not found\n' }).then(
      (r) => {
        res.writeHead(r.status, { 'content-type': r.type, 'cache-control': 'no-store' });
        res.end(r.body);
      },
      (error: unknown) => {
        res.writeHead(500, { 'content-type': 'text/plain' });
        res.end(String(error));
      },
    );
  });
  server.timeout = silentMs;
  server.headersTimeout = silentMs;
  server.requestTimeout = silentMs;
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, host, () => {
      const address = server.address();
      resolve({ server, port: typeof address === 'object' && address ? address.port : port });
    });
  });
}

function closeHttp(server: HttpServer): Promise<void> {
  return new Promise((resolve) => {
    server.closeAllConnections();
    server.close(() => resolve());
  });
}

async function retrying(action: () => Promise<void>, logger: Logger, signal: AbortSignal): Promise<void> {
  const aborted = new Promise<void>((resolve) => signal.addEventListener('abort', () => resolve(), { once: true }));
  for (let attempt = 0; !signal.aborted; attempt++) {
    try {
      await Promise.race([action(), aborted]);
      return;
    } catch (error) {
      if (signal.aborted) return;
      logger.warn({ err: error, attempt }, 'cannot ensure the stream yet; retrying');
      await Promise.race([new Promise((r) => setTimeout(r, Math.min(5000, 250 * 2 ** Math.min(attempt, 5)))), aborted]);
    }
  }
}
