/**
 * The collector binary stops after one SIGTERM even when NATS went away first: readiness publishes
 * still retrying, a connection reconnecting. It exits 0 by itself (the test would SIGKILL a stuck
 * one after a generous wait and fail), and says what it dropped.
 */
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { jetstreamManager } from '@nats-io/jetstream';
import { connect } from '@nats-io/transport-node';
import { eventually, freePort, startNatsServer, type NatsServerHandle } from '@spillway/testkit';
import { spawnCollector, type Child } from './helpers/processes.js';
import { startFakeModelServer, type FakeModelServer } from './helpers/model-server.js';

const EXPOSITION = readFileSync(join(import.meta.dirname, 'fixtures', 'vllm-v0.10.prom'), 'utf8');
/** Far longer than a clean stop takes, far shorter than the old hang (it never ended). */
const PATIENCE_MS = 20_000;

let nats: NatsServerHandle;
let servers: FakeModelServer[] = [];
let collector: Child | undefined;

beforeAll(async () => {
  nats = await startNatsServer({ forcePrivate: true });
  servers = await Promise.all([0, 1, 2].map(() => startFakeModelServer(EXPOSITION)));
});

afterAll(async () => {
  await collector?.kill('SIGKILL');
  await Promise.all(servers.map((s) => s.close()));
  await nats?.stop();
});

function exited(child: Child): Promise<{ code: number | null; signal: NodeJS.Signals | null } | 'still running'> {
  return new Promise((resolve) => {
    const timer = setTimeout(() => resolve('still running'), PATIENCE_MS);
    child.proc.once('exit', (code, signal) => {
      clearTimeout(timer);
      resolve({ code, signal });
    });
  });
}

describe('spillway-collector shutdown', () => {
  it('exits 0 after one SIGTERM while NATS is gone and readiness publishes are retrying', async () => {
    const file = join(mkdtempSync(join(tmpdir(), 'spillway-shutdown-')), 'endpoints.yaml');
    writeFileSync(file, servers.map((s, i) => `- { pod: m${i}, address: "${s.address}" }`).join('\n'));
    collector = spawnCollector([
      '--pool',
      'llama',
      '--zone',
      'zone-a',
      '--endpoints',
      file,
      '--nats',
      nats.url,
      '--probe-interval-ms',
      '50',
      '--probe-timeout-ms',
      '200',
      '--metrics-port',
      '0',
      '--log-level',
      'info',
    ]);
    const child = collector;
    // Connected, the stream ensured, every pod's readiness stored: then NATS goes away.
    const nc = await connect({ servers: nats.url });
    const jsm = await jetstreamManager(nc);
    await eventually(async () => expect((await jsm.streams.info('SPILLWAY')).state.messages).toBeGreaterThanOrEqual(3), 15_000);
    await nc.close();
    await nats.kill();
    // The pods turn unhealthy: their readiness must be published, and NATS is not there to take it.
    for (const server of servers) server.healthy = false;
    await eventually(() => expect(child.output.join('\n')).toMatch(/lost NATS/), 15_000);
    await new Promise((r) => setTimeout(r, 1_000));

    const exit = exited(child);
    child.proc.kill('SIGTERM');
    const result = await exit;
    expect(result, child.output.slice(-20).join('\n')).toEqual({ code: 0, signal: null });
    expect(child.output.join('\n')).toContain('SIGTERM, stopping');
    // The publishes failed when the sink closed, not after retrying for a server that is gone.
    expect(child.output.join('\n')).not.toMatch(/readiness publish failed.*"error":"timeout"|"error":"timeout".*readiness publish failed/);
  });

  it('exits 0 after one SIGTERM when NATS was never reached (still connecting)', async () => {
    const file = join(mkdtempSync(join(tmpdir(), 'spillway-shutdown-')), 'endpoints.yaml');
    writeFileSync(file, `- { pod: m0, address: "${servers[0]!.address}" }`);
    servers[0]!.healthy = true;
    const port = await freePort();
    const child = (collector = spawnCollector([
      '--pool',
      'llama',
      '--zone',
      'zone-a',
      '--endpoints',
      file,
      '--nats',
      `nats://127.0.0.1:${port}`,
    ]));
    // The pod is probed and its readiness queued: a publish that can only wait for a connection.
    await eventually(() => expect(child.output.join('\n')).toMatch(/"probe":"up"/), 15_000);
    const exit = exited(child);
    child.proc.kill('SIGTERM');
    expect(await exit, child.output.slice(-20).join('\n')).toEqual({ code: 0, signal: null });
  });
});
