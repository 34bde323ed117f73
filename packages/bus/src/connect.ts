import { readFileSync } from 'node:fs';
import { connect, credsAuthenticator, nkeyAuthenticator, type NatsConnection, type NodeConnectionOptions } from '@nats-io/transport-node';
import type { Logger } from './logger.js';
import { isTlsUrl, NatsOptionsError, parseNatsSettings, type NatsSettings, type NatsSettingsInput } from './options.js';

function readFlagFile(flag: string, path: string): Uint8Array {
  try {
    return readFileSync(path);
  } catch (error) {
    throw new NatsOptionsError(flag, `cannot read ${path}: ${(error as Error).message}`);
  }
}

/** The nats.js options for these settings. Files (seed, creds) are read here so errors name the flag. */
export function connectionOptions(settings: NatsSettings): NodeConnectionOptions {
  const options: NodeConnectionOptions = {
    servers: settings.servers,
    // A Spillway process never gives up on NATS: the EPP keeps serving its last view and reports
    // stale, and the collector resumes publishing, whenever the server comes back.
    maxReconnectAttempts: -1,
    waitOnFirstConnect: true,
    reconnectTimeWait: settings.reconnectTimeWaitMs,
    pingInterval: settings.pingIntervalMs,
    maxPingOut: settings.maxPingOut,
  };
  if (settings.name !== undefined) options.name = settings.name;
  if (settings.user !== undefined) {
    options.user = settings.user;
    options.pass = settings.password;
  }
  if (settings.token !== undefined) options.token = settings.token;
  if (settings.nkeySeedFile !== undefined) {
    const text = new TextDecoder().decode(readFlagFile('nats-nkey-seed', settings.nkeySeedFile)).trim();
    if (!/^SU[A-Z2-7]+$/.test(text))
      throw new NatsOptionsError('nats-nkey-seed', `${settings.nkeySeedFile} does not hold a user nkey seed (SU...)`);
    options.authenticator = nkeyAuthenticator(new TextEncoder().encode(text));
  }
  if (settings.credsFile !== undefined) {
    options.authenticator = credsAuthenticator(readFlagFile('nats-creds', settings.credsFile));
  }
  // nats.js upgrades to TLS only when the server offers it, whatever the URL says: `tls://` must
  // mean TLS or no connection, so it asks for TLS, and a server that does not offer it is refused.
  if (settings.tls || settings.servers.some(isTlsUrl)) {
    const tls: NonNullable<NodeConnectionOptions['tls']> = {};
    const files = settings.tls ?? {};
    if (files.caFile !== undefined) {
      readFlagFile('nats-tls-ca', files.caFile);
      tls.caFile = files.caFile;
    }
    if (files.certFile !== undefined) {
      readFlagFile('nats-tls-cert', files.certFile);
      tls.certFile = files.certFile;
    }
    if (files.keyFile !== undefined) {
      readFlagFile('nats-tls-key', files.keyFile);
      tls.keyFile = files.keyFile;
    }
    options.tls = tls;
  }
  return options;
}

/**
 * Connects with Spillway's reliability defaults (reconnect forever, wait on first connect, short
 * reconnect wait, 10 s pings). Resolves once connected; with `waitOnFirstConnect` it keeps trying
 * while the server is down, so callers that must not wait forever race it with their own timeout.
 */
export async function connectNats(
  settings: NatsSettings | NatsSettingsInput,
  overrides: Partial<NodeConnectionOptions> = {},
): Promise<NatsConnection> {
  const parsed = parseNatsSettings(settings);
  return connect({ ...connectionOptions(parsed), ...overrides });
}

export interface RetryingConnectOptions {
  /** Where each failed attempt is reported (rate-limited: see below). */
  logger?: Logger;
  /** Aborting stops retrying at once; a connection that completes afterwards is closed. */
  signal?: AbortSignal;
  /** First pause between attempts; doubled after each failure up to `maxDelayMs`. */
  initialDelayMs?: number;
  maxDelayMs?: number;
  /** The same cause is logged again only after this long (a new cause is logged at once). */
  repeatLogMs?: number;
  /** Overrides of the nats.js options, as for connectNats. */
  overrides?: Partial<NodeConnectionOptions>;
}

/**
 * Connects, retrying every failure with capped exponential backoff until it succeeds or `signal`
 * aborts (then it resolves undefined). nats.js on its own retries a refused connection silently
 * and gives up on the first authentication or TLS failure; a service starting before (or without)
 * a reachable NATS needs every cause retried and reported, and must stop promptly when told to.
 * Once connected, nats.js reconnects by itself forever (connectionOptions). Errors in the settings
 * themselves (an unreadable file) are thrown at once: retrying cannot fix them.
 */
export async function connectNatsWithRetry(
  settings: NatsSettings | NatsSettingsInput,
  options: RetryingConnectOptions = {},
): Promise<NatsConnection | undefined> {
  const parsed = parseNatsSettings(settings);
  const connectOptions: NodeConnectionOptions = { ...connectionOptions(parsed), ...options.overrides, waitOnFirstConnect: false };
  const { signal, logger } = options;
  const initialDelayMs = options.initialDelayMs ?? 250;
  const maxDelayMs = options.maxDelayMs ?? 5_000;
  const repeatLogMs = options.repeatLogMs ?? 30_000;
  const aborted = new Promise<undefined>((resolve) => {
    if (signal?.aborted) resolve(undefined);
    signal?.addEventListener('abort', () => resolve(undefined), { once: true });
  });
  let lastCause: string | undefined;
  let lastLoggedAt = -Infinity;
  for (let attempt = 1; !signal?.aborted; attempt++) {
    const connecting = connect(connectOptions);
    try {
      const nc = await Promise.race([connecting, aborted]);
      if (nc !== undefined) return nc;
      // Aborted mid-attempt: whatever the attempt yields is closed, not leaked.
      connecting.then((late) => late.close()).catch(() => undefined);
      return undefined;
    } catch (error) {
      const cause = describeConnectError(error);
      const now = Date.now();
      if (cause !== lastCause || now - lastLoggedAt >= repeatLogMs) {
        logger?.warn({ servers: parsed.servers, attempt, cause }, 'cannot connect to NATS; retrying');
        lastCause = cause;
        lastLoggedAt = now;
      }
    }
    await Promise.race([delay(Math.min(maxDelayMs, initialDelayMs * 2 ** Math.min(attempt - 1, 10))), aborted]);
  }
  return undefined;
}

/** The real cause of a failed connect: nats.js wraps socket and TLS errors in a generic one. */
function describeConnectError(error: unknown): string {
  const parts: string[] = [];
  let current: unknown = error;
  for (let depth = 0; current instanceof Error && depth < 4; depth++) {
    const code = (current as NodeJS.ErrnoException).code;
    const text = code !== undefined && !current.message.includes(code) ? `${current.message} (${code})` : current.message;
    if (!parts.includes(text)) parts.push(text);
    current = current.cause;
  }
  return parts.join(': ') || String(error);
}

function delay(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}
