import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { jetstreamManager } from '@nats-io/jetstream';
import { connectNats, ensureStream, EventPublisher } from '@spillway/bus';
import { ServingStatus } from '@spillway/protocol';
import { freePort, healthStatus, startNatsServer } from '@spillway/testkit';
import { childPublisher, publishPool, waitStored } from './events.js';
import { markdownTable, median, type BenchContext, type BenchPart } from './part.js';

/**
 * Scale: the built `spillway-epp` against a private nats-server whose stream holds 10,000 pods
 * (readiness + metrics, 20,000 messages). Measures the time from process start to SERVING, with
 * its steps from the EPP's own log lines (same host clock), next to a bare `node` start; then the
 * EPP's resident memory and heap once caught up, and after a period of live metrics.
 */
export const scale: BenchPart = {
  name: 'scale',
  title: 'Scale: 10,000 pods, start to SERVING and memory (spillway-epp binary)',
  run,
};

const root = join(dirname(fileURLToPath(import.meta.url)), '..', '..');
const EPP_BIN = join(root, 'services', 'epp', 'bin', 'spillway-epp.js');
const EPP_MAIN = join(root, 'services', 'epp', 'dist', 'main.js');
const POOL = 'scale';
const PODS = 10_000;
/** Live metrics rate: every pod sampled once a second (10,000 msgs/s, the lag test's rate). */
const LIVE_RATE = 10_000;
const START_TARGET_MS = 1_000;
const RSS_TARGET_MB = 150;
const MB = 2 ** 20;

/** The log lines that mark the steps of a start, in order. */
const STEPS = ['starting', 'listening', 'connected to NATS', 'replay caught up', 'ready'] as const;
type Step = (typeof STEPS)[number];

interface EppProcess {
  child: ChildProcess;
  pid: number;
  metricsPort: number;
  healthPort: number;
  spawnedAt: number;
  /** When each step's log line was written (ms, the EPP's clock: the same host clock as ours). */
  steps: Map<Step, number>;
  readyLine: Promise<void>;
  output(): string;
  stop(): Promise<void>;
}

async function startEpp(natsUrl: string): Promise<EppProcess> {
  if (!existsSync(EPP_MAIN)) throw new Error(`${EPP_MAIN} is missing: build first (npm run build)`);
  const [grpcPort, healthPort, metricsPort] = [await freePort(), await freePort(), await freePort()];
  // SPILLWAY_BENCH_NODE_FLAGS, e.g. `--cpu-prof --cpu-prof-dir DIR`, to profile the start.
  const nodeFlags = (process.env['SPILLWAY_BENCH_NODE_FLAGS'] ?? '').split(/\s+/).filter((flag) => flag.length > 0);
  const args = [
    ...nodeFlags,
    EPP_BIN,
    ...['--pool', POOL, '--zone', 'zone-a', '--region', 'r1', '--nats', natsUrl, '--host', '127.0.0.1'],
    ...['--grpc-port', String(grpcPort), '--health-port', String(healthPort), '--metrics-port', String(metricsPort), '--log-level', 'info'],
  ];
  const spawnedAt = Date.now();
  const child = spawn(process.execPath, args, { stdio: ['ignore', 'pipe', 'pipe'] });
  const steps = new Map<Step, number>();
  let output = '';
  let pending = '';
  let markReady!: () => void;
  let fail!: (error: Error) => void;
  const readyLine = new Promise<void>((resolve, reject) => {
    markReady = resolve;
    fail = reject;
  });
  child.stdout.on('data', (chunk: Buffer) => {
    output = (output + chunk.toString()).slice(-8000);
    pending += chunk.toString();
    const lines = pending.split('\n');
    pending = lines.pop() ?? '';
    for (const line of lines) {
      let entry: { msg?: string; time?: number };
      try {
        entry = JSON.parse(line) as { msg?: string; time?: number };
      } catch {
        continue;
      }
      const step = STEPS.find((s) => s === entry.msg);
      if (step !== undefined && typeof entry.time === 'number' && !steps.has(step)) steps.set(step, entry.time);
      if (step === 'ready') markReady();
    }
  });
  child.stderr.on('data', (chunk: Buffer) => (output = (output + chunk.toString()).slice(-8000)));
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  void exited.then(() => fail(new Error(`spillway-epp exited before ready: ${output}`)));
  const killOnExit = (): void => void child.kill('SIGKILL');
  process.once('exit', killOnExit);
  return {
    child,
    pid: child.pid as number,
    metricsPort,
    healthPort,
    spawnedAt,
    steps,
    readyLine,
    output: () => output,
    async stop() {
      process.off('exit', killOnExit);
      if (child.exitCode !== null || child.signalCode !== null) return;
      child.kill('SIGTERM');
      const timer = setTimeout(() => child.kill('SIGKILL'), 5_000);
      await exited;
      clearTimeout(timer);
    },
  };
}

