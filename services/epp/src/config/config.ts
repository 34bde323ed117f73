import { z } from 'zod';
import { X509Certificate } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { createSecureContext } from 'node:tls';
import {
  CliError,
  commaList,
  durationMs,
  logLevel,
  parseCommandLine,
  port,
  positiveInt,
  readConfigFile,
  renderHelp,
  type FlagSpecs,
} from '@spillway/cli';
import {
  connectionOptions,
  DEFAULT_STREAM,
  NatsOptionsError,
  natsFlags,
  natsSettingsFromValues,
  streamNameSchema,
  type NatsSettings,
} from '@spillway/bus';
import { DEFAULT_MAX_CLOCK_SKEW_MS, DEFAULT_MAX_PODS_PER_ZONE } from '@spillway/fleet';
import { schedulerConfigSchema, type SchedulerConfig } from '@spillway/scheduler';
import type { ModelRewriteRule } from '@spillway/protocol';
import { sharedStateConfigSchema, type SharedStateConfig } from '../shared-state/config.js';
import type { PromptTokenizer } from '@spillway/tokenizer';
import { kvFlags, loadTokenizers, tokenizersFileSchema } from '../kv/config.js';

/**
 * spillway-epp's configuration: flags over `SPILLWAY_<FLAG>` environment variables over the config
 * file over defaults (docs/flags.md). The config file holds everything the flags hold plus the
 * scheduler's tunables, objectives and model rewrites; it is re-read when it changes
 * (config/reload.ts), and flags and environment still win over it.
 */
const optionalString = z.string().min(1).optional();
const booleanValue = (fallback: boolean) =>
  z.union([z.boolean(), z.enum(['true', 'false']).transform((v) => v === 'true')]).default(fallback);

