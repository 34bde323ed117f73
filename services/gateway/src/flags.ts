// spillway-gateway's flags (each also as SPILLWAY_<FLAG>), validated with zod, to GatewayOptions.
import { readFileSync } from 'node:fs';
import { CliError, durationMs, logLevel, nonNegativeInt, parseCommandLine, port, positiveInt } from '@spillway/cli';
import type { FlagSpecs } from '@spillway/cli';
import { z } from 'zod';
import { loadEndpointsFile } from './endpoints.js';
import { DEFAULTS } from './options.js';
import type { EppTlsOptions, GatewayOptions } from './options.js';

export const SUMMARY = [
  'spillway-gateway: a DEVELOPMENT and TEST HTTP gateway that calls the Spillway EPP over ext_proc',
  'exactly as Envoy does (FULL_DUPLEX_STREAMED, envoy.lb.subset_hint, override_host-style fallbacks,',
  'the served endpoint reported on response messages). Production deployments use Envoy',
  '(infra/envoy). Its own paths: GET /gateway/stats (JSON counters, endpoint health), GET /gateway/health.',
].join('\n');

const text = z.string().min(1);
const onOff = z.enum(['on', 'off']);
const hostPort = z.string().regex(/^(\[[0-9A-Fa-f:.]+\]|[^\s:/[\]]+):\d{1,5}$/, 'must be HOST:PORT');

export const gatewayFlags = {
  port: { description: `HTTP listen port; 0 picks a free one (default ${DEFAULTS.port})`, schema: port(DEFAULTS.port), placeholder: 'N' },
  host: { description: `listen address (default ${DEFAULTS.host})`, schema: text.default(DEFAULTS.host), placeholder: 'ADDR' },
  zone: {
    description: "this gateway's zone: endpoints of this zone make up the subset hint (default: all)",
    schema: text.optional(),
    placeholder: 'Z',
  },
  epp: { description: "the EPP's ext_proc address (required)", schema: hostPort, placeholder: 'HOST:PORT' },
  eppTls: { description: 'use TLS to the EPP with the system roots', schema: z.boolean().default(false), boolean: true },
  eppTlsCa: { description: 'PEM CA bundle for the EPP (implies TLS)', schema: text.optional(), placeholder: 'FILE' },
  eppTlsCert: { description: 'client certificate for mutual TLS (with --epp-tls-key)', schema: text.optional(), placeholder: 'FILE' },
  eppTlsKey: { description: 'client key for mutual TLS', schema: text.optional(), placeholder: 'FILE' },
  eppTlsServerName: { description: "name to verify in the EPP's certificate", schema: text.optional(), placeholder: 'NAME' },
  endpoints: {
    description: 'YAML/JSON list of { address: ip:port, zone? }: the model servers (required unless --passthrough)',
    schema: text.optional(),
    placeholder: 'FILE',
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
    description: `extra attempts walking the EPP's list on connect failure, reset, timeout or 5xx (default ${DEFAULTS.retries})`,
    schema: nonNegativeInt().default(DEFAULTS.retries),
    placeholder: 'N',
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
    description: `wait for each EPP reply once the request is sent (default ${DEFAULTS.eppTimeoutMs})`,
    schema: positiveInt().default(DEFAULTS.eppTimeoutMs),
    placeholder: 'MS',
  },
  perTryTimeoutMs: {
    description: 'per attempt: connect, response headers and the first body byte (never the rest of a stream); 0 = none (default 0)',
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
  if (values.endpoints === undefined && !values.passthrough) throw new CliError('--endpoints: required (or give --passthrough)');
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
      eppTls,
      endpoints,
      zone: values.zone,
      port: values.port,
      host: values.host,
      subsetHint: values.subsetHint === 'on',
      retries: values.retries,
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
