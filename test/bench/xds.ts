import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { cpus, loadavg } from 'node:os';
import { dirname, join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import { jetstreamManager } from '@nats-io/jetstream';
import { connect } from '@nats-io/transport-node';
import { ensureStream, EventPublisher } from '@spillway/bus';
import type { ReadinessEvent } from '@spillway/events';
import { Fleet } from '@spillway/fleet';
import { ServingStatus } from '@spillway/protocol';
import { eventually, freePort, healthStatus, startNatsServer } from '@spillway/testkit';
import { AdsClient, placeResources, TYPE_URLS } from '@spillway/xds';
import { markdownTable, percentile, type BenchContext, type BenchPart } from './part.js';
import { PUSH_SUBJECT } from './xds/setup.js';

/**
 * `xds`: from a readiness event to the push at every connected node (docs/xds.md). N gateways (ADS
 * clients that behave as Envoy does on the wire: subscribe to EDS and ECDS, ACK every response,
 * each on its own connection) are connected to spillway-xds, run as its built binary; a pod's
 * readiness is flipped by publishing a readiness event to JetStream as a collector does, and each
 * node's latency is from just before the publish to its EDS response arriving. Baseline, same run:
 * a bare grpc-js server with the same service and codec that writes one response of the same size
 * to every stream on each core NATS message (the hop and the fan-out alone). spillway-xds runs with
 * `--push-delay-ms 0` (the cost of the path) and with its default 100 ms (what gateways get:
 * changes within the window go out as one push).
 */
export const xds: BenchPart = {
  name: 'xds',
  title: 'spillway-xds: readiness event to push at every node',
  run,
};

interface Plan {
  nodes: number[];
  events: number;
  /** Pause between events, beyond the push delay, so events do not share a push. */
  gapMs: number;
}
const FULL: Plan = { nodes: [10, 100, 1000], events: 20, gapMs: 300 };
const QUICK: Plan = { nodes: [10, 100, 1000], events: 3, gapMs: 200 };

const POOL = 'llama';
const ZONES = ['zone-a', 'zone-b', 'zone-c'];
const PODS_PER_ZONE = 10;
/** The row that is judged against the target: spillway-xds as gateways run it. */
const DEFAULT_LABEL = 'spillway-xds, default (100 ms push delay)';
/** A readiness change reaches every connected node within this long (docs/xds.md). */
const TARGET_MS = 1000;
/** A node that has not received an event's push within this long counts as missed. */
const PUSH_TIMEOUT_MS = 10_000;

const here = dirname(fileURLToPath(import.meta.url));
const root = join(here, '..', '..');
const XDS_BIN = join(root, 'services', 'xds', 'bin', 'spillway-xds.js');
const XDS_MAIN = join(root, 'services', 'xds', 'dist', 'main.js');
const BARE = join(here, 'xds', 'bare-push-server.ts');

function pod(i: number, ready: boolean, observedAt: number): ReadinessEvent {
  const zone = ZONES[i % ZONES.length] as string;
  return {
    v: 1,
    kind: 'readiness',
    pool: POOL,
    zone,
    region: zone === 'zone-c' ? 'r2' : 'r1',
    pod: `vllm-${i}`,
    address: `10.${ZONES.indexOf(zone)}.0.${i}:8000`,
    ready,
    observedAt,
  };
}

interface Target {
  label: string;
  start(natsUrl: string): Promise<{ port: number; pid: number | undefined; stop(): Promise<void> }>;
  /** Makes the server push once. */
  trigger(): Promise<unknown>;
}

interface Result {
  label: string;
  nodes: number;
  /** Every node's latency of every event, ms, sorted. */
  latencies: number[];
  /** Per event, when the last node had it, ms. */
  lastNode: number[];
  missed: number;
  /** Server CPU per event (user + system, from /proc), ms. */
  cpuPerEventMs: number;
  rssBytes: number;
}

async function run(context: BenchContext): Promise<string> {
  const plan = context.quick ? QUICK : FULL;
  if (!existsSync(XDS_MAIN)) throw new Error(`${XDS_MAIN} is missing: build first (npm run build)`);
  const loadBefore = loadavg()[0] as number;
  const nats = await startNatsServer({ forcePrivate: true });
  const nc = await connect({ servers: nats.url });
  try {
    await ensureStream(await jetstreamManager(nc), { name: 'SPILLWAY' });
    const publisher = new EventPublisher(nc);
    let clock = Date.now();
    const count = ZONES.length * PODS_PER_ZONE;
    for (let i = 0; i < count; i++) await publisher.publishReadiness(pod(i, true, ++clock));
    // The baseline pushes an EDS resource of the size spillway-xds pushes for this pool.
    const fleet = new Fleet();
    for (let i = 0; i < count; i++) fleet.apply(pod(i, true, clock), clock);
    const edsBytes = placeResources(fleet.pool(POOL), { zone: 'zone-a', region: 'r1' }, 'model-servers')[0]!.any.value;
    let flips = 0;
    const flip = () => publisher.publishReadiness(pod(0, ++flips % 2 === 0, ++clock));
    const targets: Target[] = [
      { label: 'bare grpc-js fan-out (baseline)', start: startBare, trigger: () => Promise.resolve(nc.publish(PUSH_SUBJECT, edsBytes)) },
      { label: 'spillway-xds, --push-delay-ms 0', start: (url) => startXds(url, ['--push-delay-ms', '0']), trigger: flip },
      { label: DEFAULT_LABEL, start: (url) => startXds(url, []), trigger: flip },
    ];
    const results: Result[] = [];
    for (const nodes of plan.nodes) {
      for (const target of targets) {
        const result = await measure(target, nodes, plan, nats.url, context);
        results.push(result);
        context.log(
          `${target.label}, ${nodes} nodes: p50 ${percentile(result.latencies, 50).toFixed(1)} ms, p99 ${percentile(result.latencies, 99).toFixed(1)} ms, missed ${result.missed}, CPU ${result.cpuPerEventMs.toFixed(1)} ms/event`,
        );
      }
    }
    return report(results, plan, loadBefore, edsBytes.length, count);
  } finally {
    await nc.close();
    await nats.stop();
  }
}

async function measure(target: Target, nodes: number, plan: Plan, natsUrl: string, context: BenchContext): Promise<Result> {
  const server = await target.start(natsUrl);
  const clients: AdsClient[] = [];
  try {
    let armedAt: number | undefined;
    const seen = new Array<number | undefined>(nodes).fill(undefined);
    let waiting = 0;
    for (let i = 0; i < nodes; i++) {
      clients.push(
        new AdsClient(`127.0.0.1:${server.port}`, {
          node: { id: `bench-${i}`, zone: ZONES[i % ZONES.length] as string, region: i % 3 === 2 ? 'r2' : 'r1' },
          subscriptions: [
            { typeUrl: TYPE_URLS.eds, names: ['model-servers'] },
            { typeUrl: TYPE_URLS.ecds, names: ['spillway-subset-hint'] },
          ],
          onResponse: (response) => {
            if (armedAt === undefined || response.typeUrl !== TYPE_URLS.eds || seen[i] !== undefined) return;
            seen[i] = performance.now() - armedAt;
            waiting--;
          },
        }),
      );
    }
    const push = async (timeoutMs = PUSH_TIMEOUT_MS): Promise<number[] | undefined> => {
      seen.fill(undefined);
      waiting = nodes;
      armedAt = performance.now();
      await target.trigger();
      const deadline = Date.now() + timeoutMs;
      while (waiting > 0 && Date.now() < deadline) await sleep(2);
      armedAt = undefined;
      return waiting > 0 ? undefined : (seen as number[]);
    };
    // Warm-up: every node connected and answered once.
    await eventually(
      async () => {
        if ((await push(2_000)) === undefined)
          throw new Error(`${target.label}: not every one of ${nodes} nodes connected and got a push within 60 s`);
      },
      60_000,
      500,
    );
    context.log(`${target.label}: ${nodes} nodes connected`);
    const latencies: number[] = [];
    const lastNode: number[] = [];
    let missed = 0;
    const cpuBefore = cpuMsOf(server.pid);
    for (let e = 0; e < plan.events; e++) {
      await sleep(plan.gapMs + 100);
      const result = await push();
      const got = seen.filter((v): v is number => v !== undefined);
      missed += nodes - got.length;
      latencies.push(...got);
      if (result !== undefined) lastNode.push(Math.max(...result));
    }
    const cpuPerEventMs = (cpuMsOf(server.pid) - cpuBefore) / plan.events;
    return {
      label: target.label,
      nodes,
      latencies: latencies.sort((a, b) => a - b),
      lastNode: lastNode.sort((a, b) => a - b),
      missed,
      cpuPerEventMs,
      rssBytes: rssOf(server.pid),
    };
  } finally {
    for (const c of clients) c.close();
    await server.stop();
  }
}

function report(results: Result[], plan: Plan, loadBefore: number, edsBytes: number, pods: number): string {
  const rows = results.map((r) => [
    r.label,
    r.nodes,
    percentile(r.latencies, 50).toFixed(1),
    percentile(r.latencies, 99).toFixed(1),
    percentile(r.lastNode, 50).toFixed(1),
    r.missed,
    r.cpuPerEventMs.toFixed(1),
    (r.rssBytes / 2 ** 20).toFixed(0),
  ]);
  // The target (docs/xds.md): a readiness change reaches every connected node within 1 s, as
  // gateways run it (the default push delay), judged on the p99 over every node and event.
  const verdicts = results
    .filter((r) => r.label === DEFAULT_LABEL)
    .map((r) => {
      const p99 = percentile(r.latencies, 99);
      const met = r.missed === 0 && p99 < TARGET_MS;
      return `${r.nodes.toLocaleString('en-US')} nodes: p99 ${p99.toFixed(1)} ms${r.missed > 0 ? `, ${r.missed} missed` : ''} — **${met ? 'MET' : 'NOT MET'}**`;
    });
  return [
    '## spillway-xds: readiness event to push at every node',
    '',
    `Target: a readiness change reaches every connected node within ${TARGET_MS / 1000} s (default push delay, p99 of every node over every event, no push missed). ${verdicts.join('; ')}.`,
    '',
    `From just before a readiness event is published to each node receiving its EDS push (docs/xds.md). N nodes, each an ADS client on its own connection that subscribes to EDS and ECDS and ACKs every response as Envoy does, spread evenly over three zones; the pool has ${pods} pods; one pod's readiness flips per event, ${plan.events} events per row, ${plan.gapMs + 100} ms apart. spillway-xds runs as its built binary; the nodes and the publisher share the bench process. Baseline, same run: a bare grpc-js server with the same ADS service and codec that writes one ${edsBytes}-byte EDS response to every stream on each core NATS message (\`test/bench/xds/bare-push-server.ts\`): the hop and the fan-out alone, with no JetStream acknowledgement, view, coalescing or per-node state. Machine: ${cpus().length} cores shared with other work; 1-minute load average ${loadBefore.toFixed(1)} before this part.`,
    '',
    markdownTable(
      [
        'server',
        'nodes',
        'p50 ms',
        'p99 ms',
        'last node, median of events, ms',
        'missed pushes',
        'server CPU per event, ms',
        'server RSS, MiB',
      ],
      rows,
    ),
    '',
    `Latencies are every node's, over all events. "Missed" counts nodes without the push after ${PUSH_TIMEOUT_MS / 1000} s. With the default \`--push-delay-ms\` of 100 ms every change waits that long for others to join it, by design: a rollout that turns many pods at once goes out as one push per node, not one per pod. The server CPU per event is the server process's user + system time over the events, divided by their number (idle costs included). The baseline runs through tsx, so its RSS includes the TypeScript loader; compare RSS between the spillway-xds rows only.`,
  ].join('\n');
}

async function startXds(natsUrl: string, extra: string[]) {
  const [port, healthPort, metricsPort] = [await freePort(), await freePort(), await freePort()];
  const args = [
    XDS_BIN,
    '--pool',
    POOL,
    '--nats',
    natsUrl,
    '--host',
    '127.0.0.1',
    '--port',
    String(port),
    '--health-port',
    String(healthPort),
  ];
  args.push('--metrics-port', String(metricsPort), '--max-nodes', '5000', '--log-level', 'warn', ...extra);
  const child = spawn(process.execPath, args, { stdio: ['ignore', 'ignore', 'pipe'] });
  const stop = stopper(child);
  try {
    await eventually(async () => {
      if (child.exitCode !== null) throw new Error(`spillway-xds exited with ${child.exitCode}`);
      if ((await healthStatus(healthPort, 'readiness')) !== ServingStatus.SERVING)
        throw new Error('spillway-xds is not SERVING after 30 s');
    }, 30_000);
  } catch (error) {
    await stop();
    throw error;
  }
  return { port, pid: child.pid, stop };
}

async function startBare(natsUrl: string) {
  const child = spawn(process.execPath, ['--conditions=@spillway/source', '--import', 'tsx', BARE, natsUrl], {
    cwd: root,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const stop = stopper(child);
  const port = await new Promise<number>((resolve, reject) => {
    let text = '';
    child.stdout.on('data', (c: Buffer) => {
      text += c.toString();
      const match = /^\{"port":(\d+)\}$/m.exec(text);
      if (match) resolve(Number(match[1]));
    });
    child.once('exit', (code) => reject(new Error(`bare push server exited with ${code}`)));
  }).catch(async (error: unknown) => {
    await stop();
    throw error;
  });
  return { port, pid: child.pid, stop };
}

/** SIGTERM, SIGKILL after 5 s; and SIGKILL should the bench process exit first. */
function stopper(child: ChildProcess): () => Promise<void> {
  const kill = (): void => void child.kill('SIGKILL');
  process.once('exit', kill);
  return async () => {
    process.off('exit', kill);
    if (child.exitCode !== null || child.signalCode !== null) return;
    const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
    child.kill('SIGTERM');
    const timer = setTimeout(() => child.kill('SIGKILL'), 5_000);
    await exited;
    clearTimeout(timer);
  };
}

/** CPU the process has used (user + system), ms; clock ticks are 1/100 s on Linux. */
function cpuMsOf(pid: number | undefined): number {
  if (pid === undefined) return Number.NaN;
  const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]?.split(' ') ?? [];
  return (Number(fields[11]) + Number(fields[12])) * 10;
}

function rssOf(pid: number | undefined): number {
  if (pid === undefined) return Number.NaN;
  const status = readFileSync(`/proc/${pid}/status`, 'utf8');
  return Number(/^VmRSS:\s+(\d+) kB/m.exec(status)?.[1] ?? Number.NaN) * 1024;
}
