import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { nkeys } from '@nats-io/nats-core';
import { startNatsServer, type NatsServerHandle } from '@spillway/testkit';
import { connectNats, natsSettingsFromValues } from '../src/index.js';

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
    const nc = await connectNats(natsSettingsFromValues({}, { NATS_URL: server.url, NATS_USER: 'alice', NATS_PASSWORD: 's3cret', NATS_NAME: 'auth-test' }));
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
    await expect(connectNats(natsSettingsFromValues({ nats: server.url, natsNkeySeed: notSeed }, {}))).rejects.toThrow(/--nats-nkey-seed: .* does not hold a user nkey seed/);
  });
});
