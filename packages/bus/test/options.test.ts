import { describe, expect, it } from 'vitest';
import { CliError, parseCommandLine, renderHelp } from '@spillway/cli';
import { connectionOptions, natsFlags, natsOptionsFromFlags, natsSettingsFromValues, parseNatsSettings } from '../src/index.js';
import type { Environment } from '../src/index.js';

/** What a binary does: parse its flags (NATS ones included) from argv and env, then resolve. */
const resolve = (args: string[], env: Environment = {}) => natsSettingsFromValues(parseCommandLine(natsFlags, args, env).values, env);

describe('natsFlags + natsSettingsFromValues', () => {
  it('defaults to a local server with Spillway reliability settings', () => {
    const s = resolve([]);
    expect(s).toMatchObject({ servers: ['nats://127.0.0.1:4222'], reconnectTimeWaitMs: 500, pingIntervalMs: 10_000 });
    expect(connectionOptions(s)).toMatchObject({
      maxReconnectAttempts: -1,
      waitOnFirstConnect: true,
      reconnectTimeWait: 500,
      pingInterval: 10_000,
    });
  });

  it('reads a server list, name and user/password from flags', () => {
    const s = resolve(['--nats', 'nats://a:4222, b:4443,c:1', '--nats-name', 'epp-a', '--nats-user', 'u', '--nats-password', 'p']);
    expect(s).toMatchObject({ servers: ['nats://a:4222', 'b:4443', 'c:1'], name: 'epp-a', user: 'u', password: 'p' });
    expect(connectionOptions(s)).toMatchObject({ servers: s.servers, name: 'epp-a', user: 'u', pass: 'p' });
    expect(connectionOptions(s).tls).toBeUndefined();
    // tls:// asks nats.js for TLS (a server without it is refused).
    expect(connectionOptions(resolve(['--nats', 'tls://a:4443,tls://b:4443'])).tls).toEqual({});
  });

  it('prefers the flag, then SPILLWAY_<FLAG>, then the conventional NATS_* variable', () => {
    const env = { NATS_URL: 'nats://conventional:1', SPILLWAY_NATS: 'nats://spillway:2', NATS_TOKEN: 'tok' };
    expect(resolve([], env).servers).toEqual(['nats://spillway:2']);
    expect(resolve([], { NATS_URL: 'nats://conventional:1' }).servers).toEqual(['nats://conventional:1']);
    expect(resolve(['--nats', 'nats://flag:3'], env).servers).toEqual(['nats://flag:3']);
    expect(resolve([], env).token).toBe('tok');
    expect(resolve([], { SPILLWAY_NATS_USER: 'u', NATS_USER: 'x', NATS_PASSWORD: 'p' })).toMatchObject({ user: 'u', password: 'p' });
  });

  it('lists every NATS flag with its variables in help', () => {
    const help = renderHelp('x', 'x', natsFlags);
    for (const text of ['--nats URL', '--nats-creds FILE', '--nats-tls-key FILE', 'SPILLWAY_NATS_NKEY_SEED', 'NATS_TLS_CA'])
      expect(help).toContain(text);
  });

  it('keeps natsOptionsFromFlags (deprecated, flag-named keys) on the same path', () => {
    const env = { SPILLWAY_NATS: 'nats://spillway:2', NATS_TOKEN: 'tok' };
    expect(natsOptionsFromFlags({ nats: 'nats://flag:3' }, env)).toMatchObject({ servers: ['nats://flag:3'], token: 'tok' });
    expect(natsOptionsFromFlags({}, env).servers).toEqual(['nats://spillway:2']);
    expect(() => natsOptionsFromFlags({ 'nats-user': 'u' }, {})).toThrow(/^--nats-password:/);
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
    const attempt = () => resolve(args);
    expect(attempt).toThrow(CliError);
    expect(attempt).toThrow(`--${flag}:`);
    try {
      attempt();
    } catch (error) {
      expect((error as CliError).flag).toBe(flag);
    }
  });

  it('names the flag when a file cannot be read', () => {
    const s = parseNatsSettings({ servers: ['nats://x:1'], nkeySeedFile: '/nonexistent/seed' });
    expect(() => connectionOptions(s)).toThrow(/^--nats-nkey-seed: cannot read/);
    const c = parseNatsSettings({ servers: ['nats://x:1'], tls: { caFile: '/nonexistent/ca.pem' } });
    expect(() => connectionOptions(c)).toThrow(/^--nats-tls-ca: cannot read/);
  });
});
