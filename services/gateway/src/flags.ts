// spillway-gateway's flags (each also as SPILLWAY_<FLAG>), validated with zod, to GatewayOptions.
import { readFileSync } from 'node:fs';
import { CliError, commaList, durationMs, logLevel, nonNegativeInt, parseCommandLine, port, positiveInt } from '@spillway/cli';
import type { FlagSpecs } from '@spillway/cli';
import { z } from 'zod';
import { loadEndpointsFile } from './endpoints.js';
import { DEFAULTS, eppPrioritiesOf, XDS_DEFAULTS } from './options.js';
import type { EppTlsOptions, GatewayOptions } from './options.js';
import { parseRetryOn } from './retry-policy.js';

export const SUMMARY = [
  'spillway-gateway: a DEVELOPMENT and TEST HTTP gateway that calls the Spillway EPP over ext_proc',
  "as Envoy's ext_proc filter, router and override_host policy do, rule by rule (docs/protocol.md).",
  'Its defaults are the shipped Envoy config (infra/envoy) on Envoy 1.38: request body FULL_DUPLEX_STREAMED,',
  'response headers only, the stream closed right after the response-headers reply, fail closed.',
  'Production deployments use Envoy. Its own paths: GET /gateway/stats (JSON counters, endpoint',
  'health), GET /gateway/health.',
].join('\n');

const text = z.string().min(1);
const onOff = z.enum(['on', 'off']);
const sendSkip = z.enum(['send', 'skip']);
const bodyMode = z.enum(['none', 'buffered', 'full-duplex']);
const httpStatus = z.coerce.number().int().min(200).max(599);
const percent = z.coerce.number().min(0).max(100);
const hostPort = z.string().regex(/^(\[[0-9A-Fa-f:.]+\]|[^\s:/[\]]+):\d{1,5}$/, 'must be HOST:PORT');

