/**
 * The spillway-xds binary: `--help`, bad flags and config fields exit 2 naming them, and a started
 * process follows NATS, reports SERVING on gRPC health, serves a node, and stops on SIGTERM.
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ServingStatus } from '@spillway/protocol';
import { eventually, freePort, healthStatus, startNatsServer, type NatsServerHandle } from '@spillway/testkit';
import { AdsClient, TYPE_URLS } from '../src/index.js';

const BIN = join(dirname(fileURLToPath(import.meta.url)), '..', 'bin', 'spillway-xds.js');
const DIST = join(dirname(BIN), '..', 'dist', 'main.js');
const dir = mkdtempSync(join(tmpdir(), 'spillway-xds-bin-'));

function run(args: string[], env: Record<string, string> = {}) {
  return spawnSync(process.execPath, [BIN, ...args], { encoding: 'utf8', env: { ...process.env, ...env }, timeout: 20_000 });
}

let nats: NatsServerHandle;
let child: ChildProcess | undefined;

beforeAll(async () => {
  if (!existsSync(DIST)) throw new Error(`${DIST} is missing: run \`npm run build\` first`);
  nats = await startNatsServer();
});

afterAll(async () => {
  child?.kill('SIGKILL');
  await nats?.stop();
  rmSync(dir, { recursive: true, force: true });
});

describe('spillway-xds binary', () => {
  it('prints its flags with --help', () => {
    const result = run(['--help']);
    expect(result.status).toBe(0);
    expect(result.stdout).toMatch(/^Usage: spillway-xds /);
    for (const flag of [
      '--pool',
      '--nats',
      '--stream',
      '--port',
      '--cluster-name',
      '--health-port',
      '--metrics-port',
      '--zones',
      '--max-nodes',
      '--config',
    ])
      expect(result.stdout).toContain(flag);
  });

  it.each([
    [[], /^error: --pool: .*required/],
    [['--pool', 'p', '--port', 'x'], /^error: --port:/],
    [['--pool', 'p', '--cluster-name', 'two words'], /^error: --cluster-name:/],
    [['--pool', 'p', '--max-nodes', '0'], /^error: --max-nodes:/],
    [['--pool', 'p', '--push-delay-ms', '5000'], /^error: --push-delay-ms:/],
    [['--pool', 'p', '--health-port', '9092'], /^error: --health-port: the same port as --metrics-port/],
    [['--pool', 'p', '--nats', 'http://x y'], /^error: --nats:/],
    [['--pool', 'p', '--bogus'], /^error: --bogus: unknown flag/],
    [['--pool', 'p', '--nats-creds', '/nonexistent/user.creds'], /^error: --nats-creds: cannot read/],
  ])('exits 2 naming the flag for %j', (args, message) => {
    const result = run(args);
    expect(result.status).toBe(2);
    expect(result.stderr).toMatch(message);
  });

  it('reads flags from SPILLWAY_* variables and the config file, naming a bad field', () => {
    expect(run(['--pool', 'p'], { SPILLWAY_MAX_NODES: 'many' }).stderr).toMatch(/^error: SPILLWAY_MAX_NODES:/);
    const config = join(dir, 'xds.yaml');
    writeFileSync(config, 'pool: p\nmaxNodes: 0\n');
    expect(run(['--config', config]).stderr).toMatch(/^error: --max-nodes:/);
    writeFileSync(config, 'pool: p\nmaxNode: 5\n');
    const misspelt = run(['--config', config]);
    expect(misspelt.status).toBe(2);
    expect(misspelt.stderr).toMatch(/maxNode/);
  });

  it('follows NATS, turns SERVING, serves a node and stops on SIGTERM', async () => {
    const [port, healthPort, metricsPort] = [await freePort(), await freePort(), await freePort()];
    child = spawn(
      process.execPath,
      [
        BIN,
        '--pool',
        'llama',
        '--nats',
        nats.url,
        '--host',
        '127.0.0.1',
        '--port',
        String(port),
        '--health-port',
        String(healthPort),
        '--zones',
        'zone-a',
      ],
      {
        env: { ...process.env, SPILLWAY_METRICS_PORT: String(metricsPort), SPILLWAY_LOG_LEVEL: 'warn' },
        stdio: ['ignore', 'ignore', 'pipe'],
      },
    );
    await eventually(async () => expect(await healthStatus(healthPort, 'readiness')).toBe(ServingStatus.SERVING), 20_000, 100);
    const node = new AdsClient(`127.0.0.1:${port}`, {
      node: { id: 'n', zone: 'zone-a' },
      subscriptions: [{ typeUrl: TYPE_URLS.ecds, names: ['spillway-subset-hint'] }],
    });
    await eventually(() => expect(node.acceptedVersion(TYPE_URLS.ecds)).toBeDefined());
    node.close();
    expect(await (await fetch(`http://127.0.0.1:${metricsPort}/metrics`)).text()).toContain('spillway_xds_responses_total{type="ecds"} 1');
    const exited = new Promise<number | null>((resolve) => child!.once('exit', (code) => resolve(code)));
    child.kill('SIGTERM');
    expect(await exited).toBe(0);
    child = undefined;
  }, 40_000);
});
