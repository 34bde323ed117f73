import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { constants, mkdirSync, mkdtempSync, renameSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { open } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { jetstreamManager } from '@nats-io/jetstream';
import { ensureStream } from '@spillway/bus';
import { startNatsServer, eventually, type NatsServerHandle } from '@spillway/testkit';
import { loadEppConfig, startEpp, type RunningEpp } from '@spillway/epp';
import {
  EnvoyStream,
  POOL,
  TestPublisher,
  capturingLogger,
  completion,
  destinationOf,
  envoyRequestMessages,
  extProcClient,
  streamedBodyOf,
  type PodSpec,
} from './helpers.js';

// Live config: the EPP watches its config file and puts each valid new version in force between
// picks, without a restart; a bad version is rejected, counted and logged, and the old one kept.
const PODS: PodSpec[] = [
  // zone-a has a backlog (200 ms at the default rate); zone-b is idle, 1 ms + the zone bias away.
  { pod: 'a0', zone: 'zone-a', region: 'r1', address: '10.0.1.1:8000', waiting: 2 },
  { pod: 'b0', zone: 'zone-b', region: 'r1', address: '10.0.2.1:8000' },
];

let nats: NatsServerHandle;
let publisher: TestPublisher;
const dirs: string[] = [];

beforeAll(async () => {
  nats = await startNatsServer({ forcePrivate: true });
  publisher = await TestPublisher.connect(nats.url);
  await ensureStream(await jetstreamManager(publisher.nc), { name: 'SPILLWAY' });
  await publisher.pods(PODS);
});

afterAll(async () => {
  await publisher?.close();
  await nats?.stop();
  for (const dir of dirs) rmSync(dir, { recursive: true, force: true });
});

const sha256 = (text: string) => createHash('sha256').update(text).digest('hex');

/**
 * A directory laid out as the kubelet mounts a ConfigMap: `config.yaml -> ..data/config.yaml`,
 * `..data -> ..<version>`; an update writes a new `..<version>` directory and swaps `..data` by
 * renaming a fresh symlink over it, so `config.yaml` itself never changes.
 */
class ConfigMapDir {
  readonly dir = mkdtempSync(join(tmpdir(), 'spillway-configmap-'));
  readonly path = join(this.dir, 'config.yaml');
  private version = 0;

  constructor(text: string) {
    dirs.push(this.dir);
    this.write(text);
    symlinkSync('..data/config.yaml', this.path);
  }

  update(text: string): void {
    this.write(text);
  }

  private write(text: string): void {
    const name = `..v${++this.version}`;
    mkdirSync(join(this.dir, name));
    writeFileSync(join(this.dir, name, 'config.yaml'), text);
    symlinkSync(name, join(this.dir, '..data_tmp'));
    renameSync(join(this.dir, '..data_tmp'), join(this.dir, '..data'));
  }
}

async function start(configPath: string, args: string[], env: NodeJS.ProcessEnv = {}, pollMs = 60_000) {
  const { logger, lines } = capturingLogger();
  const config = loadEppConfig(
    [
      '--pool',
      POOL,
      '--zone',
      'zone-a',
      '--region',
      'r1',
      '--nats',
      nats.url,
      '--host',
      '127.0.0.1',
      '--grpc-port',
      '0',
      '--health-port',
      '0',
      '--metrics-port',
      '0',
      '--config',
      configPath,
      ...args,
    ],
    env,
  );
  if (!config) throw new Error('unexpected --help');
  // A long poll: changes must be noticed by watching the directory.
  const epp = await startEpp(config, { logger, tickMs: 50, configPollMs: pollMs });
  await epp.ready;
  await eventually(() => expect(epp.core.fleet.pool(POOL)?.readyCount).toBe(2));
  return { epp, lines };
}

/** One request through the EPP as Envoy sends it; the destination list and the body forwarded. */
async function pick(epp: RunningEpp): Promise<{ destination: string[]; model: string }> {
  // Two samples with the queue: a backlog, not requests caught between two steps.
  for (let i = 0; i < 2; i++) {
    for (const pod of PODS) publisher.metrics(pod);
    await new Promise((r) => setTimeout(r, 5));
  }
  await publisher.nc.flush();
  const client = extProcClient(epp.grpcPort);
  const stream = new EnvoyStream(client);
  try {
    stream.send(envoyRequestMessages({ body: completion('llama') }));
    const responses = await stream.waitFor(2);
    const body = streamedBodyOf(responses).body;
    return { destination: destinationOf(responses[0]).header?.split(',') ?? [], model: (JSON.parse(body) as { model: string }).model };
  } finally {
    stream.close();
    client.close();
  }
}

async function scrape(epp: RunningEpp): Promise<string> {
  return (await fetch(`http://127.0.0.1:${epp.metricsPort}/metrics`)).text();
}

const V1 = 'zoneBiasMs: 8\nmaxEndpoints: 3\n';
const V2 = [
  'zoneBiasMs: 1000', // the backlog at home is now cheaper than leaving the zone
  'maxEndpoints: 1', // given by flag (--max-endpoints 2): not taken from the file
  'policy: weighted', // given by environment (SPILLWAY_POLICY=cost): not taken either
  'objectives: { batch: { priority: -1 } }',
  'modelRewrites:',
  '  - match: llama',
  '    targets: [{ model: llama-v2 }]',
  '',
].join('\n');

describe('live config', () => {
  it('applies a ConfigMap symlink swap without a restart, visible in the next pick; flags and environment still win', async () => {
    const file = new ConfigMapDir(V1);
    const { epp, lines } = await start(file.path, ['--max-endpoints', '2'], { SPILLWAY_POLICY: 'cost' });
    try {
      expect(await scrape(epp)).toContain(`spillway_config_info{hash="${sha256(V1)}"} 1`);
      const before = await pick(epp);
      expect(before.destination).toEqual(['10.0.2.1:8000', '10.0.1.1:8000']);
      expect(before.model).toBe('llama');

      file.update(V2);
      await eventually(async () => expect(await scrape(epp)).toContain(`spillway_config_info{hash="${sha256(V2)}"} 1`));
      const after = await pick(epp);
      // zoneBiasMs 1000: the request stays home; maxEndpoints stays the flag's 2; the rewrite applies.
      expect(after.destination).toEqual(['10.0.1.1:8000', '10.0.2.1:8000']);
      expect(after.model).toBe('llama-v2');
      expect(epp.core.scheduler.config.policy).toBe('cost');
      expect(epp.core.scheduler.config.maxEndpoints).toBe(2);
      expect(epp.core.scheduler.priorityOf('batch')).toBe(-1);
      const metrics = await scrape(epp);
      expect(metrics).toContain('spillway_config_reloads_total{result="applied"} 1');
      expect(metrics).toContain('spillway_config_last_reload_successful 1');
      expect(metrics).not.toContain(sha256(V1));
      expect(lines.filter((l) => l['msg'] === 'config reloaded')).toHaveLength(1);
    } finally {
      await epp.close();
    }
  });

  it('rejects an invalid version (counted, logged once, never crashing) and keeps the running config', async () => {
    const file = new ConfigMapDir(V2);
    const { epp, lines } = await start(file.path, []);
    try {
      expect((await pick(epp)).destination[0]).toBe('10.0.1.1:8000');
      // Out of range, then not YAML at all, then an unknown field: each rejected whole.
      const bad = ['zoneBiasMs: -5\nmaxEndpoints: 1\n', 'zoneBiasMs: [\n', 'zoneBiasMs: 8\nzoneBias: 8\n'];
      for (const [i, text] of bad.entries()) {
        file.update(text);
        await eventually(async () => expect(await scrape(epp)).toContain(`spillway_config_reloads_total{result="rejected"} ${i + 1}`));
      }
      let metrics = await scrape(epp);
      expect(metrics).toContain('spillway_config_last_reload_successful 0');
      expect(metrics).toContain(`spillway_config_info{hash="${sha256(V2)}"} 1`);
      expect(metrics).toContain('spillway_config_reloads_total{result="applied"} 0');
      // Still V2: zone bias 1000, the rewrite, three entries.
      const still = await pick(epp);
      expect(still.destination[0]).toBe('10.0.1.1:8000');
      expect(still.model).toBe('llama-v2');
      const rejected = lines.filter((l) => l['msg'] === 'config change rejected; keeping the running config');
      expect(rejected).toHaveLength(3);
      expect(String(rejected[0]?.['error'])).toMatch(/zoneBiasMs/);
      expect(String(rejected[2]?.['error'])).toMatch(/zoneBias/);

      // The good version back: the file is what runs again; nothing is applied twice.
      file.update(V2);
      await eventually(async () => expect(await scrape(epp)).toContain('spillway_config_last_reload_successful 1'));
      metrics = await scrape(epp);
      expect(metrics).toContain('spillway_config_reloads_total{result="applied"} 0');
      expect(metrics).toContain('spillway_config_reloads_total{result="rejected"} 3');
    } finally {
      await epp.close();
    }
  });

  it('re-reads a plain file replaced in place, and warns about fields that need a restart', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'spillway-config-'));
    dirs.push(dir);
    const path = join(dir, 'epp.yaml');
    writeFileSync(path, V1);
    const { epp, lines } = await start(path, []);
    try {
      // An editor's atomic save: write elsewhere, rename over the file.
      writeFileSync(join(dir, 'epp.yaml.tmp'), `${V2}maxBodyBytes: 1000\n`);
      renameSync(join(dir, 'epp.yaml.tmp'), path);
      await eventually(() => expect(lines.some((l) => l['msg'] === 'config reloaded')).toBe(true));
      const warning = lines.find((l) => String(l['msg']).startsWith('config changes that take effect only after a restart'));
      expect(warning?.['flags']).toEqual(['--max-body-bytes']);
      expect((await pick(epp)).model).toBe('llama-v2');
      // The policy from the file applies here (no flag or environment sets it).
      expect(epp.core.scheduler.config.policy).toBe('weighted');
    } finally {
      await epp.close();
    }
  });

  it('names sharedState and tokenizers changes in the restart warning (they are read at start only)', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'spillway-config-'));
    dirs.push(dir);
    const path = join(dir, 'epp.yaml');
    writeFileSync(path, `${V1}sharedState: { batchMs: 5 }\n`);
    const { epp, lines } = await start(path, []);
    try {
      writeFileSync(
        join(dir, 'epp.yaml.tmp'),
        `${V1}sharedState: { batchMs: 20, heartbeatMs: 500 }\ntokenizers: { llama: { preset: qwen3 } }\n`,
      );
      renameSync(join(dir, 'epp.yaml.tmp'), path);
      await eventually(() => expect(lines.some((l) => l['msg'] === 'config reloaded')).toBe(true));
      const warning = lines.find((l) => String(l['msg']).startsWith('config changes that take effect only after a restart'));
      expect(warning?.['flags']).toEqual([]);
      expect(warning?.['fields']).toEqual(['sharedState.batchMs', 'sharedState.heartbeatMs', 'tokenizers.llama']);
    } finally {
      await epp.close();
    }
  });

  it('reads at most 1 MiB of a new version, however much the file holds (a FIFO fed 32 MiB is cut off)', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'spillway-config-'));
    dirs.push(dir);
    const path = join(dir, 'epp.yaml');
    writeFileSync(path, V1);
    const { epp, lines } = await start(path, []);
    // The file becomes a FIFO: what the EPP reads is what this test writes, and it sees when reading stops.
    execFileSync('mkfifo', [join(dir, 'fifo')]);
    renameSync(join(dir, 'fifo'), path);
    let written = 0;
    try {
      const fifo = await open(path, 'w');
      const chunk = Buffer.alloc(64 * 1024, 'a');
      try {
        while (written < 32 * 1024 * 1024) written += (await fifo.write(chunk)).bytesWritten;
      } catch (error) {
        // EPIPE: the EPP stopped reading and closed its end.
        expect((error as NodeJS.ErrnoException).code).toBe('EPIPE');
      } finally {
        await fifo.close();
      }
      expect(written).toBeLessThan(4 * 1024 * 1024);
      await eventually(async () => expect(await scrape(epp)).toContain('spillway_config_reloads_total{result="rejected"} 1'));
      const rejected = lines.find((l) => l['msg'] === 'config change rejected; keeping the running config');
      expect(String(rejected?.['error'])).toMatch(/larger than 1048576 bytes/);
      expect(epp.core.scheduler.config.zoneBiasMs).toBe(8);
    } finally {
      await epp.close();
      // A read the watcher may still have waiting on the FIFO ends with an empty file.
      try {
        (await open(path, constants.O_WRONLY | constants.O_NONBLOCK)).close().catch(() => undefined);
      } catch {
        // no reader waits
      }
    }
  });

  it('notices a change it was not told about by polling', async () => {
    const file = new ConfigMapDir(V1);
    const { epp } = await start(file.path, [], {}, 100);
    try {
      file.update(V2);
      await eventually(async () => expect(await scrape(epp)).toContain(`spillway_config_info{hash="${sha256(V2)}"} 1`));
    } finally {
      await epp.close();
    }
  });

  it('exports hash "none" without a config file', async () => {
    const config = loadEppConfig(
      [
        '--pool',
        POOL,
        '--zone',
        'zone-a',
        '--nats',
        nats.url,
        '--host',
        '127.0.0.1',
        '--grpc-port',
        '0',
        '--health-port',
        '0',
        '--metrics-port',
        '0',
      ],
      {},
    );
    const epp = await startEpp(config!, { logger: capturingLogger().logger });
    try {
      expect(await scrape(epp)).toContain('spillway_config_info{hash="none"} 1');
    } finally {
      await epp.close();
    }
  });
});