export const gatewayFlags = {
  port: { description: `HTTP listen port; 0 picks a free one (default ${DEFAULTS.port})`, schema: port(DEFAULTS.port), placeholder: 'N' },
  host: { description: `listen address (default ${DEFAULTS.host})`, schema: text.default(DEFAULTS.host), placeholder: 'ADDR' },
  zone: {
    description:
      "this gateway's zone: endpoints of this zone make up the subset hint, and it travels beside it (x-spillway-gateway-zone); with --xds the node's zone (default: all endpoints local)",
    schema: text.optional(),
    placeholder: 'Z',
  },
  epp: {
    description:
      "the EPP cluster's priority-0 ext_proc addresses (this zone's EPPs), comma-separated (required): each health-checked, new streams by round robin over the healthy ones",
    schema: z
      .string()
      .refine((value) => value.split(',').every((host) => hostPort.safeParse(host.trim()).success), 'must be HOST:PORT[,HOST:PORT...]'),
    placeholder: 'HOST:PORT[,...]',
  },
  eppFallback: {
    description:
      "lower priorities of the EPP cluster (other zones' EPPs): hosts of priority 1, then after each / the next priority's; as Envoy, a priority takes the streams the ones before it cannot carry (overprovisioning factor 1.4, then panic)",
    schema: z
      .string()
      .refine(
        (value) => value.split('/').every((group) => group.split(',').every((host) => hostPort.safeParse(host.trim()).success)),
        'must be HOST:PORT[,HOST:PORT...][/HOST:PORT...]',
      )
      .optional(),
    placeholder: 'HOST:PORT[,...][/...]',
  },
  eppTls: { description: 'use TLS to the EPP with the system roots', schema: z.boolean().default(false), boolean: true },
  eppTlsCa: { description: 'PEM CA bundle for the EPP (implies TLS)', schema: text.optional(), placeholder: 'FILE' },
  eppTlsCert: { description: 'client certificate for mutual TLS (with --epp-tls-key)', schema: text.optional(), placeholder: 'FILE' },
  eppTlsKey: { description: 'client key for mutual TLS', schema: text.optional(), placeholder: 'FILE' },
  eppTlsServerName: { description: "name to verify in the EPP's certificate", schema: text.optional(), placeholder: 'NAME' },
  endpoints: {
    description: 'YAML/JSON list of { address: ip:port, zone? }: the model servers (required unless --xds or --passthrough)',
    schema: text.optional(),
    placeholder: 'FILE',
  },
  xds: {
    description:
      "spillway-xds's ADS address: take the model servers from EDS and the subset hint with the gateway's zone from ECDS, as the shipped Envoy config does, instead of --endpoints (needs --zone)",
    schema: hostPort.optional(),
    placeholder: 'HOST:PORT',
  },
  region: {
    description: "with --xds: this gateway's region (node.locality.region)",
    schema: text.optional(),
    placeholder: 'R',
  },
  nodeId: {
    description: 'with --xds: node.id (default spillway-gateway-<zone>-<pid>)',
    schema: text.max(256).optional(),
    placeholder: 'ID',
  },
  xdsClusterName: {
    description: `with --xds: the EDS resource, spillway-xds's --cluster-name (default ${XDS_DEFAULTS.clusterName})`,
    schema: text.max(256).default(XDS_DEFAULTS.clusterName),
    placeholder: 'NAME',
  },
  passthrough: {
    description: 'also forward to destination entries that are not in --endpoints',
    schema: z.boolean().default(false),
    boolean: true,
  },
  subsetHint: {
    description: 'send envoy.lb.subset_hint with the healthy zone-local endpoints (off = like Istio)',
    schema: onOff.default('on'),
    placeholder: 'on|off',
  },
  retries: {
    description: `num_retries: extra attempts, walking the EPP's list, then the fallback round robin (default ${DEFAULTS.retries})`,
    schema: nonNegativeInt().default(DEFAULTS.retries),
    placeholder: 'N',
  },
  retryOn: {
    description: `retry_on conditions: 5xx, gateway-error, reset, connect-failure (default ${DEFAULTS.retryOn})`,
    schema: commaList().default(DEFAULTS.retryOn.split(',')),
    placeholder: 'LIST',
  },
  requestBodyMode: {
    description: `ext_proc request_body_mode (default ${DEFAULTS.requestBodyMode})`,
    schema: bodyMode.default(DEFAULTS.requestBodyMode),
    placeholder: 'none|buffered|full-duplex',
  },
  requestTrailerMode: {
    description: `ext_proc request_trailer_mode; full-duplex needs send (default ${DEFAULTS.requestTrailerMode})`,
    schema: sendSkip.default(DEFAULTS.requestTrailerMode),
    placeholder: 'send|skip',
  },
  responseHeaderMode: {
    description: `ext_proc response_header_mode (default ${DEFAULTS.responseHeaderMode})`,
    schema: sendSkip.default(DEFAULTS.responseHeaderMode),
    placeholder: 'send|skip',
  },
  responseBodyMode: {
    description: `ext_proc response_body_mode: none, or full-duplex to stream response bodies through the EPP (default ${DEFAULTS.responseBodyMode})`,
    schema: z.enum(['none', 'full-duplex']).default(DEFAULTS.responseBodyMode),
    placeholder: 'none|full-duplex',
  },
  responseTrailerMode: {
    description: `ext_proc response_trailer_mode; full-duplex needs send (default ${DEFAULTS.responseTrailerMode})`,
    schema: sendSkip.default(DEFAULTS.responseTrailerMode),
    placeholder: 'send|skip',
  },
  extProcStreamClose: {
    description: 'close the ext_proc stream after the last expected reply, as Envoy >= 1.37 does; off = older Envoy (default on)',
    schema: onOff.default('on'),
    placeholder: 'on|off',
  },
  failureModeAllow: {
    description: 'ext_proc failure_mode_allow: go on without the EPP when it fails, where Envoy allows it (default off)',
    schema: z.boolean().default(DEFAULTS.failureModeAllow),
    boolean: true,
  },
  statusOnError: {
    description: `ext_proc status_on_error: the status when failing closed (default ${DEFAULTS.statusOnError})`,
    schema: httpStatus.default(DEFAULTS.statusOnError),
    placeholder: 'N',
  },
  eppHealthIntervalMs: {
    description: `gRPC health checks of the EPP, as its Envoy cluster's; 0 disables (default ${DEFAULTS.eppHealthIntervalMs})`,
    schema: durationMs().default(DEFAULTS.eppHealthIntervalMs),
    placeholder: 'MS',
  },
  eppHealthyPanicThreshold: {
    description: `the EPP cluster's healthy_panic_threshold in percent; 0 = an unhealthy EPP fails streams at start (default ${DEFAULTS.eppHealthyPanicThreshold})`,
    schema: percent.default(DEFAULTS.eppHealthyPanicThreshold),
    placeholder: 'PCT',
  },
  healthIntervalMs: {
    description: `active GET /health period; 0 disables (default ${DEFAULTS.healthIntervalMs})`,
    schema: durationMs().default(DEFAULTS.healthIntervalMs),
    placeholder: 'MS',
  },
  healthTimeoutMs: {
    description: `health check timeout (default ${DEFAULTS.healthTimeoutMs})`,
    schema: positiveInt().default(DEFAULTS.healthTimeoutMs),
    placeholder: 'MS',
  },
  healthPath: {
    description: `health check path (default ${DEFAULTS.healthPath})`,
    schema: z
      .string()
      .regex(/^\/\S*$/, 'must start with /')
      .default(DEFAULTS.healthPath),
    placeholder: 'PATH',
  },
  unhealthyThreshold: {
    description: `consecutive failed checks before an endpoint leaves the hint (default ${DEFAULTS.unhealthyThreshold})`,
    schema: positiveInt().default(DEFAULTS.unhealthyThreshold),
    placeholder: 'N',
  },
  outlierFailures: {
    description: `consecutive failed requests that eject an endpoint; 0 disables (default ${DEFAULTS.outlierFailures})`,
    schema: nonNegativeInt().default(DEFAULTS.outlierFailures),
    placeholder: 'N',
  },
  outlierEjectionMs: {
    description: `how long an ejected endpoint stays out of the hint (default ${DEFAULTS.outlierEjectionMs})`,
    schema: durationMs().default(DEFAULTS.outlierEjectionMs),
    placeholder: 'MS',
  },
  requestTimeoutMs: {
    description: `deadline of a whole request, ext_proc stream included (default ${DEFAULTS.requestTimeoutMs})`,
    schema: positiveInt().default(DEFAULTS.requestTimeoutMs),
    placeholder: 'MS',
  },
  eppTimeoutMs: {
    description: `ext_proc message_timeout: wait for each EPP reply, except in FULL_DUPLEX_STREAMED (default ${DEFAULTS.eppTimeoutMs})`,
    schema: positiveInt().default(DEFAULTS.eppTimeoutMs),
    placeholder: 'MS',
  },
  perTryTimeoutMs: {
    description: 'per_try_timeout: connect and response headers of each attempt (never the body); 0 = none (default 0)',
    schema: durationMs().default(DEFAULTS.perTryTimeoutMs),
    placeholder: 'MS',
  },
  connectTimeoutMs: {
    description: `upstream connect timeout (default ${DEFAULTS.connectTimeoutMs})`,
    schema: positiveInt().default(DEFAULTS.connectTimeoutMs),
    placeholder: 'MS',
  },
  maxBodyBytes: {
    description: `largest request body buffered for forwarding and retries (default ${DEFAULTS.maxBodyBytes})`,
    schema: positiveInt().default(DEFAULTS.maxBodyBytes),
    placeholder: 'N',
  },
  logLevel: { description: `pino level (default ${DEFAULTS.logLevel})`, schema: logLevel(DEFAULTS.logLevel), placeholder: 'LEVEL' },
} satisfies FlagSpecs;

