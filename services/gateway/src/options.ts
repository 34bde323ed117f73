// What startGateway needs. The CLI (flags.ts) fills these from flags; tests pass them directly.
import type { Logger } from 'pino';

/** One model server the gateway may forward to (like an endpoint of Envoy's STATIC cluster). */
export interface EndpointConfig {
  /** `ip:port` or `[ipv6]:port`; compared with the EPP's destination entries after canonicalising. */
  readonly address: string;
  /** Zone label; endpoints in the gateway's own zone make up its subset hint. */
  readonly zone?: string | undefined;
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

export interface GatewayOptions {
  /** The EPP's ext_proc address, `host:port`. */
  readonly epp: string;
  readonly eppTls?: EppTlsOptions | undefined;
  readonly endpoints: readonly EndpointConfig[];
  /** This gateway's zone. Undefined: every configured endpoint counts as local. */
  readonly zone?: string | undefined;
  readonly port?: number | undefined;
  readonly host?: string | undefined;
  /** Send `envoy.lb.subset_hint` (healthy zone-local endpoints). Off behaves like Istio (no hint). */
  readonly subsetHint?: boolean | undefined;
  /** Extra upstream attempts after the first, walking the destination list (Envoy num_retries). */
  readonly retries?: number | undefined;
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
  /** How long to wait for the EPP's routing decision once the request body is complete. */
  readonly eppTimeoutMs?: number | undefined;
  /** Per upstream attempt: connect, response headers and the first body byte; 0 = only the connect timeout. */
  readonly perTryTimeoutMs?: number | undefined;
  readonly connectTimeoutMs?: number | undefined;
  /** Largest request body (as the EPP returns it) buffered for forwarding and retries. */
  readonly maxBodyBytes?: number | undefined;
  readonly logLevel?: string | undefined;
  /** Defaults to a pino logger on stdout at logLevel. */
  readonly logger?: Logger | undefined;
}

/** GatewayOptions with every default applied. */
export type ResolvedOptions = Required<Omit<GatewayOptions, 'eppTls' | 'zone' | 'logger'>> & Pick<GatewayOptions, 'eppTls' | 'zone'>;

export const DEFAULTS = {
  port: 8080,
  host: '127.0.0.1',
  subsetHint: true,
  retries: 2,
  passthrough: false,
  healthIntervalMs: 1_000,
  healthTimeoutMs: 500,
  healthPath: '/health',
  unhealthyThreshold: 2,
  outlierFailures: 1,
  outlierEjectionMs: 5_000,
  requestTimeoutMs: 300_000,
  eppTimeoutMs: 10_000,
  perTryTimeoutMs: 0,
  connectTimeoutMs: 2_000,
  maxBodyBytes: 16 * 1024 * 1024,
  logLevel: 'info',
} as const;

export function resolveOptions(options: GatewayOptions): ResolvedOptions {
  const pick = <K extends keyof typeof DEFAULTS>(key: K): ResolvedOptions[K] => (options[key] ?? DEFAULTS[key]) as ResolvedOptions[K];
  return {
    epp: options.epp,
    eppTls: options.eppTls,
    endpoints: options.endpoints,
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
