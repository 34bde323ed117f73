import { watch, type FSWatcher } from 'node:fs';
import { basename, dirname } from 'node:path';
import type { Logger } from 'pino';
import { configHash, readConfigBytesAsync } from '@spillway/cli';
import type { EppConfig } from './config.js';
import { LiveConfig, type ConfigVersion, type Reconfigurable } from './reload.js';
import type { EppMetrics } from '../telemetry/metrics.js';

/** How often the file is re-read whatever the watcher reports: events can be lost (network file systems, inotify limits). */
export const DEFAULT_CONFIG_POLL_MS = 5000;
/** Quiet time after a change event before reading: one ConfigMap update is several events. */
const SETTLE_MS = 50;

export interface ConfigFileWatch {
  /** Reads the file now (tests, and after each event). */
  check(): Promise<void>;
  close(): void;
}

/**
 * Watches a config file for new versions and hands each read to `onVersion`. It watches the
 * file's *directory*, not the file: a Kubernetes ConfigMap volume updates by swapping a symlink
 * (`..data`) in that directory, so the file's own inode never changes and a watch on it would see
 * nothing. Every event in the directory, and a poll every `pollMs`, re-reads the file (following
 * symlinks); versions are compared by hash downstream, so spurious reads cost one small read.
 * (A ConfigMap mounted with `subPath` is never updated by the kubelet: mount the directory.)
 */
export function watchConfigFile(
  path: string,
  onVersion: (version: ConfigVersion) => void,
  logger: Logger,
  pollMs = DEFAULT_CONFIG_POLL_MS,
): ConfigFileWatch {
  let closed = false;
  let reading: Promise<void> | undefined;
  let again = false;
  let settle: NodeJS.Timeout | undefined;

  const readOnce = async (): Promise<void> => {
    let version: ConfigVersion;
    try {
      // At most MAX_CONFIG_FILE_BYTES are read, whatever the file holds (or keeps producing).
      const bytes = await readConfigBytesAsync(path);
      version = { hash: configHash(bytes), text: bytes.toString('utf8') };
    } catch (error) {
      version = { error: (error as Error).message };
    }
    if (!closed) onVersion(version);
  };
  // One read at a time; a change during a read is read again right after.
  const check = (): Promise<void> => {
    if (reading !== undefined) {
      again = true;
      return reading;
    }
    reading = (async () => {
      do {
        again = false;
        await readOnce();
      } while (again && !closed);
      reading = undefined;
    })();
    return reading;
  };

  let watcher: FSWatcher | undefined;
  try {
    watcher = watch(dirname(path), { persistent: false }, (_event, name) => {
      // Only the file itself and the ConfigMap's symlinks (`..data`, `..<timestamp>`) matter.
      if (name !== null && name !== basename(path) && !name.startsWith('..')) return;
      clearTimeout(settle);
      settle = setTimeout(() => void check(), SETTLE_MS);
      settle.unref();
    });
    watcher.on('error', (error) => {
      logger.warn({ err: error, path }, 'cannot watch the config directory; polling only');
      watcher?.close();
      watcher = undefined;
    });
  } catch (error) {
    logger.warn({ err: error, path }, 'cannot watch the config directory; polling only');
  }
  const poll = setInterval(() => void check(), pollMs);
  poll.unref();

  return {
    check,
    close: () => {
      closed = true;
      clearInterval(poll);
      clearTimeout(settle);
      watcher?.close();
    },
  };
}

/**
 * Live config for a running EPP: when it was started with `--config`, watches that file and puts
 * each valid new version in force (LiveConfig). Without a file, exports `spillway_config_info
 * {hash="none"}` and watches nothing.
 */
export function watchEppConfig(
  config: EppConfig,
  target: Reconfigurable,
  metrics: EppMetrics,
  logger: Logger,
  pollMs?: number,
): ConfigFileWatch | undefined {
  const source = config.source;
  if (source === undefined) {
    metrics.configInfo.set({ hash: 'none' }, 1);
    return undefined;
  }
  const live = new LiveConfig(source, config.flags, target, metrics, logger);
  logger.info({ path: source.path, hash: source.hash }, 'config loaded; watching it for changes');
  return watchConfigFile(source.path, (version) => live.offer(version), logger, pollMs);
}
