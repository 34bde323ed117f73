import { execFileSync } from 'node:child_process';
import { X509Certificate } from 'node:crypto';
import { mkdtempSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
import { connect as connectTls } from 'node:tls';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { credentials } from '@grpc/grpc-js';
import { eventually, HealthClient, startNatsServer, type NatsServerHandle } from '@spillway/testkit';
import { ServingStatus } from '@spillway/protocol';
import type { RunningEpp } from '@spillway/epp';
import { capturingLogger, healthStatus, startTestEpp } from './helpers.js';

/** A throwaway CA, a server certificate for 127.0.0.1 and a client certificate, made with openssl. */
function makeCertificates(dir: string) {
  const run = (...args: string[]) => execFileSync('openssl', args, { cwd: dir, stdio: 'pipe' });
  run(
    'req',
    '-x509',
    '-newkey',
    'rsa:2048',
    '-nodes',
    '-keyout',
    'ca.key',
    '-out',
    'ca.crt',
    '-days',
    '1',
    '-subj',
    '/CN=spillway-test-ca',
  );
  writeFileSync(join(dir, 'san.ext'), 'subjectAltName=IP:127.0.0.1,DNS:localhost\n');
  for (const name of ['server', 'client']) {
    run('req', '-newkey', 'rsa:2048', '-nodes', '-keyout', `${name}.key`, '-out', `${name}.csr`, '-subj', `/CN=${name}`);
    run(
      'x509',
      '-req',
      '-in',
      `${name}.csr`,
      '-CA',
      'ca.crt',
      '-CAkey',
      'ca.key',
      '-CAcreateserial',
      '-out',
      `${name}.crt`,
      '-days',
      '1',
      '-extfile',
      'san.ext',
    );
  }
  const file = (name: string) => join(dir, name);
  return {
    ca: file('ca.crt'),
    serverCert: file('server.crt'),
    serverKey: file('server.key'),
    clientCert: file('client.crt'),
    clientKey: file('client.key'),
  };
}

/** The fingerprint of the certificate the server at `port` presents to a new TLS connection (with a client certificate). */
function presented(port: number, ca: Buffer, client: { clientCert: string; clientKey: string }): Promise<string> {
  return new Promise((resolve, reject) => {
    const socket = connectTls({
      host: '127.0.0.1',
      port,
      ca,
      cert: readFileSync(client.clientCert),
      key: readFileSync(client.clientKey),
      ALPNProtocols: ['h2'],
      checkServerIdentity: () => undefined,
    });
    socket.once('secureConnect', () => {
      resolve(socket.getPeerX509Certificate()?.fingerprint256 ?? '');
      socket.destroy();
    });
    socket.once('error', reject);
  });
}

let nats: NatsServerHandle;
const running: RunningEpp[] = [];
let certs: ReturnType<typeof makeCertificates>;

beforeAll(async () => {
  certs = makeCertificates(mkdtempSync(join(tmpdir(), 'spillway-tls-')));
  nats = await startNatsServer({ forcePrivate: true });
});

afterAll(async () => {
  for (const epp of running) await epp.close();
  await nats?.stop();
});

describe('TLS', () => {
  it('serves ext_proc over TLS with --tls-cert/--tls-key, and the health port in plaintext (kubelet probes)', async () => {
    const epp = await startTestEpp(nats.url, 'zone-a', [
      '--tls-cert',
      certs.serverCert,
      '--tls-key',
      certs.serverKey,
      '--tls-client-ca',
      certs.ca,
    ]);
    running.push(epp);
    const ca = readFileSync(certs.ca);
    const mtls = credentials.createSsl(ca, readFileSync(certs.clientKey), readFileSync(certs.clientCert));
    expect(await healthStatus(epp.grpcPort, 'liveness', mtls)).toBe(ServingStatus.SERVING);
    await expect(healthStatus(epp.grpcPort, 'liveness')).rejects.toThrow();
    // The health port: plaintext, no client certificate needed.
    expect(await healthStatus(epp.healthPort, 'liveness')).toBe(ServingStatus.SERVING);
    await expect(healthStatus(epp.healthPort, 'liveness', mtls)).rejects.toThrow();
  });

  it('serves the health port over TLS too with --health-tls true', async () => {
    const epp = await startTestEpp(nats.url, 'zone-a', [
      '--tls-cert',
      certs.serverCert,
      '--tls-key',
      certs.serverKey,
      '--health-tls',
      'true',
    ]);
    running.push(epp);
    const tls = credentials.createSsl(readFileSync(certs.ca));
    expect(await healthStatus(epp.grpcPort, 'liveness', tls)).toBe(ServingStatus.SERVING);
    expect(await healthStatus(epp.healthPort, 'liveness', tls)).toBe(ServingStatus.SERVING);
    await expect(healthStatus(epp.healthPort, 'liveness')).rejects.toThrow();
  });

  it('requires a client certificate signed by --tls-client-ca (mTLS)', async () => {
    const epp = await startTestEpp(nats.url, 'zone-a', [
      '--tls-cert',
      certs.serverCert,
      '--tls-key',
      certs.serverKey,
      '--tls-client-ca',
      certs.ca,
    ]);
    running.push(epp);
    const ca = readFileSync(certs.ca);
    const withClientCert = credentials.createSsl(ca, readFileSync(certs.clientKey), readFileSync(certs.clientCert));
    expect(await healthStatus(epp.grpcPort, 'liveness', withClientCert)).toBe(ServingStatus.SERVING);
    await expect(healthStatus(epp.grpcPort, 'liveness', credentials.createSsl(ca))).rejects.toThrow();
  });

  it('reloads the certificate, key and client CA when their files change: new connections get them, open ones keep theirs', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'spillway-tls-rotate-'));
    const other = makeCertificates(mkdtempSync(join(tmpdir(), 'spillway-tls-other-')));
    const files = { cert: join(dir, 'tls.crt'), key: join(dir, 'tls.key'), ca: join(dir, 'ca.crt') };
    // Each file replaced the way an editor or a Secret update does it: written aside, renamed over.
    const put = (path: string, from: string) => {
      writeFileSync(`${path}.tmp`, readFileSync(from));
      renameSync(`${path}.tmp`, path);
    };
    put(files.cert, certs.serverCert);
    put(files.key, certs.serverKey);
    put(files.ca, certs.ca);
    const { logger, lines } = capturingLogger();
    const epp = await startTestEpp(
      nats.url,
      'zone-a',
      ['--tls-cert', files.cert, '--tls-key', files.key, '--tls-client-ca', files.ca],
      logger,
    );
    running.push(epp);
    const both = Buffer.concat([readFileSync(certs.ca), readFileSync(other.ca)]);
    const mtls = (set: typeof certs) => credentials.createSsl(both, readFileSync(set.clientKey), readFileSync(set.clientCert));
    const metrics = async () => (await fetch(`http://127.0.0.1:${epp.metricsPort}/metrics`)).text();
    const fingerprint = (path: string) => new X509Certificate(readFileSync(path)).fingerprint256;
    expect(await presented(epp.grpcPort, both, certs)).toBe(fingerprint(certs.serverCert));
    // A connection opened before the rotation.
    const open = new HealthClient(`127.0.0.1:${epp.grpcPort}`, mtls(certs));
    const check = () =>
      new Promise<number>((resolve, reject) =>
        open.check({ service: 'liveness' }, (error, response) => (error ? reject(error) : resolve(response.status))),
      );
    expect(await check()).toBe(ServingStatus.SERVING);

    // Half-rotated: a new certificate with the old key. Refused, counted, logged; the old pair stays.
    put(files.cert, other.serverCert);
    await eventually(async () => expect(await metrics()).toContain('spillway_tls_reloads_total{result="rejected"} 1'));
    expect(await presented(epp.grpcPort, both, certs)).toBe(fingerprint(certs.serverCert));
    expect(lines.some((l) => l['msg'] === 'new TLS files are not usable together; keeping the certificate in force')).toBe(true);
    // The key follows: in force for new connections.
    put(files.key, other.serverKey);
    await eventually(async () => expect(await presented(epp.grpcPort, both, certs)).toBe(fingerprint(other.serverCert)));
    expect(await metrics()).toContain('spillway_tls_reloads_total{result="applied"} 1');
    expect(await metrics()).toMatch(/spillway_tls_certificate_expiry_timestamp_seconds \d+/);
    // The client CA: the other CA's clients are let in, the first CA's no longer.
    await expect(healthStatus(epp.grpcPort, 'liveness', mtls(other))).rejects.toThrow();
    put(files.ca, other.ca);
    await eventually(async () => expect(await healthStatus(epp.grpcPort, 'liveness', mtls(other))).toBe(ServingStatus.SERVING));
    await expect(healthStatus(epp.grpcPort, 'liveness', mtls(certs))).rejects.toThrow();
    // The connection opened before all this still works.
    expect(await check()).toBe(ServingStatus.SERVING);
    open.close();
  });

  it('rejects TLS flags that do not go together, naming them', async () => {
    await expect(startTestEpp(nats.url, 'zone-a', ['--tls-cert', certs.serverCert])).rejects.toThrow(/--tls-key/);
    await expect(startTestEpp(nats.url, 'zone-a', ['--tls-client-ca', certs.ca])).rejects.toThrow(/--tls-client-ca/);
    await expect(startTestEpp(nats.url, 'zone-a', ['--health-tls', 'true'])).rejects.toThrow(/--health-tls/);
  });

  it('rejects missing and unusable TLS files, naming the flag', async () => {
    const tls = (cert: string, key: string, ca?: string) => [
      '--tls-cert',
      cert,
      '--tls-key',
      key,
      ...(ca === undefined ? [] : ['--tls-client-ca', ca]),
    ];
    await expect(startTestEpp(nats.url, 'zone-a', tls('/nonexistent/server.crt', certs.serverKey))).rejects.toThrow(
      /^--tls-cert: cannot read \/nonexistent\/server\.crt/,
    );
    await expect(startTestEpp(nats.url, 'zone-a', tls(certs.serverCert, '/nonexistent/server.key'))).rejects.toThrow(
      /^--tls-key: cannot read/,
    );
    await expect(startTestEpp(nats.url, 'zone-a', tls(certs.serverCert, certs.serverKey, '/nonexistent/ca.crt'))).rejects.toThrow(
      /^--tls-client-ca: cannot read/,
    );
    // Files that exist but hold the wrong thing.
    await expect(startTestEpp(nats.url, 'zone-a', tls(certs.serverKey, certs.serverKey))).rejects.toThrow(
      /^--tls-cert: .* is not a usable certificate/,
    );
    await expect(startTestEpp(nats.url, 'zone-a', tls(certs.serverCert, certs.clientKey))).rejects.toThrow(
      /^--tls-key: .* is not the private key of --tls-cert/,
    );
    await expect(startTestEpp(nats.url, 'zone-a', tls(certs.serverCert, certs.serverKey, certs.serverKey))).rejects.toThrow(
      /^--tls-client-ca: .* is not a usable CA certificate/,
    );
  });
});
