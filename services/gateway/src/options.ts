// What startGateway needs. The CLI (flags.ts) fills these from flags; tests pass them directly.
import type { Logger } from 'pino';
import type { BodyMode, ProcessingMode, SendMode } from './ext-proc-filter.js';
import { parseRetryOn } from './retry-policy.js';
import type { RetryOn } from './retry-policy.js';

/** One model server the gateway may forward to (like an endpoint of Envoy's STATIC cluster). */
export interface EndpointConfig {
  /** `ip:port` or `[ipv6]:port`; compared with the EPP's destination entries after canonicalising. */
  readonly address: string;
  /** Zone label; endpoints in the gateway's own zone make up its subset hint. */
  readonly zone?: string | undefined;
  /** The cluster priority it is at (EDS: by distance from the gateway's zone); 0 for a static list. */
  readonly priority?: number | undefined;
  /** Its health as the cluster's source says (EDS health_status); healthy unless said otherwise. */
  readonly healthy?: boolean | undefined;
}

/** TLS towards the EPP; absent means plaintext gRPC. */
export interface EppTlsOptions {
  /** PEM CA bundle; undefined uses the system roots. */
  readonly ca?: Buffer | undefined;
  /** Client certificate and key for mutual TLS (both or neither). */
  readonly cert?: Buffer | undefined;
  readonly key?: Buffer | undefined;
  /** Name checked against the EPP's certificate when it differs from the --epp host. */
  readonly serverName?: string | undefined;
}

/** The gateway as an xDS client of spillway-xds (as the shipped Envoy bootstrap makes Envoy one). */
export interface XdsOptions {
  /** spillway-xds's ADS address, `host:port`. */
  readonly server: string;
  /** node.id; default `spillway-gateway-<zone>-<pid>`. */
  readonly nodeId?: string | undefined;
  /** node.locality.region (the zone is GatewayOptions.zone). */
  readonly region?: string | undefined;
  /** The EDS resource: the model-server cluster's service_name (spillway-xds's --cluster-name). */
  readonly clusterName?: string | undefined;
  /** How long the start waits for the first EDS and ECDS answers before listening anyway (Envoy's initial_fetch_timeout). */
  readonly initialFetchTimeoutMs?: number | undefined;
}

export interface GatewayOptions {
  /**
   * The EPP cluster's hosts: one ext_proc address `host:port`, or several comma-separated (a zone's
   * EPPs, as the shipped Envoy config's per-zone name resolves to them).
   */
  readonly epp: string;
  /**
   * Lower priorities of the EPP cluster (the other zones' EPPs, as the shipped Envoy config lists
   * them): comma-separated hosts of priority 1, then after each `/` those of the next priority.
   */
  readonly eppFallback?: string | undefined;
  readonly eppTls?: EppTlsOptions | undefined;
  /** The model servers, as a static list; with `xds` they come from EDS instead (this must then be empty). */
  readonly endpoints: readonly EndpointConfig[];
  readonly xds?: XdsOptions | undefined;
  /** This gateway's zone. Undefined: every configured endpoint counts as local. */
  readonly zone?: string | undefined;
  readonly port?: number | undefined;
  readonly host?: string | undefined;
  /** Send `envoy.lb.subset_hint` (healthy zone-local endpoints). Off behaves like Istio (no hint). */
  readonly subsetHint?: boolean | undefined;
  /** Extra upstream attempts after the first, walking the destination list (Envoy num_retries). */
  readonly retries?: number | undefined;
  /** The route's retry_on conditions (Envoy names: 5xx, gateway-error, reset, connect-failure). */
  readonly retryOn?: readonly string[] | undefined;
  /** ext_proc processing_mode (request headers are always sent). */
  readonly requestBodyMode?: BodyMode | undefined;
  readonly requestTrailerMode?: SendMode | undefined;
  readonly responseHeaderMode?: SendMode | undefined;
  readonly responseBodyMode?: BodyMode | undefined;
  readonly responseTrailerMode?: SendMode | undefined;
  /** Envoy >= 1.37's ext_proc_stream_close_optimization: close the stream after the last expected reply. */
  readonly streamCloseOptimization?: boolean | undefined;
  /** ext_proc failure_mode_allow: go on without the EPP when it fails (where Envoy allows it). */
  readonly failureModeAllow?: boolean | undefined;
  /** ext_proc status_on_error: the status of an error reply when failing closed. */
  readonly statusOnError?: number | undefined;
  /** Active gRPC health checks of the EPP (its Envoy cluster's health_checks); 0 disables them. */
  readonly eppHealthIntervalMs?: number | undefined;
  /** The EPP cluster's healthy_panic_threshold (percent): below it, unhealthy hosts are used anyway. */
  readonly eppHealthyPanicThreshold?: number | undefined;
  /** Also try destination entries that are not configured endpoints (agentgateway's Passthrough). */
  readonly passthrough?: boolean | undefined;
  /** Active health check period; 0 disables active checks. */
  readonly healthIntervalMs?: number | undefined;
  readonly healthTimeoutMs?: number | undefined;
  readonly healthPath?: string | undefined;
  /** Consecutive failed checks before an endpoint is unhealthy. */
  readonly unhealthyThreshold?: number | undefined;
  /** Consecutive failed requests before an endpoint is ejected (outlier detection); 0 disables. */
  readonly outlierFailures?: number | undefined;
  /** How long an ejected endpoint stays out of the subset hint. */
  readonly outlierEjectionMs?: number | undefined;
  /** Deadline of the whole exchange: the ext_proc stream and the upstream response. */
  readonly requestTimeoutMs?: number | undefined;
  /**
   * ext_proc message_timeout: the wait for each reply, armed per message except in a direction whose
   * body mode is FULL_DUPLEX_STREAMED (there Envoy arms no timer).
   */
  readonly eppTimeoutMs?: number | undefined;
  /** Per upstream attempt: connect and response headers; 0 = only the connect timeout. */
  readonly perTryTimeoutMs?: number | undefined;
  readonly connectTimeoutMs?: number | undefined;
  /** Largest request body (as the EPP returns it) buffered for forwarding and retries. */
  readonly maxBodyBytes?: number | undefined;
  readonly logLevel?: string | undefined;
  /** Defaults to a pino logger on stdout at logLevel. */
  readonly logger?: Logger | undefined;
}

