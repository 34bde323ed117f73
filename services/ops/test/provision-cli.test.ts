import { spawn } from 'node:child_process';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { jetstreamManager } from '@nats-io/jetstream';
import type { NatsConnection } from '@nats-io/nats-core';
import { connectNats } from '@spillway/bus';
import { freePort, startNatsServer, type NatsServerHandle } from '@spillway/testkit';
import { runProvisionCli } from '../src/index.js';

const bin = join(dirname(fileURLToPath(import.meta.url)), '..', 'bin', 'spillway-provision.js');

let server: NatsServerHandle;
let nc: NatsConnection;

beforeAll(async () => {
  server = await startNatsServer({ forcePrivate: true });
  nc = await connectNats({ servers: [server.url] });
});

afterAll(async () => {
  await nc?.close();
  await server?.stop();
});

async function run(argv: string[], env: Record<string, string> = {}): Promise<{ code: number; out: string; err: string }> {
  let out = '';
  let err = '';
  const code = await runProvisionCli(argv, { env, out: (t) => (out += t), err: (t) => (err += t) });
  return { code, out, err };
}

describe('spillway-provision', () => {
  it('creates the zone stream and the local aggregate, then leaves them alone on a second run', async () => {
    const args = ['--nats', server.url, '--zone', 'zone-a', '--zones', 'zone-a,zone-b,zone-c'];
    const first = await run(args);
    expect(first).toMatchObject({ code: 0, err: '' });
    expect(first.out).toBe('zone-a: created [SPILLWAY_ZONE-A, SPILLWAY], existing []\n');
    const jsm = await jetstreamManager(nc);
    const aggregate = await jsm.streams.info('SPILLWAY');
    expect(aggregate.config.subjects ?? []).toEqual([]);
    expect(aggregate.config.sources?.map((s) => s.name)).toEqual(['SPILLWAY_ZONE-A', 'SPILLWAY_ZONE-B', 'SPILLWAY_ZONE-C']);
    expect((await jsm.streams.info('SPILLWAY_ZONE-A')).config.subjects).toEqual(['spillway.v1.*.zone-a.>']);

    const second = await run(args);
    expect(second).toMatchObject({ code: 0, out: 'zone-a: created [], existing [SPILLWAY_ZONE-A, SPILLWAY]\n' });
  });

  it('takes its flags from SPILLWAY_* variables too', async () => {
    const result = await run([], {
      SPILLWAY_NATS: server.url,
      SPILLWAY_ZONE: 'zone-b',
      SPILLWAY_ZONES: 'zone-a,zone-b',
      SPILLWAY_AGGREGATE_STREAM: 'AGG_B',
    });
    expect(result).toMatchObject({ code: 0, out: 'zone-b: created [SPILLWAY_ZONE-B, AGG_B], existing []\n' });
  });

  it('rejects bad flags with exit 2, naming the flag', async () => {
    expect(await run(['--nats', server.url, '--zone', 'zone-a'])).toMatchObject({ code: 2, err: expect.stringMatching(/zones/) });
    expect(await run(['--nats', server.url, '--zone', 'zone-d', '--zones', 'zone-a,zone-b'])).toMatchObject({
      code: 2,
      err: expect.stringMatching(/^error: --zones: must include --zone zone-d/),
    });
    expect(await run(['--nats', server.url, '--zone', 'zone.a', '--zones', 'zone.a'])).toMatchObject({
      code: 2,
      err: expect.stringMatching(/^error: --zone: zone "zone.a"/),
    });
    expect(await run(['--nats', server.url, '--zone', 'hub', '--zones', 'hub'])).toMatchObject({
      code: 2,
      err: expect.stringMatching(/reserved/),
    });
    expect(await run(['--zone', 'a', '--zones', 'a', '--timeout', 'soon'])).toMatchObject({
      code: 2,
      err: expect.stringMatching(/--timeout/),
    });
  });

  it('exits 1 when the server cannot be reached before --timeout', async () => {
    const port = await freePort();
    const result = await run(['--nats', `nats://127.0.0.1:${port}`, '--zone', 'zone-a', '--zones', 'zone-a', '--timeout', '300']);
    expect(result.code).toBe(1);
    expect(result.err).toMatch(/cannot connect to nats:\/\/127\.0\.0\.1:\d+: no connection after 300 ms/);
  });

  it('--help through the built binary', async () => {
    const { code, out } = await new Promise<{ code: number | null; out: string }>((resolve, reject) => {
      const child = spawn(process.execPath, [bin, '--help'], { stdio: ['ignore', 'pipe', 'inherit'] });
      let text = '';
      child.stdout.on('data', (c: Buffer) => (text += c.toString()));
      child.on('error', reject);
      child.on('exit', (exit) => resolve({ code: exit, out: text }));
    });
    expect(code).toBe(0);
    expect(out).toMatch(/^Usage: spillway-provision /);
    expect(out).toContain('--zones');
  });
});
