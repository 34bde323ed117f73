import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { jetstreamManager } from '@nats-io/jetstream';
import { ensureStream } from '@spillway/bus';
import { decodeStateBatch, encodeStateBatch, statePoolFilter, stateSubjectFor } from '@spillway/events';
import { ServingStatus } from '@spillway/protocol';
import { eventually, freePort, healthStatus, POOL, type PodSpec, type TestPublisher } from '@spillway/testkit';

/** The child processes of the ext_proc bench: spillway-epp (built binary), the bare server, the pod publisher. */

const here = dirname(fileURLToPath(import.meta.url));
const root = join(here, '..', '..', '..');
export const EPP_BIN = join(root, 'services', 'epp', 'bin', 'spillway-epp.js');
const EPP_MAIN = join(root, 'services', 'epp', 'dist', 'main.js');
const BARE_SERVER = join(here, 'bare-server.ts');

export interface Child {
  readonly name: string;
  readonly process: ChildProcess;
  readonly pid: number | undefined;
  /** The last few KB of its stdout and stderr, for error messages. */
  output(): string;
  stop(): Promise<void>;
}

function track(name: string, child: ChildProcess): Child {
  let output = '';
  const keep = (c: Buffer): void => {
    output = (output + c.toString()).slice(-8000);
  };
  child.stdout?.on('data', keep);
  child.stderr?.on('data', keep);
  // Should the bench process die without running its finally blocks, take the child with it.
  const killOnExit = (): void => {
    child.kill('SIGKILL');
  };
  process.once('exit', killOnExit);
  const exited = new Promise<void>((resolve) => {
    const done = (): void => {
      process.off('exit', killOnExit);
      resolve();
    };
    if (child.exitCode !== null || child.signalCode !== null) done();
    else child.once('exit', done);
  });
  return {
    name,
    process: child,
    pid: child.pid,
    output: () => output,
    /** SIGTERM (so a --cpu-prof profile gets written), SIGKILL after 5 s. */
    async stop() {
      if (child.exitCode !== null || child.signalCode !== null) return;
      child.kill('SIGTERM');
      const timer = setTimeout(() => child.kill('SIGKILL'), 5_000);
      await exited;
      clearTimeout(timer);
    },
  };
}

/** Extra node flags for the servers, e.g. `--cpu-prof --cpu-prof-dir DIR` from SPILLWAY_BENCH_NODE_FLAGS. */
function nodeFlags(): string[] {
  return (process.env['SPILLWAY_BENCH_NODE_FLAGS'] ?? '').split(/\s+/).filter((f) => f.length > 0);
}

/**
 * The config every bench EPP runs with: flow control off. The benches send each exchange's messages
 * pre-encoded, response headers included, without waiting for the EPP's answer (as h2load must); a
 * request the EPP holds cannot take response headers before it is routed (Envoy never sends them
 * then), so a held request would end as a protocol violation rather than be measured. Holding is
 * its own path, measured by the `flow` part; these parts measure the routed one.
 */
let benchConfig: string | undefined;
function benchConfigArgs(): string[] {
  if (benchConfig === undefined) {
    benchConfig = join(mkdtempSync(join(tmpdir(), 'spillway-bench-epp-')), 'config.yaml');
    writeFileSync(benchConfig, 'flowControl: { enabled: false }\n');
  }
  return ['--config', benchConfig];
}

export interface RunningEppChild extends Child {
  grpcPort: number;
  metricsPort: number;
}

/**
 * Starts the built spillway-epp (with `extraArgs`) and waits until its gRPC health says readiness
 * SERVING. `checkout` runs the binary of another built checkout of the repository instead.
 */
export async function startEppChild(natsUrl: string, zone: string, extraArgs: string[] = [], checkout?: string): Promise<RunningEppChild> {
  const bin = checkout === undefined ? EPP_BIN : join(checkout, 'services', 'epp', 'bin', 'spillway-epp.js');
  const main = checkout === undefined ? EPP_MAIN : join(checkout, 'services', 'epp', 'dist', 'main.js');
  if (!existsSync(main)) throw new Error(`${main} is missing: build first (npm run build, or npx tsc -b services/epp)`);
  const [grpcPort, healthPort, metricsPort] = [await freePort(), await freePort(), await freePort()];
  const args = [
    ...nodeFlags(),
    bin,
    '--pool',
    POOL,
    '--zone',
    zone,
    '--nats',
    natsUrl,
    '--host',
    '127.0.0.1',
    '--grpc-port',
    String(grpcPort),
    '--health-port',
    String(healthPort),
    '--metrics-port',
    String(metricsPort),
    '--log-level',
    'warn',
    ...benchConfigArgs(),
    ...extraArgs,
  ];
  const child = track('spillway-epp', spawn(process.execPath, args, { stdio: ['ignore', 'pipe', 'pipe'] }));
  try {
    await eventually(
      async () => {
        if (child.process.exitCode !== null) throw new Error(`spillway-epp exited with ${child.process.exitCode}: ${child.output()}`);
        const status = await healthStatus(healthPort, 'readiness');
        if (status !== ServingStatus.SERVING) throw new Error(`spillway-epp readiness is ${String(status)} after 30 s: ${child.output()}`);
      },
      30_000,
      100,
    );
  } catch (error) {
    await child.stop();
    throw error;
  }
  return { ...child, grpcPort, metricsPort };
}

