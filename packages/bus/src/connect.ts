import { readFileSync } from 'node:fs';
import {
  connect,
  credsAuthenticator,
  nkeyAuthenticator,
  type NatsConnection,
  type NodeConnectionOptions,
} from '@nats-io/transport-node';
import { NatsOptionsError, parseNatsSettings, type NatsSettings, type NatsSettingsInput } from './options.js';

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
    if (!/^SU[A-Z2-7]+$/.test(text)) throw new NatsOptionsError('nats-nkey-seed', `${settings.nkeySeedFile} does not hold a user nkey seed (SU...)`);
    options.authenticator = nkeyAuthenticator(new TextEncoder().encode(text));
  }
  if (settings.credsFile !== undefined) {
    options.authenticator = credsAuthenticator(readFlagFile('nats-creds', settings.credsFile));
  }
  if (settings.tls) {
    const tls: NonNullable<NodeConnectionOptions['tls']> = {};
    if (settings.tls.caFile !== undefined) {
      readFlagFile('nats-tls-ca', settings.tls.caFile);
      tls.caFile = settings.tls.caFile;
    }
    if (settings.tls.certFile !== undefined) {
      readFlagFile('nats-tls-cert', settings.tls.certFile);
      tls.certFile = settings.tls.certFile;
    }
    if (settings.tls.keyFile !== undefined) {
      readFlagFile('nats-tls-key', settings.tls.keyFile);
      tls.keyFile = settings.tls.keyFile;
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