/** A bare `node -e 0`: what starting any Node process costs on this machine, spawn to exit. */
async function bareNodeMs(): Promise<number> {
  const started = Date.now();
  await new Promise<void>((resolve, reject) => {
    const child = spawn(process.execPath, ['-e', '0'], { stdio: 'ignore' });
    child.once('error', reject);
    child.once('exit', () => resolve());
  });
  return Date.now() - started;
}

/** Resident set now and at its peak (VmRSS, VmHWM), bytes. */
function rssOf(pid: number): { rss: number; peak: number } {
  const status = readFileSync(`/proc/${pid}/status`, 'utf8');
  const kb = (field: string) => Number(new RegExp(`^${field}:\\s+(\\d+) kB`, 'm').exec(status)?.[1] ?? Number.NaN) * 1024;
  return { rss: kb('VmRSS'), peak: kb('VmHWM') };
}

/** CPU the process has used (user + system), ms; clock ticks are 1/100 s on Linux. */
function cpuMsOf(pid: number): number {
  const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]?.split(' ') ?? [];
  return (Number(fields[11]) + Number(fields[12])) * 10;
}

/** A few samples from the EPP's own /metrics: heap, and events applied to its view. */
async function eppMetrics(port: number): Promise<{ heapUsed: number; heapTotal: number; applied: number }> {
  const text = await (await fetch(`http://127.0.0.1:${port}/metrics`)).text();
  const value = (pattern: RegExp) => Number(pattern.exec(text)?.[1] ?? Number.NaN);
  return {
    heapUsed: value(/^nodejs_heap_size_used_bytes (\S+)$/m),
    heapTotal: value(/^nodejs_heap_size_total_bytes (\S+)$/m),
    applied: value(/^spillway_events_total\{result="applied"\} (\S+)$/m),
  };
}

interface Start {
  totalMs: number;
  /** ms from spawn to each step's log line. */
  steps: Map<Step, number>;
  rss: number;
  heapUsed: number;
}

async function measureStart(natsUrl: string): Promise<{ start: Start; epp: EppProcess }> {
  const epp = await startEpp(natsUrl);
  try {
    await Promise.race([
      epp.readyLine,
      new Promise((_, reject) => setTimeout(() => reject(new Error(`spillway-epp not ready after 60 s: ${epp.output()}`)), 60_000)),
    ]);
    // The log line says ready; both probes must agree.
    const readyz = await fetch(`http://127.0.0.1:${epp.metricsPort}/readyz`);
    if (readyz.status !== 200) throw new Error(`ready logged but /readyz answers ${readyz.status}`);
    if ((await healthStatus(epp.healthPort, 'readiness')) !== ServingStatus.SERVING)
      throw new Error('ready logged but gRPC health readiness is not SERVING');
    const metrics = await eppMetrics(epp.metricsPort);
    const steps = new Map([...epp.steps].map(([step, at]) => [step, at - epp.spawnedAt] as const));
    return { start: { totalMs: steps.get('ready') as number, steps, rss: rssOf(epp.pid).rss, heapUsed: metrics.heapUsed }, epp };
  } catch (error) {
    await epp.stop();
    throw error;
  }
}

