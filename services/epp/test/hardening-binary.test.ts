// Regression tests of the hardening review (docs/hardening.md) that need the EPP binary in its own
// process: its heap under hostile subset hints (with a small heap cap, as the review ran it), the
// size of /metrics under client-chosen model names, NATS failures at start with a prompt SIGTERM,
// and what every log line carries.
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { eventually, freePort, startNatsServer, type NatsServerHandle } from '@spillway/testkit';
import { ServingStatus } from '@spillway/protocol';
import {
  EnvoyStream,
  TestPublisher,
  bodyMessage,
  completion,
  destinationOf,
  envoyRequestMessages,
  extProcClient,
  healthStatus,
  immediateOf,
  responseHeadersMessage,
} from './helpers.js';

const BIN = join(dirname(fileURLToPath(import.meta.url)), '..', 'bin', 'spillway-epp.js');
const DIST = join(dirname(BIN), '..', 'dist', 'main.js');

interface Child {
  process: ChildProcess;
  lines: Record<string, unknown>[];
  exited: Promise<number | null>;
}

let nats: NatsServerHandle;
let authNats: NatsServerHandle;
let publisher: TestPublisher;
const children: Child[] = [];

beforeAll(async () => {
  if (!existsSync(DIST)) throw new Error(`${DIST} is missing: run \`npm run build\` first`);
  nats = await startNatsServer({ forcePrivate: true });
  authNats = await startNatsServer({ forcePrivate: true, extraConfig: 'authorization { users = [ { user: alice, password: s3cret } ] }' });
  publisher = await TestPublisher.connect(nats.url);
});

afterEach(async () => {
  for (const child of children.splice(0)) {
    if (child.process.exitCode === null && child.process.signalCode === null) child.process.kill('SIGKILL');
    await child.exited;
  }
});

afterAll(async () => {
  await publisher?.close();
  await nats?.stop();
  await authNats?.stop();
});

