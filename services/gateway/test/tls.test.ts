// TLS towards the EPP: the gateway verifies the EPP's certificate against --epp-tls-ca.
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ServerCredentials } from '@grpc/grpc-js';
import { describe, expect, it } from 'vitest';
import { completion, fakeEpp, gateway, post, sim } from './fixtures.js';

function selfSigned(): { cert: Buffer; key: Buffer } {
  const dir = mkdtempSync(join(tmpdir(), 'spillway-gateway-tls-'));
  const [cert, key] = [join(dir, 'cert.pem'), join(dir, 'key.pem')];
  execFileSync(
    'openssl',
    [
      'req',
      '-x509',
      '-newkey',
      'ec',
      '-pkeyopt',
      'ec_paramgen_curve:prime256v1',
      '-nodes',
      '-days',
      '1',
      '-subj',
      '/CN=epp.test',
      '-addext',
      'subjectAltName=DNS:epp.test',
      '-keyout',
      key,
      '-out',
      cert,
    ],
    { stdio: 'ignore' },
  );
  return { cert: readFileSync(cert), key: readFileSync(key) };
}

describe('TLS to the EPP', () => {
  const { cert, key } = selfSigned();

  it('connects when the CA and server name match, and fails closed when they do not', async () => {
    const upstream = await sim();
    const epp = await fakeEpp(
      () => ({ destination: upstream.address }),
      ServerCredentials.createSsl(null, [{ cert_chain: cert, private_key: key }]),
    );
    const trusted = await gateway({
      epp: epp.address,
      eppTls: { ca: cert, serverName: 'epp.test' },
      endpoints: [{ address: upstream.address }],
    });
    expect((await post(`${trusted.url}/v1/completions`, completion())).status).toBe(200);

    const plaintext = await gateway({ epp: epp.address, endpoints: [{ address: upstream.address }] });
    expect((await post(`${plaintext.url}/v1/completions`, completion())).status).toBe(500);
    const wrongName = await gateway({
      epp: epp.address,
      eppTls: { ca: cert, serverName: 'other.test' },
      endpoints: [{ address: upstream.address }],
    });
    expect((await post(`${wrongName.url}/v1/completions`, completion())).status).toBe(500);
    expect(epp.streams).toHaveLength(1);
  });
});
