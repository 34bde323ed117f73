import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { jetstreamManager } from '@nats-io/jetstream';
import type { NatsConnection } from '@nats-io/nats-core';
import { connectNats, ensureStream, EventPublisher } from '@spillway/bus';
import { podEvents, publishAll, readiness, startNatsServer, type NatsServerHandle } from '@spillway/testkit';
import { runFleetCli } from '../src/index.js';

const bin = join(dirname(fileURLToPath(import.meta.url)), '..', 'bin', 'spillway-fleet.js');
const built = join(dirname(fileURLToPath(import.meta.url)), '..', 'dist', 'fleet-main.js');

let server: NatsServerHandle;
let nc: NatsConnection;

beforeAll(async () => {
  server = await startNatsServer({ forcePrivate: true });
  nc = await connectNats({ servers: [server.url] });
  await ensureStream(await jetstreamManager(nc));
  const publisher = new EventPublisher(nc);
  await publishAll(publisher, [...podEvents('cli', 0, 6, Date.now()), readiness('cli', 6, Date.now(), { ready: false })]);
  await publishAll(publisher, podEvents('other', 0, 3, Date.now()));
});

afterAll(async () => {
  await nc?.close();
  await server?.stop();
});

async function inProcess(argv: string[], env: Record<string, string> = {}): Promise<{ code: number; out: string; err: string }> {
  let out = '';
  let err = '';
  const code = await runFleetCli(argv, { env, out: (t) => (out += t), err: (t) => (err += t) });
  return { code, out, err };
}

function spawned(argv: string[]): Promise<{ code: number | null; out: string; err: string }> {
  if (!existsSync(built)) throw new Error(`${built} is missing: build first with \`npx tsc -b services/ops\` (npm test does)`);
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [bin, ...argv], { stdio: ['ignore', 'pipe', 'pipe'], env: { PATH: process.env['PATH'] ?? '' } });
    let out = '';
    let err = '';
    child.stdout.on('data', (c: Buffer) => (out += c.toString()));
    child.stderr.on('data', (c: Buffer) => (err += c.toString()));
    child.on('error', reject);
    child.on('exit', (code) => resolve({ code, out, err }));
  });
}

function podLines(out: string): string[] {
  return out.split('\n').filter((l) => /^zone-\w\s+vllm-\d/.test(l));
}

describe('spillway-fleet', () => {
  it('--once prints the pool as a table after the replay (in process)', async () => {
    const { code, out, err } = await inProcess(['--nats', server.url, '--pool', 'cli', '--once']);
    expect(err).toBe('');
    expect(code).toBe(0);
    expect(out).toMatch(/ZONE\s+POD\s+ADDRESS\s+READY\s+WAITING\s+RUNNING\s+KV USE\s+IN FLIGHT\s+METRICS AGE\s+STALE/);
    expect(out).toContain('in flight: no EPP shares its state');
    const lines = podLines(out);
    expect(lines).toHaveLength(7);
    expect(lines.find((l) => /\svllm-6\s/.test(l))).toMatch(/not ready/);
    expect(out).toContain('connection connected');
    expect(out).toContain('caught up');
    expect(out).toContain('events applied 13  ignored 0  rejected 0');
    expect(out).not.toContain('other');
  });

  it('takes the pool and server from the environment', async () => {
    const { code, out } = await inProcess(['--once'], { NATS_URL: server.url, SPILLWAY_POOL: 'other' });
    expect(code).toBe(0);
    expect(podLines(out)).toHaveLength(3);
  });

  it('--once through the built binary', async () => {
    const { code, out, err } = await spawned(['--nats', server.url, '--pool', 'cli', '--once']);
    expect(err).toBe('');
    expect(code).toBe(0);
    expect(podLines(out)).toHaveLength(7);
  });

  it('--help prints usage and exits 0', async () => {
    const { code, out } = await spawned(['--help']);
    expect(code).toBe(0);
    expect(out).toMatch(/^Usage: spillway-fleet /);
    expect(out).toContain('--pool P');
    expect(out).toContain('SPILLWAY_POOL');
    expect(out).toContain('--nats-creds FILE');
  });

  it('-h is short for --help', async () => {
    const { code, out } = await inProcess(['-h']);
    expect(code).toBe(0);
    expect(out).toContain('--stale-after MS');
  });

  it.each([
    [['--nats', 'nats://127.0.0.1:1', '--pool'], /--pool/],
    [['--once'], /--pool: .*required/],
    [['--pool', 'p', '--bogus'], /--bogus/],
    [['--pool', 'p', '--interval', 'soon'], /--interval: must be a number/],
    [['--pool', 'p', '--stream', 'a.b'], /--stream/],
    [['--pool', 'p', '--nats', 'http://x'], /--nats:/],
    [['--pool', 'p', '--nats-user', 'u'], /--nats-password:/],
  ])('bad flags %j exit 2 naming the flag', async (argv, message) => {
    const { code, err } = await inProcess(argv);
    expect(code).toBe(2);
    expect(err).toMatch(message);
  });

  it('exits 1 when the stream does not exist, or the server cannot be reached', async () => {
    const missing = await inProcess(['--nats', server.url, '--pool', 'cli', '--stream', 'NOPE', '--once']);
    expect(missing.code).toBe(1);
    expect(missing.err).toMatch(/stream NOPE not found/);
    const unreachable = await spawned(['--nats', 'nats://127.0.0.1:1', '--pool', 'cli', '--once', '--timeout', '300']);
    expect(unreachable.code).toBe(1);
    expect(unreachable.err).toMatch(/cannot connect to nats:\/\/127\.0\.0\.1:1/);
  });
});
