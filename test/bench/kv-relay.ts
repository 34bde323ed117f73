import { spawn } from 'node:child_process';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { decode } from '@msgpack/msgpack';
import { natsOptionsFromFlags } from '@spillway/bus';
import {
  chunkKvChanges,
  CollectorMetrics,
  KvRelay,
  NatsSink,
  PodKvUnion,
  RankKvMap,
  SkippedTally,
  type KvChange,
} from '@spillway/collector';
import {
  decodeVllmKvBatch,
  encodeEvent,
  encodeKvBatch,
  encodeVllmKvBatch,
  fitKvSnapshot,
  MAX_KV_EVENTS,
  MAX_KV_KEYS,
  MAX_KV_SNAPSHOT_KEYS,
  MAX_KV_STORED_RUNS,
  type KvSnapshotEvent,
  type MetricsEvent,
  type VllmKvEventInput,
} from '@spillway/events';
import { freePort, startNatsServer } from '@spillway/testkit';
import { pino } from 'pino';
import { Subscriber } from 'zeromq';
import { markdownTable, type BenchContext, type BenchPart } from './part.js';

/**
 * The KV relay (precise prefix routing, the model-server side): CPU per event of the collector's relay from a
 * server's vLLM-layout ZeroMQ batches to content-keyed NATS batches, and the cost of the periodic
 * per-pod `kv` snapshot, each beside a baseline measured in the same run:
 * - relay core (decode + validate + map hashes to content keys + split + encode), against a bare
 *   msgpack decode of the same payloads;
 * - relay end to end (ZeroMQ SUB in, NATS out, a private nats-server; the publisher in a child
 *   process), against a bare ZeroMQ SUB receiving the same messages;
 * - a snapshot (keys newest-last, fitted, JSON-encoded) at several cache sizes, against a metrics event.
 * CPU is this process's (process.cpuUsage), per operation: on a shared machine that is steadier
 * than wall-clock throughput.
 */
export const kvRelay: BenchPart = { name: 'kv-relay', title: 'KV relay: CPU per event and snapshot cost', run };

const root = join(dirname(fileURLToPath(import.meta.url)), '..', '..');
const BS = 16;
/**
 * Derived targets (precise prefix routing sets none for this side): a server publishes about one batch per
 * engine step, ~100 a second when busy, so ≤ 100 µs per step batch keeps one server's relay under
 * 1% of a core; a 2,000-token prefill batch ≤ 1 ms; a full snapshot ≤ 10 ms per pod per interval.
 */
const TARGET_STEP_US = 100;
const TARGET_PREFILL_US = 1_000;
const TARGET_SNAPSHOT_MS = 10;

interface Shape {
  name: string;
  /** Blocks stored per batch (one BlockStored event) and blocks removed (one BlockRemoved event). */
  stored: number;
  removed: number;
}
const SHAPES: Shape[] = [
  { name: 'decode step (2 stored, 2 removed)', stored: 2, removed: 2 },
  { name: 'prefill of 2,000 tokens (125 stored, 125 removed)', stored: 125, removed: 125 },
];

/** Batches as a vLLM server would publish them: fresh chains stored, the oldest blocks removed (a 2,000-block cache). */
function payloads(shape: Shape, count: number): Uint8Array[] {
  const out: Uint8Array[] = [];
  let next = 1;
  const live: number[] = [];
  for (let b = 0; b < count; b++) {
    const events: VllmKvEventInput[] = [];
    const hashes = Array.from({ length: shape.stored }, () => next++);
    const tokenIds = Array.from({ length: shape.stored * BS }, (_, i) => (b * 7919 + i * 31) % 151_000);
    events.push({ type: 'stored', hashes, parent: null, tokenIds, blockSize: BS, loraId: null, medium: 'GPU', loraName: null });
    live.push(...hashes);
    if (live.length > 2_000) events.push({ type: 'removed', hashes: live.splice(0, shape.removed), medium: 'GPU' });
    out.push(encodeVllmKvBatch(1_764_420_000 + b / 100, events, 0));
  }
  return out;
}

function cpuUs(fn: () => void): number {
  const before = process.cpuUsage();
  fn();
  const d = process.cpuUsage(before);
  return d.user + d.system;
}