export const eppFlags = {
  pool: { description: 'InferencePool (event pool) this EPP serves', schema: z.string().min(1), placeholder: 'NAME' },
  zone: { description: "this EPP's zone: the local zone for picking", schema: z.string().min(1), placeholder: 'ZONE' },
  region: {
    description: "this EPP's region: same-region zones are preferred when spilling",
    schema: optionalString,
    placeholder: 'REGION',
  },
  ...natsFlags,
  stream: {
    description: 'JetStream stream to replay (a zone aggregate in multi-zone NATS)',
    schema: streamNameSchema.default(DEFAULT_STREAM),
    placeholder: 'NAME',
  },
  ensureStream: {
    description: 'create the stream when it is missing, at start or deleted later (turn off when the stream is managed elsewhere)',
    schema: booleanValue(true),
    placeholder: 'true|false',
  },
  host: {
    description: 'address the gRPC (ext_proc), health and metrics servers bind to; plaintext ext_proc off loopback is warned about',
    schema: z.string().min(1).default('0.0.0.0'),
    placeholder: 'ADDR',
  },
  grpcPort: { description: 'ext_proc gRPC port (also serves gRPC health)', schema: port(9002), placeholder: 'N' },
  healthPort: { description: 'gRPC health port', schema: port(9003), placeholder: 'N' },
  metricsPort: { description: 'Prometheus /metrics port', schema: port(9090), placeholder: 'N' },
  ui: {
    description: "serve the operators' view, read-only: GET / (a page) and GET /api/state (its JSON), on the metrics port or --ui-port",
    schema: booleanValue(true),
    placeholder: 'true|false',
  },
  uiPort: { description: 'serve the view on this port instead of the metrics port', schema: port().optional(), placeholder: 'N' },
  maxEndpoints: {
    description: 'most endpoints in the destination list (1 for single-address gateways)',
    schema: positiveInt().max(64).optional(),
    placeholder: 'N',
  },
  subsetMode: {
    description: 'strict: pick only inside the subset hint; locality: subset = local preference, spill beyond it',
    schema: z.enum(['strict', 'locality']).optional(),
    placeholder: 'MODE',
  },
  policy: {
    description: 'cost: price every endpoint in ms of expected time to first token; weighted: the reference scorers',
    schema: z.enum(['cost', 'weighted']).optional(),
    placeholder: 'POLICY',
  },
  config: { description: 'YAML or JSON config file', schema: optionalString, placeholder: 'FILE' },
  tlsCert: { description: 'serve gRPC over TLS with this certificate (with --tls-key)', schema: optionalString, placeholder: 'FILE' },
  tlsKey: { description: 'private key for --tls-cert', schema: optionalString, placeholder: 'FILE' },
  tlsClientCa: { description: 'require client certificates signed by this CA (mTLS)', schema: optionalString, placeholder: 'FILE' },
  healthTls: {
    description: 'serve the health port over TLS too (same files); plaintext by default, for kubelet probes',
    schema: booleanValue(false),
    placeholder: 'true|false',
  },
  connectionTimeoutMs: {
    description: 'close connections silent this long: gRPC ones that answer no keepalive ping, HTTP ones with no request',
    schema: durationMs().min(100).default(20_000),
    placeholder: 'MS',
  },
  metricsStaleMs: {
    description: "pod metrics older than this are stale: the pod is then estimated from its last sample and this EPP's own picks",
    schema: durationMs().default(1000),
    placeholder: 'MS',
  },
  maxClockSkewMs: {
    description: 'refuse events dated more than this after their receive time (a bad clock or a forged event)',
    schema: durationMs().default(DEFAULT_MAX_CLOCK_SKEW_MS),
    placeholder: 'MS',
  },
  maxPodsPerZone: {
    description: 'most pods one zone of the pool may hold; events for further new pods are refused',
    schema: positiveInt().default(DEFAULT_MAX_PODS_PER_ZONE),
    placeholder: 'N',
  },
  metricModels: {
    description: 'models named in metric labels besides those of modelRewrites; every other model is counted as "other"',
    schema: commaList().default([]),
    placeholder: 'A,B',
  },
  viewStaleLimitMs: {
    description: 'deprecated, ignored: readiness stays SERVING while NATS is unreachable',
    schema: durationMs().optional(),
    placeholder: 'MS',
  },
  requestTimeoutMs: {
    description: 'a request whose body is not complete by then ends the stream',
    schema: durationMs().default(60_000),
    placeholder: 'MS',
  },
  maxBodyBytes: {
    description: 'largest request body accepted (413 above)',
    schema: positiveInt().default(8 * 1024 * 1024),
    placeholder: 'BYTES',
  },
  maxBufferedBodyBytes: {
    description: 'request-body bytes all open streams may hold together; a body that needs more gets 503',
    schema: positiveInt().default(512 * 1024 * 1024),
    placeholder: 'BYTES',
  },
  shareState: {
    description:
      "share picks in flight, prefix placements and penalties with the pool's other EPPs over NATS (on unless false; the config file's sharedState holds its settings)",
    schema: z.union([z.boolean(), z.enum(['true', 'false']).transform((v) => v === 'true')]).optional(),
    placeholder: 'true|false',
  },
  ...kvFlags,
  logLevel: { description: 'pino log level (debug logs one line per decision)', schema: logLevel(), placeholder: 'LEVEL' },
} satisfies FlagSpecs;

const modelRewriteSchema = z.strictObject({
  match: z.string().min(1),
  targets: z.array(z.strictObject({ model: z.string().min(1), weight: z.number().finite().min(0).default(1) })).min(1),
});

/** The config file: the scheduler's tunables at the top level, model rewrites, and any flag by its camelCase name. */
const flagKeys = Object.keys(eppFlags) as (keyof typeof eppFlags)[];
// Flag values in the file are checked by the flag schemas, once flags and environment are merged.
const flagFields = Object.fromEntries(flagKeys.map((key) => [key, z.unknown().optional()])) as Record<
  keyof typeof eppFlags,
  z.ZodOptional<z.ZodUnknown>
>;
export const eppConfigFileSchema = schedulerConfigSchema
  .omit({ maxEndpoints: true, subsetMode: true, policy: true })
  .extend({
    modelRewrites: z.array(modelRewriteSchema).default([]),
    sharedState: sharedStateConfigSchema.prefault({}),
    tokenizers: tokenizersFileSchema,
    ...flagFields,
  })
  .superRefine((value, ctx) => {
    const seen = new Set<string>();
    value.modelRewrites.forEach((rule, i) => {
      if (seen.has(rule.match))
        ctx.addIssue({ code: 'custom', path: ['modelRewrites', i, 'match'], message: `a second rule for "${rule.match}"` });
      seen.add(rule.match);
    });
  });

