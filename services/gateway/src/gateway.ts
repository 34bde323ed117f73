// startGateway: the HTTP server, its own /gateway/* paths, and the parts every request shares.
import { createServer } from 'node:http';
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { pino } from 'pino';
import type { Logger } from 'pino';
import { EppCluster, type EppHostState } from './epp-cluster.js';
import { gatewayError } from './errors.js';
import { handleExchange } from './exchange.js';
import type { ExchangeContext } from './exchange.js';
import { HealthView } from './health.js';
import type { EndpointHealth } from './health.js';
import { ModelServers } from './model-servers.js';
import { resolveOptions, XDS_DEFAULTS } from './options.js';
import type { GatewayOptions, ResolvedOptions, XdsOptions } from './options.js';
import { DiscoveredSubsetFilter, staticSubsetFilter } from './subset-filter.js';
import { GatewayXdsClient, type XdsState } from './xds-client.js';
import { Stats } from './stats.js';
import type { StatsSnapshot } from './stats.js';
import { Upstreams } from './upstream.js';

export interface GatewayStats extends StatsSnapshot {
  zone: string | undefined;
  /** The --epp addresses, as given. */
  epp: string;
  /** The --epp-fallback groups, as given. */
  eppFallback: string | undefined;
  /** Whether any EPP host passes the gateway's health checks. */
  eppHealthy: boolean;
  /** Each EPP host and its health as the gateway's checks see it. */
  eppHosts: EppHostState[];
  subsetHint: boolean;
  /** With --xds: the ADS stream, the versions accepted, ACKs and NACKs. */
  xds: XdsState | undefined;
  endpoints: EndpointHealth[];
}

export interface Gateway {
  /** `http://host:port` with the bound port. */
  readonly url: string;
  readonly port: number;
  readonly options: ResolvedOptions;
  stats(): GatewayStats;
  /** The subset hint the next request would carry. */
  subsetHint(): string[];
  close(): Promise<void>;
}

/** Paths the gateway answers itself; everything else goes through the EPP. */
const STATS_PATH = '/gateway/stats';
const HEALTH_PATH = '/gateway/health';

export async function startGateway(input: GatewayOptions): Promise<Gateway> {
  const options = resolveOptions(input);
  const logger: Logger = input.logger ?? pino({ level: options.logLevel, base: { service: 'spillway-gateway' } });
  // The model-server cluster: the static list, or (with --xds) empty until EDS fills it.
  const servers: ModelServers = new ModelServers(options.endpoints, options.zone, (address: string): boolean => health.isHealthy(address));
  const health: HealthView = new HealthView(
    servers,
    {
      intervalMs: options.healthIntervalMs,
      timeoutMs: options.healthTimeoutMs,
      path: options.healthPath,
      unhealthyThreshold: options.unhealthyThreshold,
      outlierFailures: options.outlierFailures,
      outlierEjectionMs: options.outlierEjectionMs,
    },
    logger,
  );
  // The shipped config's EPP cluster: each host health-checked every 2 s (or as set), 1 s timeout,
  // 2 to fail, 1 to recover; new streams by priority, then round robin over a level's healthy hosts.
  const epp = new EppCluster(
    options.eppPriorities,
    options.eppTls,
    {
      intervalMs: options.eppHealthIntervalMs,
      timeoutMs: 1_000,
      unhealthyThreshold: 2,
      healthyThreshold: 1,
      panicThreshold: options.eppHealthyPanicThreshold,
    },
    logger,
  );
  const upstreams = new Upstreams({ connectTimeoutMs: options.connectTimeoutMs, perTryTimeoutMs: options.perTryTimeoutMs });
  const stats = new Stats();
  const xds = options.xds === undefined ? undefined : discovery(options, options.xds, servers, logger);
  const subsetFilter = xds?.filter ?? staticSubsetFilter(health, options.zone);
  const ctx: ExchangeContext = {
    epp,
    servers,
    health,
    subsetFilter,
    upstreams,
    stats,
    logger,
    options,
    random: Math.random,
  };

  const snapshot = (): GatewayStats => ({
    ...stats.snapshot(),
    zone: options.zone,
    epp: options.epp,
    eppFallback: input.eppFallback,
    eppHealthy: epp.healthy,
    eppHosts: epp.hosts(),
    subsetHint: options.subsetHint,
    xds: xds?.client.state(),
    endpoints: health.snapshot(),
  });

  const server = createServer((req: IncomingMessage, res: ServerResponse) => {
    const path = (req.url ?? '/').split('?')[0];
    if (path === STATS_PATH || path === HEALTH_PATH) {
      const body = path === STATS_PATH ? JSON.stringify(snapshot()) : '{"status":"ok"}';
      res.writeHead(200, { 'content-type': 'application/json', 'cache-control': 'no-store' }).end(body);
      return;
    }
    handleExchange(ctx, req, res).catch((error: unknown) => {
      logger.error({ err: error }, 'request failed');
      if (!res.headersSent) {
        const reply = gatewayError(500, 'gateway_error', 'internal gateway error');
        res.writeHead(reply.status, { 'content-type': 'application/json' }).end(reply.body);
      } else {
        res.destroy();
      }
    });
  });

  if (xds !== undefined) {
    xds.client.start();
    // Envoy starts its listeners once its clusters warmed, or after initial_fetch_timeout.
    const timeoutMs = options.xds?.initialFetchTimeoutMs ?? 0;
    if (!(await xds.client.initialFetch(timeoutMs)))
      logger.warn({ server: options.xds?.server, timeoutMs }, 'no EDS and ECDS answer from spillway-xds in time; listening anyway');
  }
  await Promise.all([health.start(), epp.start()]);
  try {
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(options.port, options.host, () => {
        server.off('error', reject);
        resolve();
      });
    });
  } catch (error) {
    xds?.client.stop();
    await health.stop();
    await epp.stop();
    throw error;
  }
  const { port } = server.address() as AddressInfo;
  const host = options.host.includes(':') ? `[${options.host}]` : options.host;
  const url = `http://${host}:${port}`;
  logger.info(
    {
      url,
      epp: options.epp,
      eppFallback: input.eppFallback,
      zone: options.zone,
      endpoints: servers.table.all.length,
      subsetHint: options.subsetHint,
      retries: options.retries,
    },
    'listening',
  );

  let closing: Promise<void> | undefined;
  const close = (): Promise<void> =>
    (closing ??= (async () => {
      const closed = new Promise<void>((resolve) => server.close(() => resolve()));
      server.closeAllConnections();
      await closed;
      xds?.client.stop();
      await health.stop();
      await epp.stop();
      await upstreams.close();
    })());

  return { url, port, options, stats: snapshot, subsetHint: () => subsetFilter.subset(), close };
}

/** The xDS client and what it feeds: the model-server cluster (EDS) and the subset filter (ECDS). */
function discovery(
  options: ResolvedOptions,
  xds: XdsOptions,
  servers: ModelServers,
  logger: Logger,
): { client: GatewayXdsClient; filter: DiscoveredSubsetFilter } {
  const zone = options.zone as string;
  const filter = new DiscoveredSubsetFilter(zone);
  const client = new GatewayXdsClient(
    {
      server: xds.server,
      node: { id: xds.nodeId ?? `spillway-gateway-${zone}`, zone, region: xds.region },
      clusterName: xds.clusterName ?? XDS_DEFAULTS.clusterName,
      filterName: XDS_DEFAULTS.filterName,
      logger: logger.child({ xds: xds.server }),
    },
    {
      endpoints: (endpoints) => servers.replace(endpoints),
      subsetFilter: (entries) => filter.update(entries),
    },
  );
  return { client, filter };
}