async function run(context: BenchContext): Promise<string> {
  const starts = context.quick ? 1 : 3;
  const liveSeconds = context.quick ? 5 : 60;
  const server = await startNatsServer({ forcePrivate: true });
  const nc = await connectNats({ servers: [server.url] });
  let epp: EppProcess | undefined;
  try {
    const jsm = await jetstreamManager(nc);
    await ensureStream(jsm);
    context.log(`publishing ${PODS} pods (readiness acked + metrics core)`);
    await publishPool(new EventPublisher(nc), POOL, PODS);
    await waitStored(jsm, PODS * 2);

    const bare: number[] = [];
    const results: Start[] = [];
    for (let i = 0; i < starts; i++) {
      bare.push(await bareNodeMs());
      const measured = await measureStart(server.url);
      results.push(measured.start);
      context.log(
        `start ${i + 1}: SERVING after ${measured.start.totalMs} ms, RSS ${(measured.start.rss / MB).toFixed(0)} MB (bare node ${bare.at(-1)} ms)`,
      );
      if (i < starts - 1) await measured.epp.stop();
      else epp = measured.epp;
    }
    const running = epp as EppProcess;
    const caughtUp = results.at(-1) as Start;
    const caughtUpApplied = (await eppMetrics(running.metricsPort)).applied;

    context.log(`live: ${LIVE_RATE} metrics/s over ${PODS} pods for ${liveSeconds} s`);
    let maxRss = 0;
    const sampler = setInterval(() => {
      maxRss = Math.max(maxRss, rssOf(running.pid).rss);
    }, 1_000);
    const cpuBefore = cpuMsOf(running.pid);
    const published = await childPublisher(server.url, POOL, PODS, LIVE_RATE * liveSeconds, LIVE_RATE);
    await new Promise((r) => setTimeout(r, 1_000));
    clearInterval(sampler);
    const cpuMs = cpuMsOf(running.pid) - cpuBefore;
    const after = await eppMetrics(running.metricsPort);
    const afterRss = rssOf(running.pid);
    maxRss = Math.max(maxRss, afterRss.rss);
    const liveApplied = after.applied - caughtUpApplied;
    if (!(liveApplied > 0)) throw new Error(`the EPP applied no live metrics: ${running.output()}`);

    const startMs = median(results.map((r) => r.totalMs));
    const step = (name: Step) => `${median(results.map((r) => r.steps.get(name) ?? Number.NaN)).toFixed(0)} ms`;
    const worstRss = Math.max(maxRss, afterRss.peak, ...results.map((r) => r.rss));
    const quiet = context.quiet.quiet;
    const verdict = (met: boolean) => `${met ? 'MET' : 'NOT MET'}${quiet ? '' : ' (machine not quiet: provisional)'}`;

    const targets = markdownTable(
      ['target', 'measured', 'result'],
      [
        [
          `10,000-pod start to SERVING < ${START_TARGET_MS / 1000} s`,
          `${startMs} ms (median of ${starts}; bare \`node\` start ${median(bare)} ms)`,
          verdict(startMs < START_TARGET_MS),
        ],
        [
          `EPP RSS at 10,000 pods < ${RSS_TARGET_MB} MB`,
          `${(worstRss / MB).toFixed(0)} MB at most (peak VmHWM ${(afterRss.peak / MB).toFixed(0)} MB)`,
          verdict(worstRss < RSS_TARGET_MB * MB),
        ],
      ],
    );
    const stepsTable = markdownTable(
      ["step (the EPP's log line)", 'ms after spawn (median)'],
      [
        ['`starting` (Node up, modules loaded, config read)', step('starting')],
        ['`listening` (gRPC, health and metrics servers bound)', step('listening')],
        ['`connected to NATS`', step('connected to NATS')],
        ['`replay caught up` (20,000 messages decoded and applied)', step('replay caught up')],
        ['`ready` (health readiness SERVING; /readyz 200)', step('ready')],
      ],
    );
    const memoryTable = markdownTable(
      ['when', 'RSS', 'heap used / total'],
      [
        ['caught up (10,000 pods)', `${(caughtUp.rss / MB).toFixed(0)} MB`, `${(caughtUp.heapUsed / MB).toFixed(0)} MB`],
        [
          `after ${liveSeconds} s of live metrics (${LIVE_RATE.toLocaleString('en-US')}/s; ${liveApplied.toLocaleString('en-US')} applied; ${((cpuMs * 1000) / Math.max(1, liveApplied)).toFixed(1)} µs EPP CPU per message)`,
          `${(afterRss.rss / MB).toFixed(0)} MB (${(maxRss / MB).toFixed(0)} MB at most)`,
          `${(after.heapUsed / MB).toFixed(0)} / ${(after.heapTotal / MB).toFixed(0)} MB`,
        ],
      ],
    );
    return [
      `## ${scale.title}`,
      '',
      targets,
      '',
      `The built \`spillway-epp\` (default flags but ports, \`--log-level info\`) against a private nats-server`,
      `2.9 whose stream holds ${PODS.toLocaleString('en-US')} pods of one pool over three zones (readiness + metrics, ${(PODS * 2).toLocaleString('en-US')}`,
      "messages). Start to SERVING runs from `spawn()` to the EPP's `ready` log line (both on this host's",
      'clock); /readyz and gRPC health are checked to agree. The baseline is a bare `node -e 0`, spawn to exit:',
      "what any Node process costs to start here. RSS is /proc's VmRSS (sampled every second while live),",
      `heap is the EPP's own \`nodejs_heap_size_*\` metrics. Live metrics come from a child process at`,
      `${LIVE_RATE.toLocaleString('en-US')}/s (every pod once a second; the default 100 ms sample interval over 10,000 pods would be`,
      `100,000/s, more than one stream on this machine carries); the publisher sent them in ${published.seconds.toFixed(0)} s.`,
      '',
      stepsTable,
      '',
      memoryTable,
    ].join('\n');
  } finally {
    await epp?.stop();
    await nc.close();
    await server.stop();
  }
}