/** Starts the binary with its JSON log lines collected. `nodeArgs` go to node itself (heap cap). */
function startBinary(args: string[], nodeArgs: string[] = []): Child {
  const child = spawn(process.execPath, [...nodeArgs, BIN, '--pool', 'llama', '--host', '127.0.0.1', '--log-level', 'info', ...args], {
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const lines: Record<string, unknown>[] = [];
  createInterface({ input: child.stdout as NodeJS.ReadableStream }).on('line', (line) => {
    try {
      lines.push(JSON.parse(line) as Record<string, unknown>);
    } catch {
      lines.push({ raw: line });
    }
  });
  child.stderr?.resume();
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  const handle = { process: child, lines, exited };
  children.push(handle);
  return handle;
}

async function ports(): Promise<{ args: string[]; grpc: number; health: number; metrics: number }> {
  const [grpc, health, metrics] = [await freePort(), await freePort(), await freePort()];
  return { args: ['--grpc-port', String(grpc), '--health-port', String(health), '--metrics-port', String(metrics)], grpc, health, metrics };
}

async function scrape(port: number): Promise<string> {
  return (await fetch(`http://127.0.0.1:${port}/metrics`)).text();
}

function sampleValue(metrics: string, name: string): number {
  const match = new RegExp(`^${name} ([0-9.e+]+)$`, 'm').exec(metrics);
  if (!match) throw new Error(`${name} not in /metrics`);
  return Number(match[1]);
}

describe('hostile requests against the binary', () => {
  it('keeps its heap bounded under unique 100 KB and 1 MB subset entries, and /metrics small under 2,000 model names', async () => {
    const p = await ports();
    // The review's setting: 3 x 1 MB entries crashed the EPP with a 200 MB heap; this cap is smaller.
    const child = startBinary(['--zone', 'zone-x', '--nats', nats.url, '--metric-models', 'llama', ...p.args], ['--max-old-space-size=96']);
    await publisher.pods([{ pod: 'x0', zone: 'zone-x', address: '10.0.5.1:8000' }]);
    await eventually(async () => expect(await healthStatus(p.health, 'readiness')).toBe(ServingStatus.SERVING), 20_000);
    const client = extProcClient(p.grpc);
    const request = async (options: Parameters<typeof envoyRequestMessages>[0], expected: number) => {
      const stream = new EnvoyStream(client);
      stream.send(envoyRequestMessages(options));
      const responses = await stream.waitFor(expected);
      stream.close();
      return responses;
    };
    try {
      // 300 requests, each with 10 unique 100 KB entries (the review's 93 -> 336 MB), then 3 x 1 MB.
      for (let i = 0; i < 300; i++) {
        const subset = Array.from({ length: 10 }, (_, j) => `${i}-${j}-`.padEnd(100_000, 'x'));
        expect(immediateOf((await request({ body: completion(), subset }, 1))[0])?.status).toBe(503);
      }
      for (let i = 0; i < 3; i++) {
        expect(immediateOf((await request({ body: completion(), subset: [`${i}`.padEnd(1_000_000, 'y')] }, 1))[0])?.status).toBe(503);
      }
      // Client-chosen model names: 2,000 unique ones and one of 3 MB.
      for (let i = 0; i < 2_000; i++) await request({ body: completion(`model-${i}`), subset: ['10.0.5.1:8000'] }, 2);
      await request({ body: completion('m'.repeat(3_000_000)), subset: ['10.0.5.1:8000'] }, 2);
      await request({ body: completion('llama'), subset: ['10.0.5.1:8000'] }, 2);

      expect(child.process.exitCode).toBeNull();
      expect(destinationOf((await request({ body: completion(), subset: ['10.0.5.1:8000'] }, 2))[0]).header).toBe('10.0.5.1:8000');
      const metrics = await scrape(p.metrics);
      expect(sampleValue(metrics, 'nodejs_heap_size_used_bytes')).toBeLessThan(96 * 1024 * 1024);
      expect(metrics.length).toBeLessThan(64 * 1024);
      expect(metrics).not.toMatch(/model-1999|mmmmmmmm/);
      expect(metrics).toMatch(/inference_objective_request_total\{model_name="other",target_model_name="other",priority="0"\} 2001/);
      expect(metrics).toMatch(/inference_objective_request_total\{model_name="llama",target_model_name="llama",priority="0"\} 2\b/);
      expect(sampleValue(metrics, 'spillway_subset_entries_ignored_total')).toBe(3_003);
    } finally {
      client.close();
    }
    // The pool is logged once, at start, not on every line.
    child.process.kill('SIGTERM');
    expect(await child.exited).toBe(0);
    const withPool = child.lines.filter((line) => 'pool' in line);
    expect(withPool.map((line) => line['msg'])).toEqual(['starting']);
    expect(child.lines.length).toBeGreaterThan(3);
    expect(child.lines.every((line) => line['zone'] === 'zone-x')).toBe(true);
  }, 180_000);
});

describe('a gateway that stops reading the replies', () => {
  it('cannot make the EPP buffer the response body it streams back (backpressure reaches the gateway)', async () => {
    const p = await ports();
    startBinary(['--zone', 'zone-w', '--nats', nats.url, ...p.args]);
    await publisher.pods([{ pod: 'w0', zone: 'zone-w', address: '10.0.4.1:8000' }]);
    await eventually(async () => expect(await healthStatus(p.health, 'readiness')).toBe(ServingStatus.SERVING), 20_000);
    const rss = async () => sampleValue(await scrape(p.metrics), 'process_resident_memory_bytes');
    const before = await rss();
    const client = extProcClient(p.grpc);
    const stream = new EnvoyStream(client);
    try {
      stream.send(envoyRequestMessages({ body: completion(), subset: ['10.0.4.1:8000'] }));
      expect(destinationOf((await stream.waitFor(2))[0]).header).toBe('10.0.4.1:8000');
      // The gateway stops reading the EPP's replies and streams a 200 MB response body at it.
      stream.call.pause();
      stream.send([responseHeadersMessage(200, '10.0.4.1:8000')]);
      const chunk = new Uint8Array(1024 * 1024).fill(120);
      for (let i = 0; i < 200; i++) stream.call.write(bodyMessage('responseBody', chunk, false));
      // Wait until the EPP has taken all it will take: its memory stops growing.
      let last = await rss();
      await eventually(
        async () => {
          await new Promise((resolve) => setTimeout(resolve, 1_000));
          const now = await rss();
          const settled = Math.abs(now - last) < 4 * 1024 * 1024;
          last = now;
          expect(settled).toBe(true);
        },
        60_000,
        0,
      );
      // Unbounded, the EPP holds every echoed chunk it read (about 200 MB); bounded, a few.
      expect(last - before).toBeLessThan(100 * 1024 * 1024);
    } finally {
      stream.call.cancel();
      client.close();
    }
  }, 90_000);
});

describe('NATS failures at start', () => {
  it.each([
    ['a wrong password', () => ['--nats', authNats.url, '--nats-user', 'alice', '--nats-password', 'wrong'], /Authorization Violation/i],
    ['no server listening', () => ['--nats', 'nats://127.0.0.1:1'], /ECONNREFUSED|refused/i],
  ])(
    '%s: retried, each cause logged, and one SIGTERM exits at once',
    async (_name, natsArgs, cause) => {
      const p = await ports();
      const child = startBinary(['--zone', 'zone-n', ...natsArgs(), ...p.args]);
      await eventually(
        () => expect(child.lines.filter((l) => l['msg'] === 'cannot connect to NATS; retrying').length).toBeGreaterThanOrEqual(1),
        20_000,
      );
      const failure = child.lines.find((l) => l['msg'] === 'cannot connect to NATS; retrying');
      expect(String(failure?.['cause'])).toMatch(cause);
      // Serving health meanwhile, not ready: the view was never replayed.
      expect(await healthStatus(p.health, 'liveness')).toBe(ServingStatus.SERVING);
      expect(await healthStatus(p.health, 'readiness')).toBe(ServingStatus.NOT_SERVING);
      child.process.kill('SIGTERM');
      // Exit code 0 means close() finished; the binary's own 10 s guard would exit 1.
      expect(await child.exited).toBe(0);
    },
    60_000,
  );
});