function relayCore(shape: Shape, quick: boolean) {
  const count = Math.max(200, Math.round((quick ? 20_000 : 200_000) / (shape.stored + 1)));
  // The first batches fill the cache (and warm the code): measured ones store and remove alike.
  const fill = Math.ceil(2_000 / shape.stored) + 200;
  const all = payloads(shape, fill + count);
  const warm = all.slice(0, fill);
  const batches = all.slice(fill);
  const map = new RankKvMap(64 * 1024 * 1024);
  const union = new PodKvUnion();
  let seq = 0;
  const relayOne = (p: Uint8Array): void => {
    const d = decodeVllmKvBatch(p);
    if (!d.ok) throw new Error(d.detail);
    const changes: KvChange[] = [];
    const skipped = new SkippedTally();
    map.fold(d.batch.events, changes, (reason, blocks, what) => skipped.add(reason, blocks, what));
    const events: KvChange[] = [];
    union.apply(0, changes, events);
    for (const chunk of chunkKvChanges(events, { maxEvents: MAX_KV_EVENTS, maxKeys: MAX_KV_KEYS, maxRuns: MAX_KV_STORED_RUNS }))
      encodeKvBatch({
        v: 1,
        pool: 'llama',
        zone: 'zone-a',
        pod: 'vllm-0',
        seq: seq++,
        observedAt: 1_764_420_000_000,
        blockSize: BS,
        events: chunk.events,
        rank: 0,
        stored: chunk.stored,
        skipped: skipped.list(),
      });
  };
  for (const p of warm) relayOne(p);
  for (const p of warm) decode(p);
  const baseline = cpuUs(() => {
    for (const p of batches) decode(p, { useBigInt64: true });
  });
  const relay = cpuUs(() => {
    for (const p of batches) relayOne(p);
  });
  const events = batches.length * (shape.removed > 0 ? 2 : 1);
  return {
    count,
    baselinePerBatch: baseline / count,
    relayPerBatch: relay / count,
    relayPerBlock: relay / count / (shape.stored + shape.removed),
    events,
  };
}

// The publisher runs in a child process, so this process's CPU is the subscriber's alone.
const PUBLISHER = `
import { Publisher } from 'zeromq';
import { encode } from '@msgpack/msgpack';
const [endpoint, total, rate, stored] = process.argv.slice(1).map((v, i) => (i === 0 ? v : Number(v)));
const pub = new Publisher({ sendHighWaterMark: 1_000_000 });
await pub.bind(endpoint);
await new Promise((r) => setTimeout(r, 500));
let next = 1;
const start = Date.now();
for (let b = 0; b < total; b++) {
  const hashes = Array.from({ length: stored }, () => next++);
  const tokens = Array.from({ length: stored * 16 }, (_, i) => (b * 7919 + i * 31) % 151000);
  const events = [['BlockStored', hashes, null, tokens, 16, null, 'GPU', null]];
  if (next > 20000) events.push(['BlockRemoved', hashes.map((h) => h - 20000), 'GPU']);
  const seq = Buffer.alloc(8); seq.writeBigUInt64BE(BigInt(b));
  await pub.send(['', seq, encode([Date.now() / 1000, events, 0])]);
  const due = start + ((b + 1) * 1000) / rate;
  if (due > Date.now()) await new Promise((r) => setTimeout(r, due - Date.now()));
}
await new Promise((r) => setTimeout(r, 1000));
pub.close();
`;

async function publish(endpoint: string, total: number, rate: number, stored: number): Promise<void> {
  const child = spawn(process.execPath, ['--input-type=module', '-e', PUBLISHER, endpoint, String(total), String(rate), String(stored)], {
    cwd: root,
    stdio: ['ignore', 'inherit', 'inherit'],
  });
  await new Promise<void>((resolve, reject) =>
    child.once('exit', (code) => (code === 0 ? resolve() : reject(new Error(`publisher exited ${code}`)))),
  );
}

