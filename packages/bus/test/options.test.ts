import { parseArgs } from 'node:util';
import { describe, expect, it } from 'vitest';
import { connectionOptions, natsFlagSpec, natsOptionsFromFlags, NatsOptionsError, parseNatsSettings } from '../src/index.js';

const flags = (...args: string[]) => parseArgs({ args, options: natsFlagSpec, strict: true }).values;

describe('natsOptionsFromFlags', () => {
  it('defaults to a local server with Spillway reliability settings', () => {
    const s = natsOptionsFromFlags({}, {});
    expect(s).toMatchObject({ servers: ['nats://127.0.0.1:4222'], reconnectTimeWaitMs: 500, pingIntervalMs: 10_000 });
    expect(connectionOptions(s)).toMatchObject({ maxReconnectAttempts: -1, waitOnFirstConnect: true, reconnectTimeWait: 500, pingInterval: 10_000 });
  });

  it('reads a server list, name and user/password from flags', () => {
    const s = natsOptionsFromFlags(flags('--nats', 'nats://a:4222, tls://b:4443,c:1', '--nats-name', 'epp-a', '--nats-user', 'u', '--nats-password', 'p'), {});
    expect(s).toMatchObject({ servers: ['nats://a:4222', 'tls://b:4443', 'c:1'], name: 'epp-a', user: 'u', password: 'p' });
    expect(connectionOptions(s)).toMatchObject({ servers: s.servers, name: 'epp-a', user: 'u', pass: 'p' });
  });

  it('prefers the flag, then SPILLWAY_<FLAG>, then the conventional NATS_* variable', () => {
    const env = { NATS_URL: 'nats://conventional:1', SPILLWAY_NATS: 'nats://spillway:2', NATS_TOKEN: 'tok' };
    expect(natsOptionsFromFlags({}, env).servers).toEqual(['nats://spillway:2']);
    expect(natsOptionsFromFlags({}, { NATS_URL: 'nats://conventional:1' }).servers).toEqual(['nats://conventional:1']);
    expect(natsOptionsFromFlags(flags('--nats', 'nats://flag:3'), env).servers).toEqual(['nats://flag:3']);
    expect(natsOptionsFromFlags({}, env).token).toBe('tok');
  });

  it.each([
    [['--nats', 'http://x:1'], 'nats'],
    [['--nats', 'nats://a b'], 'nats'],
    [['--nats', ','], 'nats'],
    [['--nats-user', 'u'], 'nats-password'],
    [['--nats-password', 'p'], 'nats-user'],
    [['--nats-token', 't', '--nats-user', 'u', '--nats-password', 'p'], 'nats-token'],
    [['--nats-creds', 'f', '--nats-nkey-seed', 'g'], 'nats-nkey-seed'],
    [['--nats-tls-cert', 'c'], 'nats-tls-key'],
    [['--nats-tls-key', 'k'], 'nats-tls-cert'],
  ])('rejects %j naming --%s', (args, flag) => {
    const attempt = () => natsOptionsFromFlags(flags(...args), {});
    expect(attempt).toThrow(NatsOptionsError);
    expect(attempt).toThrow(`--${flag}:`);
  });

  it('names the flag when a file cannot be read', () => {
    const s = parseNatsSettings({ servers: ['nats://x:1'], nkeySeedFile: '/nonexistent/seed' });
    expect(() => connectionOptions(s)).toThrow(/^--nats-nkey-seed: cannot read/);
    const c = parseNatsSettings({ servers: ['nats://x:1'], tls: { caFile: '/nonexistent/ca.pem' } });
    expect(() => connectionOptions(c)).toThrow(/^--nats-tls-ca: cannot read/);
  });
});
