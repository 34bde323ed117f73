import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { cpus, loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { decodeStateBatch, encodeStateBatch, stateBatchSchema, type StateBatch, type StateEntry } from '@spillway/events';
import { Fleet } from '@spillway/fleet';
import { Scheduler } from '@spillway/scheduler';
import { POOL, startNatsServer, TestPublisher, type PodSpec } from '@spillway/testkit';
import { markdownTable, median, type BenchContext, type BenchPart } from './part.js';
import { displayCommand, H2LOAD_INSTALL, h2loadVersion, runH2load, type LoadResult, type LoadSpec } from './extproc/h2load.js';
import { keepPodsFresh, mirrorPeer, podPool, startEppChild, type Child, type RunningEppChild } from './extproc/processes.js';
import { assertRouted, completionsBody, encodedRequest, sendOnce } from './extproc/request.js';
import { CLIENTS, LOCAL_ZONE, MODEL, PODS, REFRESH_MS, STREAMS, SUBSET, ZONES } from './extproc/setup.js';

/**
 * `sharing`: what sharing state between EPPs costs (its target: a bounded cost).
 *
 * 1. Per entry, in process: this EPP's picks and releases as the scheduler makes them, batched,
 *    encoded (msgpack, and JSON for comparison), then decoded, validated and applied by another
 *    EPP's scheduler — CPU µs per entry on each side, and bytes per entry.
 * 2. Per request, with h2load: two spillway-epp processes of one zone, one with `--share-state
 *    false`, one with sharing on and a peer that sends it back as many entries as it publishes (a
 *    mirror of its own batches under another id: the load of a two-EPP zone, each EPP taking in the
 *    other's entries). Measured alternately at saturation and at a fixed rate: throughput and the
 *    server's CPU per request from /proc. Target: with sharing within 5 % of without.
 */
export const sharing: BenchPart = {
  name: 'sharing',
  title: 'Shared state between EPPs: cost per entry and per request',
  run,
};

const FIXED_RATE = 2000;
const TARGET = 0.95;

interface Plan {
  entries: number;
  saturationSeconds: number;
  rateSeconds: number;
  repeats: number;
  warmupSeconds: number;
}
const FULL: Plan = { entries: 200_000, saturationSeconds: 8, rateSeconds: 6, repeats: 3, warmupSeconds: 2 };
const QUICK: Plan = { entries: 40_000, saturationSeconds: 4, rateSeconds: 4, repeats: 1, warmupSeconds: 1 };

type Mode = 'off' | 'on';
const LABEL: Record<Mode, string> = { off: 'sharing off', on: 'sharing on (+ a peer as busy)' };
const cpuMicros = (): number => {
  const u = process.cpuUsage();
  return u.user + u.system;
};

async function run(context: BenchContext): Promise<string> {
  const plan = context.quick ? QUICK : FULL;
  const loadBefore = loadavg()[0] as number;
  const entry = perEntry(plan.entries);
  context.log(
    `per entry: publish ${entry.encodeMicros.toFixed(2)} µs (msgpack; JSON ${entry.jsonEncodeMicros.toFixed(2)}), receive ${entry.decodeMicros.toFixed(2)} µs decode+validate (JSON ${entry.jsonDecodeMicros.toFixed(2)}) + ${entry.applyMicros.toFixed(2)} µs apply, ${entry.bytes.toFixed(0)} bytes (JSON ${entry.jsonBytes.toFixed(0)})`,
  );
  const sections = [
    '## Shared state between EPPs: cost per entry and per request',
    '',
    `What sharing picks in flight, prefix placements and penalties between EPPs costs (docs/sharing.md). Machine: ${cpus().length} cores shared with other work; 1-minute load average ${loadBefore.toFixed(1)} before this part.`,
    '',
    '### Per entry, in process',
    '',
    `${plan.entries.toLocaleString('en-US')} entries as an EPP makes them (a pick carrying the block hashes of a 1 KB prompt, then its release; ${PODS} pods), batched by 256, encoded, then decoded, validated and applied by another EPP's scheduler. CPU time (process.cpuUsage) per entry, the median of 5 passes:`,
    '',
    markdownTable(
      ['', 'msgpack (used)', 'JSON'],
      [
        ['publish: encode, µs/entry', entry.encodeMicros.toFixed(2), entry.jsonEncodeMicros.toFixed(2)],
        ['receive: decode + validate, µs/entry', entry.decodeMicros.toFixed(2), entry.jsonDecodeMicros.toFixed(2)],
        ['receive: apply (fleet, prefix index), µs/entry', entry.applyMicros.toFixed(2), '(same)'],
        ['bytes/entry', entry.bytes.toFixed(0), entry.jsonBytes.toFixed(0)],
      ],
    ),
    '',
    'Each request makes two entries (its pick and its release), so a receiving EPP pays twice the receive figures per request routed by each peer.',
    '',
  ];
  sections.push(...(await perRequest(context, plan, loadBefore)));
  return sections.join('\n');
}

interface EntryCosts {
  encodeMicros: number;
  decodeMicros: number;
  applyMicros: number;
  jsonEncodeMicros: number;
  jsonDecodeMicros: number;
  bytes: number;
  jsonBytes: number;
}

/** The fleet every in-process EPP sees: the bench's pod pool, ready with a fresh sample. */
function benchFleet(pods: readonly PodSpec[], now: number): Fleet {
  const fleet = new Fleet();
  for (const p of pods) {
    fleet.apply({ v: 1, kind: 'readiness', pool: POOL, zone: p.zone, pod: p.pod, address: p.address, ready: true, observedAt: now }, now);
    fleet.apply(
      {
        v: 1,
        kind: 'metrics',
        pool: POOL,
        zone: p.zone,
        pod: p.pod,
        observedAt: now,
        waitingRequests: 1,
        runningRequests: 8,
        kvCacheUsage: 0.3,
      },
      now,
    );
  }
  return fleet;
}

function perEntry(count: number): EntryCosts {
  const pods = podPool(PODS, ZONES);
  const t0 = 1_764_420_000_000;
  const entries: StateEntry[] = [];
  const origin = new Scheduler({
    fleet: benchFleet(pods, t0),
    pool: POOL,
    zone: LOCAL_ZONE,
    shared: { outbox: { push: (e) => entries.push(e) } },
  });
  const prompt = completionsBody(MODEL);
  const subset = pods
    .filter((p) => p.zone === LOCAL_ZONE)
    .slice(0, SUBSET)
    .map((p) => p.address);
  for (let i = 0; entries.length < count; i++) {
    const d = origin.pick({ model: MODEL, prompt, subset }, t0 + i);
    origin.commit(d, t0 + i);
    origin.release(d, t0 + i + 1);
  }
  const batches: StateBatch[] = [];
  for (let i = 0; i < entries.length; i += 256)
    batches.push({
      v: 1,
      pool: POOL,
      zone: LOCAL_ZONE,
      epp: 'bench-origin',
      seq: batches.length + 1,
      sentAt: t0 + i,
      entries: entries.slice(i, i + 256),
    });

  const passes = 5;
  const time = (f: () => void): number => {
    const results: number[] = [];
    for (let p = 0; p < passes; p++) {
      const start = cpuMicros();
      f();
      results.push((cpuMicros() - start) / entries.length);
    }
    return median(results);
  };
  let encoded: Uint8Array[] = [];
  const encodeMicros = time(() => (encoded = batches.map(encodeStateBatch)));
  const text = new TextEncoder();
  const read = new TextDecoder();
  let json: Uint8Array[] = [];
  const jsonEncodeMicros = time(() => (json = batches.map((b) => text.encode(JSON.stringify(b)))));
  const from = { pool: POOL, zone: LOCAL_ZONE, epp: 'bench-origin' };
  let decoded: StateBatch[] = [];
  const decodeMicros = time(() => {
    decoded = encoded.map((data) => {
      const r = decodeStateBatch(data, from);
      if (!r.ok) throw new Error(`${r.reason}: ${r.detail}`);
      return r.batch;
    });
  });
  const jsonDecodeMicros = time(() => {
    for (const data of json) if (!stateBatchSchema.safeParse(JSON.parse(read.decode(data))).success) throw new Error('invalid JSON batch');
  });
  // Each pass applies to a fresh receiving EPP (sequence numbers start over).
  const receivers = Array.from({ length: passes }, () => new Scheduler({ fleet: benchFleet(pods, t0), pool: POOL, zone: LOCAL_ZONE }));
  let pass = 0;
  const applyMicros = time(() => {
    const receiver = receivers[pass++] as Scheduler;
    for (const batch of decoded) receiver.shared.apply(batch, batch.sentAt + 2, 'bench-receiver');
  });
  const bytes = encoded.reduce((n, d) => n + d.byteLength, 0) / entries.length;
  const jsonBytes = json.reduce((n, d) => n + d.byteLength, 0) / entries.length;
  return { encodeMicros, decodeMicros, applyMicros, jsonEncodeMicros, jsonDecodeMicros, bytes, jsonBytes };
}

interface Run {
  mode: Mode;
  repeat: number;
  rate: number | undefined;
  result: LoadResult;
}

/** spillway_shared_state_entries_total by direction, from an EPP's /metrics. */
async function sharedEntries(metricsPort: number): Promise<{ in: number; out: number }> {
  const text = await (await fetch(`http://127.0.0.1:${metricsPort}/metrics`)).text();
  const read = (direction: string) =>
    Number(new RegExp(`^spillway_shared_state_entries_total\\{direction="${direction}"\\} (\\S+)$`, 'm').exec(text)?.[1] ?? 0);
  return { in: read('in'), out: read('out') };
}

async function perRequest(context: BenchContext, plan: Plan, loadBefore: number): Promise<string[]> {
  const title = '### Per request: spillway-epp with sharing on and off (h2load)';
  const version = h2loadVersion();
  if (version === undefined) {
    context.log(H2LOAD_INSTALL);
    return [title, '', `**Not measured: ${H2LOAD_INSTALL}**`];
  }
  const pods = podPool(PODS, ZONES);
  const subset = pods
    .filter((p) => p.zone === LOCAL_ZONE)
    .slice(0, SUBSET)
    .map((p) => p.address);
  const request = encodedRequest(MODEL, subset);
  const dir = mkdtempSync(join(tmpdir(), 'spillway-bench-sharing-'));
  const file = join(dir, 'request.bin');
  writeFileSync(file, request.bytes);
  const children: Child[] = [];
  let stopRefresh: (() => void) | undefined;
  let publisher: TestPublisher | undefined;
  const nats = await startNatsServer({ forcePrivate: true });
  const killNats = (): void => void nats.kill();
  process.once('exit', killNats);
  try {
    publisher = await TestPublisher.connect(nats.url);
    stopRefresh = await keepPodsFresh(publisher, pods, REFRESH_MS);
    const off = await startEppChild(nats.url, LOCAL_ZONE, ['--share-state', 'false']);
    children.push(off);
    const on = await startEppChild(nats.url, LOCAL_ZONE);
    children.push(on);
    // The peer: every batch the sharing EPP publishes comes back to it as a peer's, with the same entries.
    mirrorPeer(publisher, LOCAL_ZONE);
    for (const [name, child] of [
      ['off', off],
      ['on', on],
    ] as const)
      assertRouted(`spillway-epp (sharing ${name})`, await sendOnce(child.grpcPort, request.bytes, 20), request.bodyBytes);
    context.log(`two spillway-epp processes ready (sharing off pid ${off.pid}, on pid ${on.pid}) and a mirror peer; ${version}`);

    const servers: Record<Mode, RunningEppChild> = { off, on };
    const before = await sharedEntries(on.metricsPort);
    const runs: Run[] = [];
    const measure = async (mode: Mode, repeat: number, rate: number | undefined, seconds: number): Promise<void> => {
      const spec: LoadSpec = {
        port: servers[mode].grpcPort,
        file,
        clients: CLIENTS,
        streamsPerClient: STREAMS,
        seconds,
        warmupSeconds: plan.warmupSeconds,
        rate,
        logFile: join(dir, 'latency.tsv'),
      };
      const result = await runH2load(spec, servers[mode].pid);
      if (result.failed + result.errored + result.timeout > 0)
        throw new Error(`h2load against ${LABEL[mode]}: ${result.failed} failed, ${result.errored} errored, ${result.timeout} timed out`);
      runs.push({ mode, repeat, rate, result });
      context.log(
        `${rate === undefined ? 'saturation' : `${rate} req/s`} #${repeat + 1} ${LABEL[mode]}: ${result.requestsPerSecond.toFixed(0)} req/s, p99 ${result.p99.toFixed(2)} ms, ${result.serverCpuMicrosPerRequest.toFixed(0)} µs CPU/request`,
      );
    };
    for (let repeat = 0; repeat < plan.repeats; repeat++)
      for (const mode of ['off', 'on'] as const) await measure(mode, repeat, undefined, plan.saturationSeconds);
    for (let repeat = 0; repeat < plan.repeats; repeat++)
      for (const mode of ['off', 'on'] as const) await measure(mode, repeat, FIXED_RATE, plan.rateSeconds);
    const after = await sharedEntries(on.metricsPort);
    const loadAfter = loadavg()[0] as number;

    const pick = (mode: Mode, rate: number | undefined) => runs.filter((r) => r.mode === mode && r.rate === rate);
    const rps = (mode: Mode) => median(pick(mode, undefined).map((r) => r.result.requestsPerSecond));
    const cpu = (mode: Mode, rate: number | undefined) => median(pick(mode, rate).map((r) => r.result.serverCpuMicrosPerRequest));
    const ratio = rps('on') / rps('off');
    const cpuRatio = cpu('off', undefined) / cpu('on', undefined);
    const rows = runs.map((r) => [
      r.rate === undefined ? 'saturation' : `${r.rate} req/s`,
      r.repeat + 1,
      LABEL[r.mode],
      r.result.requestsPerSecond.toFixed(0),
      r.result.p50.toFixed(2),
      r.result.p99.toFixed(2),
      r.result.serverCpuMicrosPerRequest.toFixed(0),
    ]);
    const met = ratio >= TARGET;
    return [
      title,
      '',
      `Two built spillway-epp processes of ${LOCAL_ZONE} following one private nats-server (${PODS} pods over ${ZONES.length} zones, metrics refreshed every ${REFRESH_MS} ms): one with \`--share-state false\`, one with sharing on. A peer sends the sharing EPP back every batch it publishes under another EPP id (the load of a zone with two EPPs, each taking in the other's entries): it took in ${(after.in - before.in).toLocaleString('en-US')} entries and published ${(after.out - before.out).toLocaleString('en-US')} during the runs. The request is the ext_proc part's (a 1 KB completions body, a ${SUBSET}-endpoint subset). Runs alternate off/on; CPU µs/req is the server's user+system time from /proc over the measured window per request. 1-minute load average ${loadBefore.toFixed(1)} before, ${loadAfter.toFixed(1)} after.`,
      '',
      '```',
      displayCommand({ clients: CLIENTS, streamsPerClient: STREAMS, seconds: plan.saturationSeconds, warmupSeconds: plan.warmupSeconds }),
      `${displayCommand({ clients: CLIENTS, streamsPerClient: STREAMS, seconds: plan.rateSeconds, warmupSeconds: plan.warmupSeconds, rate: FIXED_RATE })}   # --rps is per connection`,
      '```',
      '',
      markdownTable(['load', 'repeat', 'EPP', 'req/s', 'p50 ms', 'p99 ms', 'CPU µs/req'], rows),
      '',
      `Median saturation throughput: off ${rps('off').toFixed(0)} req/s, on ${rps('on').toFixed(0)} req/s: **${(ratio * 100).toFixed(1)} %**; CPU per request at saturation off ${cpu('off', undefined).toFixed(0)} µs, on ${cpu('on', undefined).toFixed(0)} µs (CPU-based ratio ${(cpuRatio * 100).toFixed(1)} %); at ${FIXED_RATE} req/s off ${cpu('off', FIXED_RATE).toFixed(0)} µs, on ${cpu('on', FIXED_RATE).toFixed(0)} µs.`,
      '',
      `- Target (sharing's cost): ext_proc throughput with sharing on within 5 % of sharing off — ${met ? '**MET**' : '**NOT MET**'} (${(ratio * 100).toFixed(1)} %; CPU-based ${(cpuRatio * 100).toFixed(1)} %).`,
    ];
  } finally {
    stopRefresh?.();
    for (const child of children.reverse()) await child.stop();
    await publisher?.close().catch(() => undefined);
    await nats.stop();
    process.off('exit', killNats);
    rmSync(dir, { recursive: true, force: true });
  }
}
