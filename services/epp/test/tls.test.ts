import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { credentials } from '@grpc/grpc-js';
import { startNatsServer, type NatsServerHandle } from '@spillway/testkit';
import { ServingStatus } from '@spillway/protocol';
import type { RunningEpp } from '@spillway/epp';
import { healthStatus, startTestEpp } from './helpers.js';

/** A throwaway CA, a server certificate for 127.0.0.1 and a client certificate, made with openssl. */
function makeCertificates(dir: string) {
  const run = (...args: string[]) => execFileSync('openssl', args, { cwd: dir, stdio: 'pipe' });
  run('req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-keyout', 'ca.key', '-out', 'ca.crt', '-days', '1', '-subj', '/CN=spillway-test-ca');
  writeFileSync(join(dir, 'san.ext'), 'subjectAltName=IP:127.0.0.1,DNS:localhost\n');
  for (const name of ['server', 'client']) {
    run('req', '-newkey', 'rsa:2048', '-nodes', '-keyout', `${name}.key`, '-out', `${name}.csr`, '-subj', `/CN=${name}`);
    run('x509', '-req', '-in', `${name}.csr`, '-CA', 'ca.crt', '-CAkey', 'ca.key', '-CAcreateserial', '-out', `${name}.crt`, '-days', '1', '-extfile', 'san.ext');
  }
  const file = (name: string) => join(dir, name);
  return { ca: file('ca.crt'), serverCert: file('server.crt'), serverKey: file('server.key'), clientCert: file('client.crt'), clientKey: file('client.key') };
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
  it('serves gRPC over TLS with --tls-cert/--tls-key', async () => {
    const epp = await startTestEpp(nats.url, 'zone-a', ['--tls-cert', certs.serverCert, '--tls-key', certs.serverKey]);
    running.push(epp);
    const tls = credentials.createSsl(readFileSync(certs.ca));
    expect(await healthStatus(epp.grpcPort, 'liveness', tls)).toBe(ServingStatus.SERVING);
    expect(await healthStatus(epp.healthPort, 'liveness', tls)).toBe(ServingStatus.SERVING);
    await expect(healthStatus(epp.grpcPort, 'liveness')).rejects.toThrow();
  });

  it('requires a client certificate signed by --tls-client-ca (mTLS)', async () => {
    const epp = await startTestEpp(nats.url, 'zone-a', ['--tls-cert', certs.serverCert, '--tls-key', certs.serverKey, '--tls-client-ca', certs.ca]);
    running.push(epp);
    const ca = readFileSync(certs.ca);
    const withClientCert = credentials.createSsl(ca, readFileSync(certs.clientKey), readFileSync(certs.clientCert));
    expect(await healthStatus(epp.grpcPort, 'liveness', withClientCert)).toBe(ServingStatus.SERVING);
    await expect(healthStatus(epp.grpcPort, 'liveness', credentials.createSsl(ca))).rejects.toThrow();
  });

  it('rejects TLS flags that do not go together, naming them', async () => {
    await expect(startTestEpp(nats.url, 'zone-a', ['--tls-cert', certs.serverCert])).rejects.toThrow(/--tls-key/);
    await expect(startTestEpp(nats.url, 'zone-a', ['--tls-client-ca', certs.ca])).rejects.toThrow(/--tls-client-ca/);
  });
});