export type ParsedGatewayArgs = { help: true } | { help: false; options: GatewayOptions };

function readPem(flag: string, path: string | undefined): Buffer | undefined {
  if (path === undefined) return undefined;
  try {
    return readFileSync(path);
  } catch (error) {
    throw new CliError(`--${flag}: cannot read ${path}: ${(error as Error).message}`);
  }
}

/** Flags and environment to options; throws CliError naming the bad flag. */
export function parseGatewayArgs(argv: readonly string[], env: NodeJS.ProcessEnv): ParsedGatewayArgs {
  if (argv.includes('--help')) return { help: true };
  const { values } = parseCommandLine(gatewayFlags, argv, env);
  if (values.xds !== undefined) {
    if (values.endpoints !== undefined) throw new CliError('--endpoints: not with --xds (the model servers come from EDS)');
    if (values.zone === undefined) throw new CliError("--zone: required with --xds (the node's zone, node.locality.zone)");
  } else if (values.endpoints === undefined && !values.passthrough) {
    throw new CliError('--endpoints: required (or give --xds or --passthrough)');
  }
  if ((values.eppTlsCert === undefined) !== (values.eppTlsKey === undefined)) {
    throw new CliError('--epp-tls-cert and --epp-tls-key go together');
  }
  const useTls = values.eppTls || values.eppTlsCa !== undefined || values.eppTlsCert !== undefined;
  const eppTls: EppTlsOptions | undefined = useTls
    ? {
        ca: readPem('epp-tls-ca', values.eppTlsCa),
        cert: readPem('epp-tls-cert', values.eppTlsCert),
        key: readPem('epp-tls-key', values.eppTlsKey),
        serverName: values.eppTlsServerName,
      }
    : undefined;
  if (values.requestBodyMode === 'full-duplex' && values.requestTrailerMode !== 'send') {
    throw new CliError('--request-trailer-mode: must be send with --request-body-mode full-duplex (Envoy rejects the config otherwise)');
  }
  if (values.responseBodyMode === 'full-duplex' && values.responseTrailerMode !== 'send') {
    throw new CliError('--response-trailer-mode: must be send with --response-body-mode full-duplex (Envoy rejects the config otherwise)');
  }
  try {
    parseRetryOn(values.retryOn);
  } catch (error) {
    throw new CliError(`--retry-on: ${(error as Error).message}`);
  }
  try {
    eppPrioritiesOf(values.epp, values.eppFallback);
  } catch (error) {
    throw new CliError(`--epp-fallback: ${(error as Error).message.replace(/^eppFallback: |^epp: /, '')}`);
  }
  let endpoints: GatewayOptions['endpoints'] = [];
  if (values.endpoints !== undefined) {
    try {
      endpoints = loadEndpointsFile(values.endpoints);
    } catch (error) {
      throw new CliError(`--endpoints: ${(error as Error).message}`);
    }
  }
  return {
    help: false,
    options: {
      epp: values.epp,
      eppFallback: values.eppFallback,
      eppTls,
      endpoints,
      xds:
        values.xds === undefined
          ? undefined
          : { server: values.xds, region: values.region, nodeId: values.nodeId, clusterName: values.xdsClusterName },
      zone: values.zone,
      port: values.port,
      host: values.host,
      subsetHint: values.subsetHint === 'on',
      retries: values.retries,
      retryOn: values.retryOn,
      requestBodyMode: values.requestBodyMode,
      requestTrailerMode: values.requestTrailerMode,
      responseHeaderMode: values.responseHeaderMode,
      responseBodyMode: values.responseBodyMode,
      responseTrailerMode: values.responseTrailerMode,
      streamCloseOptimization: values.extProcStreamClose === 'on',
      failureModeAllow: values.failureModeAllow,
      statusOnError: values.statusOnError,
      eppHealthIntervalMs: values.eppHealthIntervalMs,
      eppHealthyPanicThreshold: values.eppHealthyPanicThreshold,
      passthrough: values.passthrough,
      healthIntervalMs: values.healthIntervalMs,
      healthTimeoutMs: values.healthTimeoutMs,
      healthPath: values.healthPath,
      unhealthyThreshold: values.unhealthyThreshold,
      outlierFailures: values.outlierFailures,
      outlierEjectionMs: values.outlierEjectionMs,
      requestTimeoutMs: values.requestTimeoutMs,
      eppTimeoutMs: values.eppTimeoutMs,
      perTryTimeoutMs: values.perTryTimeoutMs,
      connectTimeoutMs: values.connectTimeoutMs,
      maxBodyBytes: values.maxBodyBytes,
      logLevel: values.logLevel,
    },
  };
}
