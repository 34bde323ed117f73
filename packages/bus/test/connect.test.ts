import { execFileSync } from 'node:child_process';
import { createServer, type AddressInfo } from 'node:net';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { nkeys } from '@nats-io/nats-core';
import { eventually, freePort, startNatsServer, type NatsServerHandle } from '@spillway/testkit';
import { connectNats, connectNatsWithRetry, natsSettingsFromValues } from '../src/index.js';

const user = nkeys.createUser();
let server: NatsServerHandle;
let dir: string;

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'spillway-bus-auth-'));
  server = await startNatsServer({
    forcePrivate: true,
    extraConfig: `authorization { users = [ { user: alice, password: s3cret }, { nkey: ${user.getPublicKey()} } ] }`,
  });
});

afterAll(async () => {
  await server?.stop();
  rmSync(dir, { recursive: true, force: true });
});

describe('connectNats with authentication', () => {
  it('connects with user and password from the environment', async () => {
    const nc = await connectNats(
      natsSettingsFromValues({}, { NATS_URL: server.url, NATS_USER: 'alice', NATS_PASSWORD: 's3cret', NATS_NAME: 'auth-test' }),
    );
    expect(nc.info?.client_id).toBeTypeOf('number');
    await nc.close();
  });

  it('connects with an nkey seed file', async () => {
    const seedFile = join(dir, 'user.nk');
    writeFileSync(seedFile, `${new TextDecoder().decode(user.getSeed())}\n`);
    const nc = await connectNats(natsSettingsFromValues({ nats: server.url, natsNkeySeed: seedFile }, {}));
    await nc.flush();
    await nc.close();
  });

  it('fails on a wrong password (when told not to retry) and on a file that holds no seed', async () => {
    const settings = natsSettingsFromValues({ nats: server.url, natsUser: 'alice', natsPassword: 'wrong' }, {});
    await expect(connectNats(settings, { waitOnFirstConnect: false, maxReconnectAttempts: 0 })).rejects.toThrow(/Authorization/i);
    const notSeed = join(dir, 'junk');
    writeFileSync(notSeed, 'hello');
    await expect(connectNats(natsSettingsFromValues({ nats: server.url, natsNkeySeed: notSeed }, {}))).rejects.toThrow(
      /--nats-nkey-seed: .* does not hold a user nkey seed/,
    );
  });
});

describe('tls:// means TLS or no connection', () => {
  it('refuses a plaintext server named with tls://, naming the cause, and never sends the password in the clear', async () => {
    const settings = natsSettingsFromValues(
      { nats: server.url.replace('nats://', 'tls://'), natsUser: 'alice', natsPassword: 's3cret' },
      {},
    );
    await expect(connectNats(settings, { waitOnFirstConnect: false, maxReconnectAttempts: 0 })).rejects.toThrow(/tls/i);
    const lines: { cause: string }[] = [];
    const abort = new AbortController();
    const connecting = connectNatsWithRetry(settings, {
      logger: { warn: (fields: Record<string, unknown>) => lines.push(fields as { cause: string }) },
      signal: abort.signal,
      initialDelayMs: 20,
      maxDelayMs: 50,
    });
    await eventually(() => expect(lines.length).toBeGreaterThanOrEqual(1), 10_000);
    expect(lines[0]?.cause).toMatch(/does not support 'tls'/);
    abort.abort();
    expect(await connecting).toBeUndefined();
    // nats:// to the same server still connects (TLS is asked for only when the URL or a TLS file says so).
    const plain = await connectNats(natsSettingsFromValues({ nats: server.url, natsUser: 'alice', natsPassword: 's3cret' }, {}));
    await plain.close();

    // What the client sends to a plaintext server it reached by tls://: nothing after the server's
    // INFO, so no CONNECT and no password (a listener speaking the first line of the protocol).
    const received: Buffer[] = [];
    const listener = createServer((socket) => {
      socket.on('data', (chunk: Buffer) => received.push(chunk));
      socket.on('error', () => undefined);
      socket.write(`INFO {"server_id":"x","version":"2.9.10","proto":1,"max_payload":1048576,"auth_required":true}\r\n`);
    });
    await new Promise<void>((resolve) => listener.listen(0, '127.0.0.1', resolve));
    const port = (listener.address() as AddressInfo).port;
    try {
      const fake = natsSettingsFromValues({ nats: `tls://127.0.0.1:${port}`, natsUser: 'alice', natsPassword: 's3cret' }, {});
      await expect(connectNats(fake, { waitOnFirstConnect: false, maxReconnectAttempts: 0 })).rejects.toThrow(/tls/i);
      expect(Buffer.concat(received).toString('latin1')).not.toMatch(/CONNECT|s3cret/);
    } finally {
      await new Promise((resolve) => listener.close(resolve));
    }
  });

  it('refuses a server list mixing tls:// and nats:// (one TLS setting covers every server)', () => {
    expect(() => natsSettingsFromValues({ nats: 'tls://a:4222,nats://b:4222' }, {})).toThrow(
      /--nats: tls:\/\/ and other URLs cannot be mixed/,
    );
  });
});

