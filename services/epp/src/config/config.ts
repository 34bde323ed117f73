import { X509Certificate } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { createSecureContext } from 'node:tls';
import { CliError, parseCommandLine, readConfigFile } from '@spillway/cli';
import { connectionOptions, NatsOptionsError, natsSettingsFromValues, type NatsSettings } from '@spillway/bus';
import { schedulerConfigSchema, type SchedulerConfig, type SharedStateConfig } from '@spillway/scheduler';
import type { ModelRewriteRule } from '@spillway/protocol';
import type { PromptTokenizer, TokenizerSpec } from '@spillway/tokenizer';

import { loadTokenizers } from '../kv/config.js';
import { eppConfigFileSchema, eppFlags, flagKeys, type EppConfigFile, type EppFlagValues } from './flags.js';

/**
 * Loading spillway-epp's configuration (config/flags.ts has the flags and the file's schema):
 * flags over `SPILLWAY_<FLAG>` environment variables over the config file over defaults.
 */

/** Where the config came from, so it can be read again when the file changes (config/reload.ts). */
export interface EppConfigSource {
  readonly path: string;
  /** SHA-256 of the file's bytes as loaded. */
  readonly hash: string;
  readonly argv: readonly string[];
  readonly env: NodeJS.ProcessEnv;
  /** The file's sections read only at start, as in force: a reload that changes them names them in its restart warning. */
  readonly startOnly: StartOnlySections;
}

/** The config file's sections a running EPP does not change: the shared-state channel and the tokenizers. */
export interface StartOnlySections {
  /** As in force (`enabled` is `--share-state` when given). */
  readonly sharedState: SharedStateConfig;
  readonly tokenizers: Readonly<Record<string, TokenizerSpec>>;
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
  /** Where they were read from: watched, and read again when they change (app/tls-reload.ts). */
  files: { cert: string; key: string; clientCa: string | undefined };
}

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
  const sharedState = sharedStateOf(file, flags);
  const tokenizers = loadTokenizers(file.tokenizers, flags.tokenizer);
  const source =
    path === undefined || read === undefined
      ? undefined
      : { path, hash: read.hash, argv: [...argv], env, startOnly: { sharedState, tokenizers: file.tokenizers } };
  return { flags, nats, scheduler, modelRewrites: file.modelRewrites, sharedState, tokenizers, tls, warnings, source };
}

/** The shared-state channel's settings: the file's, with `--share-state` over `enabled`. */
export function sharedStateOf(file: EppConfigFile, flags: EppFlagValues): SharedStateConfig {
  return { ...file.sharedState, enabled: flags.shareState ?? file.sharedState.enabled };
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
  const tls: ServerTls = { cert, key, clientCa, files: { cert: flags.tlsCert, key: flags.tlsKey, clientCa: flags.tlsClientCa } };
  const problem = serverTlsProblem(tls);
  if (problem !== undefined) throw new CliError(problem.message, problem.flag);
  return tls;
}

/**
 * Why server TLS material cannot be used (a certificate that does not parse, a key that is not
 * its private key, a CA bundle that does not parse), naming the flag and file at fault; undefined
 * when it can. At start a problem is a usage error; on a reload the material in force stays.
 */
export function serverTlsProblem(tls: ServerTls): { flag: string; message: string } | undefined {
  const { files } = tls;
  try {
    createSecureContext({ cert: tls.cert });
  } catch (error) {
    return { flag: 'tls-cert', message: `--tls-cert: ${files.cert} is not a usable certificate: ${(error as Error).message}` };
  }
  try {
    createSecureContext({ cert: tls.cert, key: tls.key });
  } catch (error) {
    return { flag: 'tls-key', message: `--tls-key: ${files.key} is not the private key of --tls-cert: ${(error as Error).message}` };
  }
  if (tls.clientCa !== undefined) {
    try {
      // createSecureContext ignores a CA bundle it cannot parse; X509Certificate does not.
      new X509Certificate(tls.clientCa);
    } catch (error) {
      return {
        flag: 'tls-client-ca',
        message: `--tls-client-ca: ${files.clientCa} is not a usable CA certificate: ${(error as Error).message}`,
      };
    }
  }
  return undefined;
}
