import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { eventually, freePort, startNatsServer, type NatsServerHandle } from '@spillway/testkit';
import { ServingStatus } from '@spillway/protocol';
import {
  EnvoyStream,
  TestPublisher,
  completion,
  destinationOf,
  envoyRequestMessages,
  extProcClient,
  healthStatus,
  immediateOf,
} from './helpers.js';

const BIN = join(dirname(fileURLToPath(import.meta.url)), '..', 'bin', 'spillway-epp.js');
const DIST = join(dirname(BIN), '..', 'dist', 'main.js');

function run(args: string[], env: Record<string, string> = {}) {
  return spawnSync(process.execPath, [BIN, ...args], { encoding: 'utf8', env: { ...process.env, ...env }, timeout: 20_000 });
}

let nats: NatsServerHandle;
let child: ChildProcess | undefined;
let publisher: TestPublisher;
const dir = mkdtempSync(join(tmpdir(), 'spillway-epp-bin-'));

beforeAll(async () => {
  if (!existsSync(DIST)) throw new Error(`${DIST} is missing: run \`npm run build\` first`);
  nats = await startNatsServer({ forcePrivate: true });
  publisher = await TestPublisher.connect(nats.url);
});

afterAll(async () => {
  child?.kill('SIGTERM');
  await publisher?.close();
  await nats?.stop();
});