export type EppFlagValues = z.output<z.ZodObject<{ [K in keyof typeof eppFlags]: (typeof eppFlags)[K]['schema'] }>>;
export type EppConfigFile = z.output<typeof eppConfigFileSchema>;

/** Where the config came from, so it can be read again when the file changes (config/reload.ts). */
export interface EppConfigSource {
  readonly path: string;
  /** SHA-256 of the file's bytes as loaded. */
  readonly hash: string;
  readonly argv: readonly string[];
  readonly env: NodeJS.ProcessEnv;
}

export interface EppConfig {
  flags: EppFlagValues;
  nats: NatsSettings;
  scheduler: SchedulerConfig;
  modelRewrites: ModelRewriteRule[];
  /** The channel to the pool's other EPPs; `enabled` is `--share-state` when given. */
  sharedState: SharedStateConfig;
  /** The tokenizer of each model (after rewrites; `*` for any other), loaded from the file's `tokenizers` and `--tokenizer`. */
  tokenizers: Map<string, PromptTokenizer>;
  /** Server TLS material, read and checked while parsing (a missing file is a usage error). */
  tls: ServerTls | undefined;
  /** Settings that were accepted but deserve a line in the log at start (deprecated flags). */
  warnings: string[];
  /** The config file, when `--config` named one. */
  source: EppConfigSource | undefined;
}

export interface ServerTls {
  cert: Buffer;
  key: Buffer;
  clientCa: Buffer | undefined;
}

export const EPP_HELP = renderHelp(
  'spillway-epp',
  'Zone-aware Endpoint Picker: serves Envoy ext_proc, folds NATS JetStream events into its view of the pool.',
  eppFlags,
);

/** Reads `--config` (or SPILLWAY_CONFIG) ahead of the other flags, since its values sit beneath them. */
function configPath(argv: readonly string[], env: NodeJS.ProcessEnv): string | undefined {
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i] as string;
    if (arg === '--config') return argv[i + 1];
    if (arg.startsWith('--config=')) return arg.slice('--config='.length);
  }
  return env['SPILLWAY_CONFIG'] || undefined;
}

/** Parses the command line; undefined when `--help` was asked for. Throws CliError naming the bad flag or field. */
export function loadEppConfig(argv: readonly string[], env: NodeJS.ProcessEnv): EppConfig | undefined {
  const path = configPath(argv, env);
  const read = path === undefined ? undefined : readConfigFile(path, eppConfigFileSchema);
  const file = read?.value ?? eppConfigFileSchema.parse({});
  const flags = resolveFlags(file, argv, env);
  if (flags === undefined) return undefined;
  if ((flags.tlsCert === undefined) !== (flags.tlsKey === undefined)) {
    throw new CliError(`--${flags.tlsCert === undefined ? 'tls-cert' : 'tls-key'}: --tls-cert and --tls-key go together`);
  }
  if (flags.tlsClientCa !== undefined && flags.tlsCert === undefined) {
    throw new CliError('--tls-client-ca: client certificates need TLS (--tls-cert and --tls-key)');
  }
  if (flags.healthTls && flags.tlsCert === undefined) {
    throw new CliError('--health-tls: TLS on the health port needs --tls-cert and --tls-key');
  }
  if (flags.uiPort !== undefined && flags.uiPort !== 0 && flags.uiPort === flags.metricsPort) {
    throw new CliError('--ui-port: the same port as --metrics-port; leave --ui-port out to serve the view on the metrics port', 'ui-port');
  }
  const tls = readServerTls(flags);
  const nats = natsSettingsFromValues({ ...flags, natsName: flags.natsName ?? `spillway-epp-${flags.zone}` }, env);
  try {
    // Reads the NATS files (creds, seed, TLS) now, so a missing one is a usage error, not a retry loop.
    connectionOptions(nats);
  } catch (error) {
    if (error instanceof NatsOptionsError) throw new CliError(error.message, error.flag);
    throw error;
  }
  const warnings: string[] = [];
  if (flags.viewStaleLimitMs !== undefined) {
    warnings.push('--view-stale-limit-ms is deprecated and ignored: readiness stays SERVING while NATS is unreachable');
  }
  const scheduler = schedulerConfigOf(file, flags, path);
  const source = path === undefined || read === undefined ? undefined : { path, hash: read.hash, argv: [...argv], env };
  const sharedState = { ...file.sharedState, enabled: flags.shareState ?? file.sharedState.enabled };
  const tokenizers = loadTokenizers(file.tokenizers, flags.tokenizer);
  return { flags, nats, scheduler, modelRewrites: file.modelRewrites, sharedState, tokenizers, tls, warnings, source };
}

