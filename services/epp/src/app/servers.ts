import type { Logger } from 'pino';
import { ServerCredentials } from '@grpc/grpc-js';
import type { ReaderStatus } from '@spillway/bus';
import { extProcService, HealthService } from '@spillway/protocol';
import type { EppConfig, ServerTls } from '../config/config.js';
import { handleStream } from '../request/stream.js';
import type { EppMetrics } from '../telemetry/metrics.js';
import { refreshViewGauges } from '../telemetry/view-gauges.js';
import { createView, startViewServer } from '../ui/view.js';
import type { EppCore } from './core.js';
import { bindGrpc, isLoopback, newGrpcServer, shutdownGrpc } from './grpc.js';
import { GrpcListener } from './grpc-listener.js';
import type { HealthState } from './health.js';
import { closeHttp, startMetricsServer } from './http.js';
import { ReloadingTls } from './tls-reload.js';

export interface ServerParts {
  readonly config: EppConfig;
  readonly core: EppCore;
  readonly metrics: EppMetrics;
  readonly health: HealthState;
  readonly logger: Logger;
  /** The event reader's status, for the operators' view; undefined until NATS was first reached. */
  readonly readerStatus: () => ReaderStatus | undefined;
}

export interface RunningServers {
  readonly grpcPort: number;
  readonly healthPort: number;
  readonly metricsPort: number;
  /** Where the operators' view is served (the metrics port unless --ui-port); undefined with --ui false. */
  readonly uiPort: number | undefined;
  /** The ext_proc port's listener: its open connections, and a graceful stop of them. */
  readonly extProc: GrpcListener;
  /** Closes every server: streams in flight get 2 s to finish. */
  close(): Promise<void>;
}

/**
 * The EPP's listening side: ext_proc and gRPC health on the gRPC port, gRPC health alone on the
 * health port, Prometheus, probes and the debug decisions on the metrics port, and the operators'
 * view there or on a port of its own. Everything served besides ext_proc is computed when asked,
 * off the request path.
 */
export async function startServers(parts: ServerParts): Promise<RunningServers> {
  const { config, core, metrics, health, logger } = parts;
  const { flags } = config;
  // TLS material follows its files: new connections get the version in force (app/tls-reload.ts).
  const tls = config.tls === undefined ? undefined : reloadingTls(config.tls, metrics, logger);
  const credentials = tls?.credentials() ?? ServerCredentials.createInsecure();
  const grpc = newGrpcServer(flags.connectionTimeoutMs);
  grpc.addService(extProcService, { process: (call: Parameters<typeof handleStream>[1]) => handleStream(core.control, call) });
  grpc.addService(HealthService, health.implementation());
  const healthServer = newGrpcServer(flags.connectionTimeoutMs);
  healthServer.addService(HealthService, health.implementation());
  // A listener of the EPP's own: a graceful stop needs to know who is connected (app/drain.ts).
  const extProc = await GrpcListener.listen(grpc, flags.host, flags.grpcPort, credentials);
  const grpcPort = extProc.port;
  // Kubelet gRPC probes cannot present client certificates: plaintext unless asked otherwise.
  const healthTls = flags.healthTls && config.tls !== undefined;
  const healthPort = await bindGrpc(
    healthServer,
    flags.host,
    flags.healthPort,
    healthTls ? credentials : ServerCredentials.createInsecure(),
  );
  // The operators' view (docs/ui.md).
  const view = flags.ui
    ? createView(
        {
          fleet: core.fleet,
          scheduler: core.scheduler,
          decisions: core.telemetry.decisions,
          spill: core.telemetry.spill,
          isReady: () => health.isReady,
          readerStatus: parts.readerStatus,
          flow: core.control.flow,
        },
        logger,
      )
    : undefined;
  // The view's gauges are computed when Prometheus asks.
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
  return {
    grpcPort,
    healthPort,
    metricsPort: metricsServer.port,
    uiPort,
    extProc,
    close: async () => {
      tls?.close();
      await Promise.all([
        extProc.drain(2000),
        shutdownGrpc(grpc, 2000),
        shutdownGrpc(healthServer, 2000),
        closeHttp(metricsServer.server),
        viewServer && closeHttp(viewServer.server),
      ]);
    },
  };
}

function reloadingTls(tls: ServerTls, metrics: EppMetrics, logger: Logger): ReloadingTls {
  const { reloads, expiry } = metrics.registerTls();
  return new ReloadingTls(tls, logger, {
    inForce: (notAfterMs) => {
      if (Number.isFinite(notAfterMs)) expiry.set(notAfterMs / 1000);
    },
    reloaded: (result) => reloads.inc({ result }),
  });
}