describe('spillway-epp binary', () => {
  it('prints its flags with --help', () => {
    const result = run(['--help']);
    expect(result.status).toBe(0);
    for (const flag of [
      '--pool',
      '--zone',
      '--region',
      '--nats',
      '--stream',
      '--grpc-port',
      '--health-port',
      '--metrics-port',
      '--max-endpoints',
      '--subset-mode',
      '--config',
    ]) {
      expect(result.stdout).toContain(flag);
    }
  });

  it.each([
    [['--zone', 'a'], /--pool/],
    [['--pool', 'p', '--zone', 'a', '--grpc-port', 'x'], /--grpc-port/],
    [['--pool', 'p', '--zone', 'a', '--subset-mode', 'loose'], /--subset-mode/],
    [['--pool', 'p', '--zone', 'a', '--max-endpoints', '0'], /--max-endpoints/],
    [['--pool', 'p', '--zone', 'a', '--nats', 'http://x y'], /--nats/],
    [['--pool', 'p', '--zone', 'a', '--bogus'], /bogus/],
    // Files that do not exist: a usage error naming the flag, not a crash with a stack trace.
    [
      ['--pool', 'p', '--zone', 'a', '--tls-cert', '/nonexistent/server.crt', '--tls-key', '/nonexistent/server.key'],
      /^error: --tls-cert: cannot read \/nonexistent\/server\.crt/,
    ],
    [
      ['--pool', 'p', '--zone', 'a', '--nats-creds', '/nonexistent/user.creds'],
      /^error: --nats-creds: cannot read \/nonexistent\/user\.creds/,
    ],
    [['--pool', 'p', '--zone', 'a', '--nats-tls-ca', '/nonexistent/ca.pem'], /^error: --nats-tls-ca: cannot read/],
  ])('exits non-zero naming the bad flag: %j', (args, pattern) => {
    const result = run(args);
    expect(result.status).toBe(2);
    expect(result.stderr).toMatch(pattern);
    expect(result.stderr).not.toMatch(/^\s+at /m);
  });

  it('names the bad field of a config file, and reads flags from SPILLWAY_* variables', () => {
    const bad = join(dir, 'bad.yaml');
    writeFileSync(bad, 'kvThreshold: 1.5\nobjectives:\n  batch: { priority: "low" }\n');
    const result = run(['--pool', 'p', '--zone', 'a', '--config', bad]);
    expect(result.status).toBe(2);
    expect(result.stderr).toMatch(/bad\.yaml: .*kvThreshold/);
    const typo = join(dir, 'typo.yaml');
    writeFileSync(typo, 'crossZoneFalbacks: 2\n');
    expect(run(['--pool', 'p', '--zone', 'a', '--config', typo]).stderr).toMatch(/crossZoneFalbacks/);
    const envOnly = run([], { SPILLWAY_ZONE: 'a', SPILLWAY_GRPC_PORT: 'nope', SPILLWAY_POOL: 'p' });
    expect(envOnly.status).toBe(2);
    expect(envOnly.stderr).toMatch(/SPILLWAY_GRPC_PORT/);
  });

  it('serves Envoy over real sockets from events on NATS, with its config file applied', async () => {
    const config = join(dir, 'epp.yaml');
    writeFileSync(
      config,
      [
        'maxEndpoints: 2',
        'crossZoneFallbacks: 1',
        'objectives:',
        '  batch: { priority: -1 }',
        '  interactive: { priority: 10 }',
        'modelRewrites:',
        '  - match: llama',
        '    targets: [{ model: llama-v2, weight: 1 }]',
      ].join('\n'),
    );
    const [grpcPort, healthPort, metricsPort] = [await freePort(), await freePort(), await freePort()];
    child = spawn(
      process.execPath,
      [BIN, '--pool', 'llama', '--zone', 'zone-a', '--nats', nats.url, '--host', '127.0.0.1', '--config', config, '--log-level', 'warn'],
      {
        env: {
          ...process.env,
          SPILLWAY_GRPC_PORT: String(grpcPort),
          SPILLWAY_HEALTH_PORT: String(healthPort),
          SPILLWAY_METRICS_PORT: String(metricsPort),
        },
        stdio: 'ignore',
      },
    );
    const pods = [
      { pod: 'a0', zone: 'zone-a', address: '10.0.1.1:8000', waiting: 15 },
      { pod: 'a1', zone: 'zone-a', address: '10.0.1.2:8000', waiting: 15 },
      { pod: 'b0', zone: 'zone-b', address: '10.0.2.1:8000', waiting: 15 },
    ];
    await publisher.pods(pods);
    // A second sample with the same queues: a backlog, not requests caught between two steps.
    await new Promise((r) => setTimeout(r, 5));
    for (const pod of pods) publisher.metrics(pod);
    await eventually(async () => expect(await healthStatus(healthPort, 'readiness')).toBe(ServingStatus.SERVING), 20_000);
    const client = extProcClient(grpcPort);
    const send = async (options: Parameters<typeof envoyRequestMessages>[0], expected: number) => {
      const stream = new EnvoyStream(client);
      stream.send(envoyRequestMessages(options));
      const responses = await stream.waitFor(expected);
      stream.close();
      return responses;
    };
    // Overloaded everywhere (a backlog of 15 at the default 10 requests/s: 1.5 s, over shedAboveMs 1 s):
    // a sheddable objective gets 429; flow control (on by default) holds the others, with no endpoint
    // that has room.
    const shed = await send({ body: completion(), headers: { 'x-gateway-inference-objective': 'batch' } }, 1);
    expect(immediateOf(shed[0])?.status).toBe(429);
    const held = new EnvoyStream(client);
    held.send(envoyRequestMessages({ body: completion(), headers: { 'x-gateway-inference-objective': 'interactive' } }));
    await new Promise((r) => setTimeout(r, 300));
    expect(held.responses).toHaveLength(0);
    // Once zone-b has room, the held request goes there at once, and an overloaded zone-a spills there first; the rewrite is applied.
    await publisher.pods([{ pod: 'b0', zone: 'zone-b', address: '10.0.2.1:8000', waiting: 0 }]);
    const kept = await held.waitFor(2);
    held.close();
    expect(destinationOf(kept[0]).header?.split(',')).toHaveLength(2);
    expect(destinationOf(kept[0]).header?.split(',')[0]).toBe('10.0.2.1:8000');
    await eventually(async () => {
      const responses = await send({ body: completion('llama') }, 2);
      expect(destinationOf(responses[0]).header?.split(',')[0]).toBe('10.0.2.1:8000');
    });
    const metrics = await (await fetch(`http://127.0.0.1:${metricsPort}/metrics`)).text();
    expect(metrics).toMatch(/spillway_requests_total\{outcome="429"\} 1/);
    expect(metrics).toMatch(/spillway_flow_control_requests_total\{band="10",flow="default",outcome="dispatched"\} 1/);
    expect(metrics).toMatch(/inference_pool_ready_pods\{name="llama"\} 3/);
    expect(metrics).toMatch(/spillway_zone_ready_pods\{zone="zone-a"\} 2/);
    expect(metrics).toMatch(/inference_extension_scheduler_e2e_duration_seconds_count \d+/);
    expect(metrics).toMatch(/spillway_spills_total [1-9]/);
    expect(metrics).toMatch(/spillway_nats_connected 1/);
    client.close();
    const exited = new Promise((resolve) => child?.once('exit', resolve));
    child.kill('SIGTERM');
    expect(await exited).toBe(0);
    child = undefined;
  });
});