async function endToEnd(quick: boolean, natsUrl: string) {
  const total = quick ? 2_000 : 10_000;
  const rate = 1_000;
  const stored = 4;
  // Baseline: a bare SUB socket receiving the same stream.
  const bareEndpoint = `tcp://127.0.0.1:${await freePort()}`;
  const sub = new Subscriber({ linger: 0, receiveHighWaterMark: 1_000_000 });
  sub.subscribe();
  sub.connect(bareEndpoint);
  let bareCount = 0;
  const bareCpu0 = process.cpuUsage();
  const bareDone = (async () => {
    for await (const _ of sub) if (++bareCount >= total) break;
  })();
  await publish(bareEndpoint, total, rate, stored);
  await Promise.race([bareDone, new Promise((r) => setTimeout(r, 2_000))]);
  const bareCpu = process.cpuUsage(bareCpu0);
  sub.close();

  // The relay: ZeroMQ in, content keys, NATS out.
  const logger = pino({ level: 'silent' });
  const metrics = new CollectorMetrics();
  const sink = new NatsSink({ settings: natsOptionsFromFlags({ nats: natsUrl }, {}), stream: 'SPILLWAY', logger });
  await sink.ready();
  const relayEndpoint = `tcp://127.0.0.1:${await freePort()}`;
  const relay = new KvRelay({
    pool: 'llama',
    limits: { maxPayloadBytes: 8 << 20, maxEvents: 4096, maxHashes: 8192, maxTokens: 262_144 },
    maxBytesPerPod: 8 << 20,
    snapshotIntervalMs: 3_600_000,
    replayTimeoutMs: 2_000,
    reconnectMs: 100,
    reconnectMaxMs: 1_000,
    topic: '',
    sink,
    logger,
    metrics,
  });
  relay.setEndpoints([
    {
      pod: 'vllm-0',
      address: '127.0.0.1:8000',
      zone: 'zone-a',
      region: undefined,
      engine: undefined,
      labels: undefined,
      sourceReady: true,
      kvEvents: relayEndpoint,
    },
  ]);
  const received = async () => (await metrics.kvBatchesReceived.get()).values[0]?.value ?? 0;
  const relayCpu0 = process.cpuUsage();
  const pub = publish(relayEndpoint, total, rate, stored);
  await pub;
  const deadline = Date.now() + 5_000;
  while ((await received()) < total && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
  const relayCpu = process.cpuUsage(relayCpu0);
  const got = await received();
  const published = (await metrics.kvBatchesPublished.get()).values[0]?.value ?? 0;
  relay.stop();
  await sink.close();
  const us = (c: NodeJS.CpuUsage) => c.user + c.system;
  // Both runs include the same idle time (publisher start, pacing); the difference is the relay's work.
  const extraPerBatch = (us(relayCpu) - us(bareCpu)) / total;
  return {
    total,
    rate,
    stored,
    bareCount,
    got,
    published,
    barePerBatch: us(bareCpu) / total,
    relayPerBatch: us(relayCpu) / total,
    extraPerBatch,
  };
}

function snapshotCost(blocks: number, quick: boolean) {
  const map = new RankKvMap(1 << 30);
  const union = new PodKvUnion();
  const tokenIds = Array.from({ length: blocks * BS }, (_, i) => (i * 31) % 151_000);
  const changes: KvChange[] = [];
  map.fold(
    [
      {
        type: 'stored',
        hashes: Array.from({ length: blocks }, (_, i) => i + 1),
        parent: null,
        tokenIds,
        blockSize: BS,
        loraId: null,
        medium: 'GPU',
        loraName: null,
        extraKeys: null,
        group: null,
        groupKind: null,
        slidingWindow: null,
        unhashedSalt: null,
      },
    ],
    changes,
    () => undefined,
  );
  union.apply(0, changes, []);
  // As the relay builds it: the keys, and its ranks' and tiers' counts (a walk over the rank's map).
  const build = (): KvSnapshotEvent => {
    const held = new Map<string, number>();
    const ranks = [{ rank: 0, blocks: map.summary(held) }];
    return fitKvSnapshot(
      {
        v: 1,
        kind: 'kv',
        pool: 'llama',
        zone: 'zone-a',
        pod: 'vllm-0',
        observedAt: 1_764_420_000_000,
        blockSize: BS,
        seq: 1_764_420_000_000_000,
        keys: union.snapshotKeys(),
        ranks,
        tiers: [...held].map(([medium, blocks]) => ({ medium, blocks })),
      },
      1024 * 1024,
    );
  };
  const reps = quick ? 20 : 100;
  let bytes = 0;
  const cpu = cpuUs(() => {
    for (let i = 0; i < reps; i++) bytes = encodeEvent(build()).byteLength;
  });
  return { blocks, keys: Math.min(blocks, MAX_KV_SNAPSHOT_KEYS), bytes, cpuMs: cpu / reps / 1000 };
}

function metricsEventCost(quick: boolean) {
  const event: MetricsEvent = {
    v: 1,
    kind: 'metrics',
    pool: 'llama',
    zone: 'zone-a',
    pod: 'vllm-0',
    observedAt: 1_764_420_000_000,
    waitingRequests: 2,
    runningRequests: 7,
    kvCacheUsage: 0.43,
    cache: { blockSize: 16, numBlocks: 29_000 },
  };
  const reps = quick ? 1_000 : 10_000;
  let bytes = 0;
  const cpu = cpuUs(() => {
    for (let i = 0; i < reps; i++) bytes = encodeEvent({ ...event, observedAt: event.observedAt + i }).byteLength;
  });
  return { bytes, cpuMs: cpu / reps / 1000 };
}

async function run(ctx: BenchContext): Promise<string> {
  const core = SHAPES.map((s) => ({ shape: s, ...relayCore(s, ctx.quick) }));
  for (const c of core)
    ctx.log(`core ${c.shape.name}: ${c.relayPerBatch.toFixed(1)} µs/batch vs ${c.baselinePerBatch.toFixed(1)} µs bare decode`);
  const nats = await startNatsServer({ forcePrivate: true });
  let e2e;
  try {
    e2e = await endToEnd(ctx.quick, nats.url);
  } finally {
    await nats.stop();
  }
  ctx.log(`end to end: ${e2e.relayPerBatch.toFixed(1)} µs/batch vs ${e2e.barePerBatch.toFixed(1)} bare; received ${e2e.got}/${e2e.total}`);
  const snaps = [1_000, 8_192, 16_384, 29_000].map((n) => snapshotCost(n, ctx.quick));
  const metric = metricsEventCost(ctx.quick);
  const step = core[0] as (typeof core)[number];
  const prefill = core[1] as (typeof core)[number];
  const worstSnapshotMs = Math.max(...snaps.map((s) => s.cpuMs));
  const verdict = (ok: boolean) => (ok ? '**MET**' : '**NOT MET**');
  return [
    '## KV relay: CPU per event and snapshot cost',
    '',
    'The collector\'s KV relay (`services/collector/src/kv-relay.ts`, docs/kv-events.md "From the model server to NATS"): vLLM-layout',
    'batches from a server over ZeroMQ, decoded and validated, block hashes mapped to content keys (`kvBlockKeys` over the',
    'token ids), split within the relayed batch bounds and msgpack-encoded for `spillway.kv.<pool>.<zone>.<pod>`. Blocks of',
    `${BS} tokens. CPU is this process's, per operation.`,
    '',
    '**Relay core** (no sockets), against a bare msgpack decode of the same payloads:',
    '',
    markdownTable(
      ['batch shape', 'batches', 'bare decode µs/batch', 'relay µs/batch', 'relay µs/block', 'relay ÷ bare'],
      core.map((c) => [
        c.shape.name,
        c.count,
        c.baselinePerBatch.toFixed(1),
        c.relayPerBatch.toFixed(1),
        c.relayPerBlock.toFixed(2),
        (c.relayPerBatch / c.baselinePerBatch).toFixed(1),
      ]),
    ),
    '',
    `**End to end** (a child process publishes ${e2e.total} batches of ${e2e.stored} stored blocks at ${e2e.rate}/s over ZeroMQ; the relay publishes to a private nats-server), against a bare ZeroMQ SUB socket receiving the same stream:`,
    '',
    markdownTable(
      ['receiver', 'batches received', 'CPU µs/batch (incl. idle wake-ups)'],
      [
        ['bare ZeroMQ SUB', e2e.bareCount, e2e.barePerBatch.toFixed(1)],
        ['KV relay (decode, map, NATS publish)', `${e2e.got} (${e2e.published} published)`, e2e.relayPerBatch.toFixed(1)],
        ['relay minus bare', '', e2e.extraPerBatch.toFixed(1)],
      ],
    ),
    '',
    `**Snapshot** (one pod's block set as a \`kv\` event in the stream, every \`--kv-snapshot-interval-ms\`, 10 s by default; at most ${MAX_KV_SNAPSHOT_KEYS} keys, the newest), against one metrics event (${metric.bytes} bytes, ${(metric.cpuMs * 1000).toFixed(1)} µs to encode, published every 100 ms):`,
    '',
    markdownTable(
      ['blocks held', 'keys sent', 'bytes', 'CPU ms to build + encode', 'bytes/s per pod at 10 s', 'bytes ÷ metrics at 100 ms'],
      snaps.map((s) => [
        s.blocks,
        s.keys,
        s.bytes,
        s.cpuMs.toFixed(2),
        Math.round(s.bytes / 10),
        (s.bytes / 10 / (metric.bytes * 10)).toFixed(1),
      ]),
    ),
    '',
    "The end-to-end figure includes what the core does not: the ZeroMQ receive loop, the relay's counters and the NATS",
    "publish; its idle wake-ups are in both rows, so the difference is the relay's own work.",
    '',
    'Targets (precise prefix routing sets none for this side; these are derived so that relaying stays negligible beside scraping):',
    '',
    markdownTable(
      ['target', 'measured', 'verdict'],
      [
        [
          `relay core CPU per decode-step batch ≤ ${TARGET_STEP_US} µs (≤ 1% of a core per server at 100 batches/s)`,
          `${step.relayPerBatch.toFixed(1)} µs`,
          verdict(step.relayPerBatch <= TARGET_STEP_US),
        ],
        [
          `relay core CPU per 2,000-token prefill batch ≤ ${TARGET_PREFILL_US} µs`,
          `${prefill.relayPerBatch.toFixed(1)} µs`,
          verdict(prefill.relayPerBatch <= TARGET_PREFILL_US),
        ],
        [
          `a full snapshot (16,384 keys) costs ≤ ${TARGET_SNAPSHOT_MS} ms of CPU per pod per interval`,
          `${worstSnapshotMs.toFixed(2)} ms`,
          verdict(worstSnapshotMs <= TARGET_SNAPSHOT_MS),
        ],
        ['the end-to-end relay receives every batch it is sent', `${e2e.got} of ${e2e.total}`, verdict(e2e.got === e2e.total)],
      ],
    ),
  ].join('\n');
}
