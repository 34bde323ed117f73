import { isDeepStrictEqual } from 'node:util';
import type { Logger } from 'pino';
import { CliError, flagName, parseConfigText, type LogLevel } from '@spillway/cli';
import type { SchedulerConfig } from '@spillway/scheduler';
import type { ModelRewriteRule } from '@spillway/protocol';
import { resolveFlags, schedulerConfigOf, sharedStateOf, type EppConfigSource } from './config.js';
import { eppConfigFileSchema, eppFlags, type EppFlagValues } from './flags.js';
import type { EppMetrics } from '../telemetry/metrics.js';

/**
 * Live config: what a changed config file can change in a running EPP, and how a new version is
 * checked and put in force. The file is validated with the same schemas as at start and merged
 * under the same flags and environment, so a field given by flag or `SPILLWAY_*` variable keeps
 * its value whatever the file says. A version that does not validate changes nothing.
 */

/** The settings a reload puts in force without a restart. */
export interface LiveSettings {
  /** Every scheduler field: objectives, policy numbers, maxEndpoints, subsetMode, policy, ... */
  readonly scheduler: SchedulerConfig;
  readonly modelRewrites: readonly ModelRewriteRule[];
  readonly metricModels: readonly string[];
  readonly logLevel: LogLevel;
}

/** Flags whose new value a running EPP takes from the file; every other flag needs a restart. */
const LIVE_FLAGS: ReadonlySet<keyof EppFlagValues> = new Set([
  'maxEndpoints',
  'subsetMode',
  'policy',
  'metricModels',
  'logLevel',
  'config',
]);

export type ReloadResult =
  | {
      readonly ok: true;
      readonly settings: LiveSettings;
      /** Flags (`--flag-name`) whose new value needs a restart. */
      readonly restartNeeded: readonly string[];
      /** Config-file fields read only at start (`sharedState.<key>`, `tokenizers.<model>`) whose new value needs a restart. */
      readonly restartFields: readonly string[];
    }
  | { readonly ok: false; readonly error: string };

/**
 * Validates a new version of the config file and merges it under the command line it was started
 * with. `started` are the flag values the process runs with: flags that differ and cannot change
 * live are reported in `restartNeeded` (as `--flag-name`), and keep their running value.
 */
export function reloadEppConfig(text: string, source: EppConfigSource, started: EppFlagValues): ReloadResult {
  try {
    const file = parseConfigText(text, source.path, eppConfigFileSchema);
    const flags = resolveFlags(file, source.argv, source.env);
    if (flags === undefined) return { ok: false, error: 'unexpected --help' };
    const scheduler = schedulerConfigOf(file, flags, source.path);
    const restartNeeded = (Object.keys(eppFlags) as (keyof EppFlagValues)[])
      .filter((key) => !LIVE_FLAGS.has(key) && !isDeepStrictEqual(flags[key], started[key]))
      .map((key) => `--${flagName(key)}`);
    const { startOnly } = source;
    const restartFields = [
      ...changedKeys('sharedState', sharedStateOf(file, flags), startOnly.sharedState),
      ...changedKeys('tokenizers', file.tokenizers, startOnly.tokenizers),
    ];
    return {
      ok: true,
      settings: { scheduler, modelRewrites: file.modelRewrites, metricModels: flags.metricModels, logLevel: flags.logLevel },
      restartNeeded,
      restartFields,
    };
  } catch (error) {
    if (error instanceof CliError) return { ok: false, error: error.message };
    throw error;
  }
}

/** `prefix.key` for every key whose value differs between two versions of one section (added and removed keys too). */
function changedKeys(prefix: string, now: object, before: object): string[] {
  const after = now as Record<string, unknown>;
  const was = before as Record<string, unknown>;
  const keys = new Set([...Object.keys(after), ...Object.keys(was)]);
  return [...keys].filter((key) => !isDeepStrictEqual(after[key], was[key])).map((key) => `${prefix}.${key}`);
}

/** One read of the config file: its bytes' hash and text, or why it could not be read. */
export type ConfigVersion = { readonly hash: string; readonly text: string } | { readonly error: string };

/** Something that can take new live settings (the EPP core). */
export interface Reconfigurable {
  reconfigure(settings: LiveSettings): void;
}

/**
 * Keeps the EPP on the newest valid version of its config file. Each distinct version is judged
 * once (versions are named by the hash of their bytes), so a bad file is logged and counted once,
 * not on every poll; the running config stays until a valid version arrives.
 *
 * Metrics: `spillway_config_info{hash}` names the version in force, `spillway_config_reloads_total
 * {result}` counts applied and rejected versions, `spillway_config_last_reload_successful` is 0
 * while the file holds a version that was rejected.
 */
export class LiveConfig {
  private appliedHash: string;
  /** The version last judged (hash, or the read error): the same one is not judged twice in a row. */
  private lastSeen: string;
  private logLevel: LogLevel;

  constructor(
    private readonly source: EppConfigSource,
    private readonly started: EppFlagValues,
    private readonly target: Reconfigurable,
    private readonly metrics: EppMetrics,
    private readonly logger: Logger,
  ) {
    this.appliedHash = source.hash;
    this.lastSeen = source.hash;
    this.logLevel = started.logLevel;
    metrics.configInfo.set({ hash: source.hash }, 1);
  }

  /** The hash of the version in force. */
  get hash(): string {
    return this.appliedHash;
  }

  offer(version: ConfigVersion): void {
    const seen = 'error' in version ? `error:${version.error}` : version.hash;
    if (seen === this.lastSeen) return;
    this.lastSeen = seen;
    if ('error' in version) return this.reject(version.error);
    if (version.hash === this.appliedHash) {
      // Back to the version in force (a bad edit undone): nothing to apply.
      this.metrics.configLastReloadSuccessful.set(1);
      return;
    }
    const result = reloadEppConfig(version.text, this.source, this.started);
    if (!result.ok) return this.reject(result.error);
    this.target.reconfigure(result.settings);
    // Only a changed level is applied, so a logger handed in (tests, embedding) keeps its own otherwise.
    if (result.settings.logLevel !== this.logLevel) this.logger.level = result.settings.logLevel;
    this.logLevel = result.settings.logLevel;
    this.metrics.configInfo.reset();
    this.metrics.configInfo.set({ hash: version.hash }, 1);
    this.metrics.configReloads.inc({ result: 'applied' });
    this.metrics.configLastReloadSuccessful.set(1);
    this.logger.info({ path: this.source.path, hash: version.hash, previous: this.appliedHash }, 'config reloaded');
    if (result.restartNeeded.length > 0 || result.restartFields.length > 0) {
      this.logger.warn(
        { path: this.source.path, flags: result.restartNeeded, fields: result.restartFields },
        'config changes that take effect only after a restart; running with the old values',
      );
    }
    this.appliedHash = version.hash;
  }

  private reject(error: string): void {
    this.metrics.configReloads.inc({ result: 'rejected' });
    this.metrics.configLastReloadSuccessful.set(0);
    this.logger.error({ path: this.source.path, hash: this.appliedHash, error }, 'config change rejected; keeping the running config');
  }
}