/** GatewayOptions with every default applied. */
export type ResolvedOptions = Required<
  Omit<
    GatewayOptions,
    | 'eppTls'
    | 'eppFallback'
    | 'xds'
    | 'zone'
    | 'logger'
    | 'retryOn'
    | 'requestBodyMode'
    | 'requestTrailerMode'
    | 'responseHeaderMode'
    | 'responseBodyMode'
    | 'responseTrailerMode'
  >
> &
  Pick<GatewayOptions, 'eppTls' | 'zone' | 'xds'> & {
    readonly retryOn: RetryOn;
    readonly processingMode: ProcessingMode;
    /** The EPP cluster's hosts by priority: `epp` first, then each group of `eppFallback`. */
    readonly eppPriorities: readonly (readonly string[])[];
  };

export const DEFAULTS = {
  port: 8080,
  host: '127.0.0.1',
  subsetHint: true,
  retries: 2,
  retryOn: '5xx,reset,connect-failure',
  // What the shipped Envoy config (infra/envoy) does on Envoy 1.38.
  requestBodyMode: 'full-duplex',
  requestTrailerMode: 'send',
  responseHeaderMode: 'send',
  responseBodyMode: 'none',
  responseTrailerMode: 'skip',
  streamCloseOptimization: true,
  failureModeAllow: false,
  statusOnError: 500,
  eppHealthIntervalMs: 2_000,
  eppHealthyPanicThreshold: 50,
  passthrough: false,
  healthIntervalMs: 1_000,
  healthTimeoutMs: 500,
  healthPath: '/health',
  unhealthyThreshold: 2,
  outlierFailures: 1,
  outlierEjectionMs: 5_000,
  requestTimeoutMs: 300_000,
  eppTimeoutMs: 30_000,
  perTryTimeoutMs: 0,
  connectTimeoutMs: 2_000,
  maxBodyBytes: 16 * 1024 * 1024,
  logLevel: 'info',
} as const;

/** Envoy rejects a FULL_DUPLEX_STREAMED body without the trailer mode SEND in that direction. */
function processingModeOf(options: GatewayOptions): ProcessingMode {
  const mode: ProcessingMode = {
    requestBody: options.requestBodyMode ?? DEFAULTS.requestBodyMode,
    requestTrailer: options.requestTrailerMode ?? DEFAULTS.requestTrailerMode,
    responseHeader: options.responseHeaderMode ?? DEFAULTS.responseHeaderMode,
    responseBody: options.responseBodyMode ?? DEFAULTS.responseBodyMode,
    responseTrailer: options.responseTrailerMode ?? DEFAULTS.responseTrailerMode,
  };
  if (mode.requestBody === 'full-duplex' && mode.requestTrailer !== 'send') {
    throw new RangeError('request body mode full-duplex needs request trailer mode send (Envoy rejects the config otherwise)');
  }
  if (mode.responseBody === 'full-duplex' && mode.responseTrailer !== 'send') {
    throw new RangeError('response body mode full-duplex needs response trailer mode send (Envoy rejects the config otherwise)');
  }
  return mode;
}