/** Flags over environment over the file's flag fields; undefined for `--help`. Throws CliError naming the bad flag. */
export function resolveFlags(file: EppConfigFile, argv: readonly string[], env: NodeJS.ProcessEnv): EppFlagValues | undefined {
  const base: Record<string, unknown> = {};
  for (const key of flagKeys) if (file[key] !== undefined) base[key] = file[key];
  const parsed = parseCommandLine(eppFlags, argv, env, base);
  return parsed.help ? undefined : (parsed.values as EppFlagValues);
}

/** The scheduler's config: the file's tunables, with the flags' maxEndpoints, subsetMode and policy over them. */
export function schedulerConfigOf(file: EppConfigFile, flags: EppFlagValues, path: string | undefined): SchedulerConfig {
  const schedulerInput: Record<string, unknown> = {};
  for (const key of Object.keys(schedulerConfigSchema.shape)) {
    if (key in file) schedulerInput[key] = (file as Record<string, unknown>)[key];
  }
  if (flags.maxEndpoints !== undefined) schedulerInput['maxEndpoints'] = flags.maxEndpoints;
  if (flags.subsetMode !== undefined) schedulerInput['subsetMode'] = flags.subsetMode;
  if (flags.policy !== undefined) schedulerInput['policy'] = flags.policy;
  const scheduler = schedulerConfigSchema.safeParse(schedulerInput);
  if (!scheduler.success) {
    const issue = scheduler.error.issues[0];
    throw new CliError(`${path ?? 'config'}: ${issue?.path.join('.') ?? ''}: ${issue?.message ?? 'invalid'}`);
  }
  return scheduler.data;
}

function readFlagFile(flag: string, path: string): Buffer {
  try {
    return readFileSync(path);
  } catch (error) {
    throw new CliError(`--${flag}: cannot read ${path}: ${(error as Error).message}`, flag);
  }
}

/** Reads the server TLS files and checks that they make a usable TLS context, naming the flag at fault. */
function readServerTls(flags: EppFlagValues): ServerTls | undefined {
  if (flags.tlsCert === undefined || flags.tlsKey === undefined) return undefined;
  const cert = readFlagFile('tls-cert', flags.tlsCert);
  const key = readFlagFile('tls-key', flags.tlsKey);
  const clientCa = flags.tlsClientCa === undefined ? undefined : readFlagFile('tls-client-ca', flags.tlsClientCa);
  try {
    createSecureContext({ cert });
  } catch (error) {
    throw new CliError(`--tls-cert: ${flags.tlsCert} is not a usable certificate: ${(error as Error).message}`, 'tls-cert');
  }
  try {
    createSecureContext({ cert, key });
  } catch (error) {
    throw new CliError(`--tls-key: ${flags.tlsKey} is not the private key of --tls-cert: ${(error as Error).message}`, 'tls-key');
  }
  if (clientCa !== undefined) {
    try {
      // createSecureContext ignores a CA bundle it cannot parse; X509Certificate does not.
      new X509Certificate(clientCa);
    } catch (error) {
      throw new CliError(
        `--tls-client-ca: ${flags.tlsClientCa} is not a usable CA certificate: ${(error as Error).message}`,
        'tls-client-ca',
      );
    }
  }
  return { cert, key, clientCa };
}