describe('connectNatsWithRetry', () => {
  const collect = () => {
    const lines: { cause: string; attempt: number }[] = [];
    return { lines, logger: { warn: (fields: Record<string, unknown>) => lines.push(fields as { cause: string; attempt: number }) } };
  };

  it('retries a wrong password, logging the real cause (rate-limited), and stops promptly when aborted', async () => {
    const { lines, logger } = collect();
    const abort = new AbortController();
    const settings = natsSettingsFromValues({ nats: server.url, natsUser: 'alice', natsPassword: 'wrong' }, {});
    const connecting = connectNatsWithRetry(settings, { logger, signal: abort.signal, initialDelayMs: 20, maxDelayMs: 50 });
    await eventually(() => expect(lines.length).toBeGreaterThanOrEqual(1), 10_000);
    expect(lines[0]?.cause).toMatch(/Authorization Violation/i);
    // Many attempts, one line: the same cause is not repeated within the interval.
    await new Promise((r) => setTimeout(r, 300));
    expect(lines).toHaveLength(1);
    const stoppedAt = Date.now();
    abort.abort();
    expect(await connecting).toBeUndefined();
    expect(Date.now() - stoppedAt).toBeLessThan(5_000);
  });

  it('retries while no server listens, then connects once one does', async () => {
    const { lines, logger } = collect();
    const port = await freePort();
    const connecting = connectNatsWithRetry({ servers: [`nats://127.0.0.1:${port}`] }, { logger, initialDelayMs: 20, maxDelayMs: 100 });
    await eventually(() => expect(lines.length).toBeGreaterThanOrEqual(1), 10_000);
    expect(lines[0]?.cause).toMatch(/ECONNREFUSED|refused/i);
    const late = await startNatsServer({ forcePrivate: true, port });
    try {
      const nc = await connecting;
      expect(nc?.isClosed()).toBe(false);
      await nc?.close();
    } finally {
      await late.stop();
    }
  });

  it('retries a TLS failure, naming it', async () => {
    const certs = join(dir, 'tls');
    mkdirSync(certs);
    const run = (...args: string[]) => execFileSync('openssl', args, { cwd: certs, stdio: 'pipe' });
    run(
      'req',
      '-x509',
      '-newkey',
      'rsa:2048',
      '-nodes',
      '-keyout',
      'server.key',
      '-out',
      'server.crt',
      '-days',
      '1',
      '-subj',
      '/CN=127.0.0.1',
      '-addext',
      'subjectAltName=IP:127.0.0.1',
    );
    const tlsServer = await startNatsServer({
      forcePrivate: true,
      extraConfig: `tls { cert_file: "${join(certs, 'server.crt')}", key_file: "${join(certs, 'server.key')}" }`,
    });
    const { lines, logger } = collect();
    const abort = new AbortController();
    try {
      // No CA given: the self-signed server certificate cannot be verified.
      const connecting = connectNatsWithRetry(
        { servers: [tlsServer.url.replace('nats://', 'tls://')] },
        { logger, signal: abort.signal, initialDelayMs: 20, maxDelayMs: 100 },
      );
      await eventually(() => expect(lines.length).toBeGreaterThanOrEqual(1), 10_000);
      expect(lines[0]?.cause).toMatch(/certificate|self.signed|TLS/i);
      abort.abort();
      expect(await connecting).toBeUndefined();
    } finally {
      await tlsServer.stop();
    }
  });
});