/** The EPP hosts of a comma-separated `epp` option. */
export function eppHostsOf(epp: string): string[] {
  const hosts = epp.split(',').map((host) => host.trim());
  if (hosts.some((host) => host === '')) throw new RangeError(`epp: an empty address in ${JSON.stringify(epp)}`);
  return hosts;
}

/** The EPP cluster by priority: `epp` at 0, then each `/`-separated group of `fallback`; an address may appear once. */
export function eppPrioritiesOf(epp: string, fallback: string | undefined): string[][] {
  const priorities = [eppHostsOf(epp)];
  if (fallback !== undefined) {
    for (const group of fallback.split('/')) {
      try {
        priorities.push(eppHostsOf(group));
      } catch {
        throw new RangeError(`eppFallback: an empty address or priority in ${JSON.stringify(fallback)}`);
      }
    }
  }
  const seen = new Set<string>();
  for (const host of priorities.flat()) {
    if (seen.has(host)) throw new RangeError(`epp: ${host} is listed twice (in --epp and --epp-fallback)`);
    seen.add(host);
  }
  return priorities;
}

/** The spillway-xds ADS server's defaults: the EDS resource and the subset filter's ECDS resource. */
export const XDS_DEFAULTS = { clusterName: 'model-servers', filterName: 'spillway-subset-hint', initialFetchTimeoutMs: 15_000 } as const;

function xdsOf(options: GatewayOptions): XdsOptions | undefined {
  const xds = options.xds;
  if (xds === undefined) return undefined;
  if (options.zone === undefined) throw new RangeError('xds: needs the gateway zone (node.locality.zone): set zone');
  if (options.endpoints.length > 0) throw new RangeError('xds: the endpoints come from EDS; give no static endpoints');
  return {
    server: xds.server,
    nodeId: xds.nodeId ?? `spillway-gateway-${options.zone}-${process.pid}`,
    region: xds.region,
    clusterName: xds.clusterName ?? XDS_DEFAULTS.clusterName,
    initialFetchTimeoutMs: xds.initialFetchTimeoutMs ?? XDS_DEFAULTS.initialFetchTimeoutMs,
  };
}

export function resolveOptions(options: GatewayOptions): ResolvedOptions {
  const pick = <K extends keyof typeof DEFAULTS & keyof ResolvedOptions>(key: K): ResolvedOptions[K] =>
    (options[key] ?? DEFAULTS[key]) as unknown as ResolvedOptions[K];
  return {
    retryOn: parseRetryOn(options.retryOn ?? DEFAULTS.retryOn.split(',')),
    processingMode: processingModeOf(options),
    eppPriorities: eppPrioritiesOf(options.epp, options.eppFallback),
    streamCloseOptimization: pick('streamCloseOptimization'),
    failureModeAllow: pick('failureModeAllow'),
    statusOnError: pick('statusOnError'),
    eppHealthIntervalMs: pick('eppHealthIntervalMs'),
    eppHealthyPanicThreshold: pick('eppHealthyPanicThreshold'),
    epp: options.epp,
    eppTls: options.eppTls,
    endpoints: options.endpoints,
    xds: xdsOf(options),
    zone: options.zone,
    port: pick('port'),
    host: pick('host'),
    subsetHint: pick('subsetHint'),
    retries: pick('retries'),
    passthrough: pick('passthrough'),
    healthIntervalMs: pick('healthIntervalMs'),
    healthTimeoutMs: pick('healthTimeoutMs'),
    healthPath: pick('healthPath'),
    unhealthyThreshold: pick('unhealthyThreshold'),
    outlierFailures: pick('outlierFailures'),
    outlierEjectionMs: pick('outlierEjectionMs'),
    requestTimeoutMs: pick('requestTimeoutMs'),
    eppTimeoutMs: pick('eppTimeoutMs'),
    perTryTimeoutMs: pick('perTryTimeoutMs'),
    connectTimeoutMs: pick('connectTimeoutMs'),
    maxBodyBytes: pick('maxBodyBytes'),
    logLevel: pick('logLevel'),
  };
}