export interface RunningBare extends Child {
  port: number;
}

export async function startBareServer(): Promise<RunningBare> {
  const args = [...nodeFlags(), '--conditions=@spillway/source', '--import', 'tsx', BARE_SERVER];
  const spawned = spawn(process.execPath, args, { cwd: root, stdio: ['ignore', 'pipe', 'pipe'] });
  const child = track('bare ext_proc server', spawned);
  try {
    const port = await new Promise<number>((resolve, reject) => {
      // Node flags such as --trace-gc also write to stdout: look for the one line that names the port.
      let text = '';
      spawned.stdout.on('data', (c: Buffer) => {
        text += c.toString();
        const match = /^\{"port":(\d+)\}$/m.exec(text);
        if (match) resolve(Number(match[1]));
      });
      spawned.once('exit', (code) => reject(new Error(`bare ext_proc server exited with ${code}: ${child.output()}`)));
    });
    return { ...child, port };
  } catch (error) {
    await child.stop();
    throw error;
  }
}

/** One unlabelled counter from the EPP's /metrics (0 when absent). */
export async function eppCounter(metricsPort: number, name: string): Promise<number> {
  const text = await (await fetch(`http://127.0.0.1:${metricsPort}/metrics`)).text();
  const match = new RegExp(`^${name} (\\S+)$`, 'm').exec(text);
  return match ? Number(match[1]) : 0;
}

/** spillway_requests_total by outcome, from the EPP's /metrics. */
export async function eppOutcomes(metricsPort: number): Promise<Map<string, number>> {
  const text = await (await fetch(`http://127.0.0.1:${metricsPort}/metrics`)).text();
  const outcomes = new Map<string, number>();
  for (const match of text.matchAll(/^spillway_requests_total\{[^}]*outcome="([^"]+)"[^}]*\} (\S+)$/gm)) {
    outcomes.set(match[1] as string, Number(match[2]));
  }
  return outcomes;
}

/**
 * A pool of pods over three zones, published once (readiness + metrics) and then kept fresh with a
 * new metrics sample per pod every `intervalMs`, load figures varying a little, as a collector would.
 */
export function podPool(count: number, zones: string[]): PodSpec[] {
  return Array.from({ length: count }, (_, i) => ({
    pod: `vllm-${i}`,
    zone: zones[i % zones.length] as string,
    region: 'region-1',
    address: `10.${zones.indexOf(zones[i % zones.length] as string)}.${i >> 8}.${i & 255}:8000`,
  }));
}

export async function keepPodsFresh(publisher: TestPublisher, pods: PodSpec[], intervalMs: number): Promise<() => void> {
  const sample = (spec: PodSpec): PodSpec => ({
    ...spec,
    waiting: Math.floor(Math.random() * 3),
    running: Math.floor(Math.random() * 24),
    kv: 0.1 + Math.random() * 0.5,
  });
  // The stream is provisioned first, as a deployment does; the EPP then replays it.
  await ensureStream(await jetstreamManager(publisher.nc), { name: 'SPILLWAY' });
  await publisher.pods(pods.map(sample));
  const timer = setInterval(() => {
    const now = Date.now();
    for (const spec of pods) publisher.metrics(sample(spec), now);
  }, intervalMs);
  return () => clearInterval(timer);
}

/**
 * A peer EPP as busy as the one measured: every state batch another EPP of the pool publishes comes
 * back to it as this peer's, with the same entries, so the measured EPP takes in as many entries as
 * it sends out (a two-EPP zone, each taking the other's picks). Returns how many batches it echoed.
 */
export function mirrorPeer(publisher: TestPublisher, zone: string): { echoed: () => number } {
  const mirror = { pool: POOL, zone, epp: 'bench-mirror' };
  let seq = 0;
  publisher.nc.subscribe(statePoolFilter(POOL), {
    callback: (_error, msg) => {
      const decoded = decodeStateBatch(msg.data);
      if (!decoded.ok || decoded.batch.epp === mirror.epp) return;
      publisher.nc.publish(stateSubjectFor(mirror), encodeStateBatch({ ...decoded.batch, ...mirror, seq: ++seq, sentAt: Date.now() }));
    },
  });
  return { echoed: () => seq };
}
