import { spawn } from 'node:child_process';
import { isDeepStrictEqual } from 'node:util';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { DeliverPolicy, jetstream, jetstreamManager, type JetStreamManager, type JsMsg } from '@nats-io/jetstream';
import type { NatsConnection } from '@nats-io/nats-core';
import { connectNats, ensureStream, EventPublisher, startReader, type ReaderSink } from '@spillway/bus';
import {
  compileSchema,
  decodeEvent,
  encodeEvent,
  parseSubject,
  poolFilter,
  spillwayEventSchema,
  subjectOf,
  type MetricsEvent,
  type ReadinessEvent,
  type SpillwayEvent,
} from '@spillway/events';
import { Fleet } from '@spillway/fleet';
import { startNatsServer } from '@spillway/testkit';
import { markdownTable, median, percentile, type BenchContext, type BenchPart } from './part.js';

/**
 * Event ingestion (docs/events.md): the cost of decoding one event (the precompiled check against
 * zod alone), replay of a pool into a Fleet through @spillway/bus, live ingestion rate and
 * event-to-visible lag, each next to a raw ordered consumer over the same stream in the same run
 * (consume and count, no decoding), plus the memory of a 10,000-pod Fleet. Live traffic comes from
 * a child process publishing core NATS, so the publisher does not share the reader's event loop.
 * Raw and reader rounds alternate, and each round's client CPU is read from process.cpuUsage (on a
 * shared machine, CPU per message is the figure to trust; wall-clock ratios move with the load).
 */
export const events: BenchPart = {
  name: 'events',
  title: 'Event ingestion: replay, live rate, lag, memory',
  run,
};

const STREAM = 'SPILLWAY';

export function readiness(pool: string, i: number, observedAt: number): ReadinessEvent {
  return {
    v: 1,
    kind: 'readiness',
    pool,
    zone: `zone-${'abc'[i % 3]}`,
    region: 'r1',
    pod: `vllm-${i}`,
    address: `10.${(i >> 16) & 255}.${(i >> 8) & 255}.${i & 255}:8000`,
    ready: true,
    engine: 'vllm',
    observedAt,
  };
}
export function metrics(pool: string, i: number, observedAt: number): MetricsEvent {
  return {
    v: 1,
    kind: 'metrics',
    pool,
    zone: `zone-${'abc'[i % 3]}`,
    pod: `vllm-${i}`,
    observedAt,
    waitingRequests: i % 7,
    runningRequests: i % 11,
    kvCacheUsage: (i % 100) / 100,
  };
}

export async function publishPool(publisher: EventPublisher, pool: string, pods: number): Promise<void> {
  const t = Date.now();
  let pending: Promise<unknown>[] = [];
  for (let i = 0; i < pods; i++) {
    pending.push(publisher.publishReadiness(readiness(pool, i, t)));
    publisher.publishMetrics(metrics(pool, i, t));
    if (pending.length >= 500) {
      await Promise.all(pending);
      pending = [];
    }
  }
  await Promise.all(pending);
  await publisher.flush();
}

export async function waitStored(jsm: JetStreamManager, count: number, stream = STREAM): Promise<number> {
  for (;;) {
    const info = await jsm.streams.info(stream);
    if (info.state.messages >= count) return info.state.last_seq;
    await new Promise((r) => setTimeout(r, 50));
  }
}

/** The stream stores core publishes asynchronously: its last sequence once it stops moving. */
async function settledLastSeq(jsm: JetStreamManager): Promise<number> {
  let seq = (await jsm.streams.info(STREAM)).state.last_seq;
  for (;;) {
    await new Promise((r) => setTimeout(r, 100));
    const next = (await jsm.streams.info(STREAM)).state.last_seq;
    if (next === seq) return seq;
    seq = next;
  }
}

interface Replay {
  ms: number;
  count: number;
  /** This process's CPU (user + system) over the replay, µs. */
  cpuUs: number;
}

function cpuSince(start: NodeJS.CpuUsage): number {
  const used = process.cpuUsage(start);
  return used.user + used.system;
}

/**
 * Baseline: an ordered consumer over the pool that only counts, until caught up. With `handle`, it
 * also hands each message to it (to time a decode and apply without the reader around it).
 */
async function rawReplay(nc: NatsConnection, pool: string, handle?: (m: JsMsg) => void): Promise<Replay> {
  const cpu = process.cpuUsage();
  const started = performance.now();
  const consumer = await jetstream(nc).consumers.get(STREAM, {
    filter_subjects: poolFilter(pool),
    deliver_policy: DeliverPolicy.LastPerSubject,
  });
  const pending = (await consumer.info(true)).num_pending;
  let count = 0;
  if (pending > 0) {
    const messages = await consumer.consume({ max_messages: 512, expires: 5_000, idle_heartbeat: 1_000 });
    for await (const m of messages) {
      count++;
      handle?.(m);
      if (m.info.pending === 0) break;
    }
    messages.stop();
  }
  const ms = performance.now() - started;
  const cpuUs = cpuSince(cpu);
  await consumer.delete().catch(() => undefined);
  return { ms, count, cpuUs };
}

/**
 * The floor for any reader of JSON events: the raw consumer plus the UTF-8 decode and JSON.parse
 * every event needs before it can be checked or applied, and nothing else.
 */
function parseOnly(nc: NatsConnection, pool: string): Promise<Replay> {
  const utf8 = new TextDecoder('utf-8', { fatal: true });
  let parsed = 0;
  return rawReplay(nc, pool, (m) => {
    if (JSON.parse(utf8.decode(m.data)) !== null) parsed++;
  }).then((replay) => {
    if (parsed !== replay.count) throw new Error(`parse-only replay parsed ${parsed} of ${replay.count}`);
    return replay;
  });
}

/** The consumer with decode and apply in line: zod alone (as before) or decodeEvent (now). */
function decodeAndApply(nc: NatsConnection, pool: string, withZod: boolean): Promise<Replay> {
  const fleet = new Fleet();
  return rawReplay(nc, pool, (m) => {
    const now = Date.now();
    if (withZod) {
      const event = decodeWithZod(m.data, m.subject);
      if (event !== undefined) fleet.apply(event, now);
    } else {
      const decoded = decodeEvent(m.data, m.subject);
      if (decoded.ok) fleet.apply(decoded.event, now);
    }
  });
}

async function readerReplay(nc: NatsConnection, pool: string): Promise<Replay & { fleet: Fleet }> {
  const cpu = process.cpuUsage();
  const started = performance.now();
  const fleet = new Fleet();
  const reader = startReader(nc, { pool, sink: fleet });
  await reader.caughtUp;
  const ms = performance.now() - started;
  const cpuUs = cpuSince(cpu);
  const count = reader.status.received;
  await reader.close();
  return { ms, count, cpuUs, fleet };
}

/**
 * A child process publishing v1 metrics with core NATS: `total` messages over `pods` pods, either
 * flat out (rate 0) or paced at `rate` messages/s; observedAt is the publish time (same host clock).
 */
export function childPublisher(url: string, pool: string, pods: number, total: number, rate: number): Promise<{ seconds: number }> {
  const script = `
    import { connect } from '@nats-io/transport-node';
    const [url, pool, pods, total, rate] = [process.argv[1], process.argv[2], +process.argv[3], +process.argv[4], +process.argv[5]];
    const nc = await connect({ servers: url });
    const esc = (s) => s.replace(/[^A-Za-z0-9_-]/g, (c) => [...Buffer.from(c)].map((b) => '%' + b.toString(16).toUpperCase().padStart(2, '0')).join(''));
    const subjects = Array.from({ length: pods }, (_, i) => 'spillway.v1.' + esc(pool) + '.zone-' + 'abc'[i % 3] + '.vllm-' + i + '.metrics');
    const one = (n) => {
      const i = n % pods;
      nc.publish(subjects[i], JSON.stringify({ v: 1, kind: 'metrics', pool, zone: 'zone-' + 'abc'[i % 3], pod: 'vllm-' + i, observedAt: Date.now(), waitingRequests: n % 7, runningRequests: n % 11, kvCacheUsage: (n % 100) / 100 }));
    };
    const started = performance.now();
    if (rate === 0) {
      for (let n = 0; n < total; n++) { one(n); if (n % 5000 === 4999) await nc.flush(); }
    } else {
      let sent = 0;
      while (sent < total) {
        const due = Math.min(total, Math.floor(((performance.now() - started) / 1000) * rate));
        while (sent < due) one(sent++);
        await new Promise((r) => setTimeout(r, 5));
      }
    }
    await nc.flush();
    process.stdout.write(JSON.stringify({ seconds: (performance.now() - started) / 1000 }));
    await nc.close();
  `;
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, ['--input-type=module', '-e', script, url, pool, String(pods), String(total), String(rate)], {
      cwd: process.cwd(),
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    let out = '';
    child.stdout.on('data', (c: Buffer) => (out += c.toString()));
    child.on('error', reject);
    child.on('exit', (code) =>
      code === 0 ? resolve(JSON.parse(out) as { seconds: number }) : reject(new Error(`publisher exited with ${code}`)),
    );
  });
}

/** The bench's nats-server and its connection. */
interface BenchNats {
  readonly nc: NatsConnection;
  readonly jsm: JetStreamManager;
  readonly url: string;
}

/** One live run: the pool a child process publishes, its pods, and whether the pool is read raw (no bus reader). */
interface LiveRun {
  readonly pool: string;
  readonly pods: number;
  readonly raw: boolean;
}

/** Follows the pool live (through the bus reader, or raw) while the child publishes `total` events; rate of messages handled. */
async function liveRate({ nc, jsm, url }: BenchNats, { pool, pods, raw }: LiveRun, total: number) {
  const before = (await jsm.streams.info(STREAM)).state.last_seq;
  let handled = 0;
  let lastSeq = 0;
  let stop: () => void = () => undefined;
  if (raw) {
    const consumer = await jetstream(nc).consumers.get(STREAM, { filter_subjects: poolFilter(pool), deliver_policy: DeliverPolicy.New });
    const messages = await consumer.consume({ max_messages: 512, expires: 5_000, idle_heartbeat: 1_000 });
    void (async () => {
      for await (const m of messages) {
        handled++;
        lastSeq = m.seq;
      }
    })();
    stop = () => {
      messages.stop();
      void consumer.delete().catch(() => undefined);
    };
  } else {
    const fleet = new Fleet();
    const reader = startReader(nc, { pool, sink: fleet });
    await reader.caughtUp;
    const base = reader.status.received;
    const poll = setInterval(() => {
      handled = reader.status.received - base;
      lastSeq = reader.status.lastSequence;
    }, 2);
    stop = () => {
      clearInterval(poll);
      void reader.close();
    };
  }
  const cpu = process.cpuUsage();
  const started = performance.now();
  const published = await childPublisher(url, pool, pods, total, 0);
  const last = await settledLastSeq(jsm);
  while (lastSeq < last) await new Promise((r) => setTimeout(r, 2));
  const seconds = (performance.now() - started) / 1000;
  const cpuUs = cpuSince(cpu);
  stop();
  return { handled, seconds, stored: last - before, publishSeconds: published.seconds, cpuUs };
}

/** Event-to-visible lag: child publishes at `rate`/s with observedAt = publish time; lag at apply. */
async function lag({ nc, url }: BenchNats, { pool, pods, raw }: LiveRun, rate: number, seconds: number): Promise<number[]> {
  const lags: number[] = [];
  const total = rate * seconds;
  let stop: () => Promise<void>;
  if (raw) {
    const consumer = await jetstream(nc).consumers.get(STREAM, { filter_subjects: poolFilter(pool), deliver_policy: DeliverPolicy.New });
    const messages = await consumer.consume({ max_messages: 512, expires: 5_000, idle_heartbeat: 1_000 });
    void (async () => {
      for await (const m of messages) lags.push(Date.now() - m.json<{ observedAt: number }>().observedAt);
    })();
    stop = async () => {
      messages.stop();
      await consumer.delete().catch(() => undefined);
    };
  } else {
    const fleet = new Fleet();
    const sink: ReaderSink = {
      apply(event, receivedAt) {
        lags.push(Date.now() - event.observedAt);
        return fleet.apply(event, receivedAt);
      },
      recordRejected: () => fleet.recordRejected(),
    };
    const reader = startReader(nc, { pool, sink });
    await reader.caughtUp;
    lags.length = 0;
    stop = () => reader.close();
  }
  await childPublisher(url, pool, pods, total, rate);
  const deadline = Date.now() + 10_000;
  while (lags.length < total * 0.99 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
  await stop();
  return lags.sort((a, b) => a - b);
}

function fleetMemory(pods: number): number {
  setFlagsFromString('--expose_gc');
  const gc = runInNewContext('gc') as () => void;
  gc();
  const before = process.memoryUsage().heapUsed;
  const fleet = new Fleet();
  const t = Date.now();
  for (let i = 0; i < pods; i++) {
    fleet.apply(readiness('mem', i, t), t);
    fleet.apply(metrics('mem', i, t), t);
  }
  gc();
  const after = process.memoryUsage().heapUsed;
  if (fleet.pool('mem')?.readyCount !== pods) throw new Error('memory fleet incomplete');
  return after - before;
}

const utf8 = new TextDecoder('utf-8', { fatal: true });

/** Decoding as it was before the precompiled check (the same-run baseline): zod's safeParse, the subject parsed. */
function decodeWithZod(payload: Uint8Array, subject: string): SpillwayEvent | undefined {
  const parsed = spillwayEventSchema.safeParse(JSON.parse(utf8.decode(payload)));
  if (!parsed.success) return undefined;
  const parts = parseSubject(subject);
  const e = parsed.data;
  return parts && parts.pool === e.pool && parts.zone === e.zone && parts.pod === e.pod && parts.kind === e.kind ? e : undefined;
}

/** CPU ns per call of each function, rounds alternating; the median round of each. */
function nsPerCall(calls: number, rounds: number, fns: (() => unknown)[]): number[] {
  const samples: number[][] = fns.map(() => []);
  for (let r = 0; r < rounds; r++) {
    fns.forEach((fn, k) => {
      for (let i = 0; i < calls / 10; i++) fn();
      const cpu = process.cpuUsage();
      for (let i = 0; i < calls; i++) fn();
      (samples[k] as number[]).push((cpuSince(cpu) * 1000) / calls);
    });
  }
  return samples.map(median);
}

interface DecodeCosts {
  kind: string;
  zodDecode: number;
  fastDecode: number;
  zodCheck: number;
  fastCheck: number;
}

/** One event of each kind, decoded and validated both ways; also proves both agree on it. */
function decodeCosts(quick: boolean): DecodeCosts[] {
  const fast = compileSchema(spillwayEventSchema);
  const t = Date.now();
  const events: SpillwayEvent[] = [
    { ...metrics('llama', 7, t), lora: { running: ['sql-lora'], waiting: [], max: 4 }, cache: { blockSize: 16, numBlocks: 29_000 } },
    { ...readiness('llama', 7, t), labels: { app: 'llama' } },
  ];
  return events.map((event) => {
    const payload = encodeEvent(event);
    const subject = subjectOf(event);
    const json: unknown = JSON.parse(utf8.decode(payload));
    const viaZod = decodeWithZod(payload, subject);
    const viaFast = decodeEvent(payload, subject);
    if (!viaFast.ok || !isDeepStrictEqual(viaFast.event, viaZod)) throw new Error(`decoders disagree on ${event.kind}`);
    const [zodDecode, fastDecode, zodCheck, fastCheck] = nsPerCall(quick ? 20_000 : 100_000, quick ? 3 : 5, [
      () => decodeWithZod(payload, subject),
      () => decodeEvent(payload, subject),
      () => spillwayEventSchema.safeParse(json),
      () => fast(json),
    ]) as [number, number, number, number];
    return { kind: event.kind, zodDecode, fastDecode, zodCheck, fastCheck };
  });
}

const REPLAY_TARGET = 0.75;
const LAG_RATIO_TARGET = 1.5;
const LAG_P99_TARGET_MS = 20;

function verdict(met: boolean, quiet: boolean): string {
  return `${met ? 'MET' : 'NOT MET'}${quiet ? '' : ' (machine not quiet: provisional)'}`;
}

async function run(context: BenchContext): Promise<string> {
  const pods = context.quick ? 2_000 : 10_000;
  const rounds = context.quick ? 2 : 5;
  const liveTotal = context.quick ? 40_000 : 200_000;
  const lagSeconds = context.quick ? 2 : 5;
  const lagRounds = context.quick ? 1 : 3;

  context.log('decode: CPU per event, zod alone against the precompiled check');
  const costs = decodeCosts(context.quick);

  const server = await startNatsServer({ forcePrivate: true });
  const nc = await connectNats({ servers: [server.url] });
  try {
    const jsm = await jetstreamManager(nc);
    await ensureStream(jsm);
    const publisher = new EventPublisher(nc);

    context.log(`publishing ${pods} pods (readiness acked + metrics core)`);
    await publishPool(publisher, 'replay', pods);
    await waitStored(jsm, pods * 2);
    const raw: Replay[] = [];
    const bus: Replay[] = [];
    const zodApply: Replay[] = [];
    const fastApply: Replay[] = [];
    const parsed: Replay[] = [];
    // Round 0 warms every consumer up (the JIT, nats.js's buffers) and is not counted.
    for (let r = 0; r <= rounds; r++) {
      // Alternate the order, so a trend in the machine's load does not favour one.
      const runs: (() => Promise<void>)[] = [
        async () => void raw.push(await rawReplay(nc, 'replay')),
        async () => {
          const result = await readerReplay(nc, 'replay');
          if (result.fleet.pool('replay')?.readyCount !== pods) throw new Error("the reader's replay left pods out");
          bus.push(result);
        },
        async () => void zodApply.push(await decodeAndApply(nc, 'replay', true)),
        async () => void fastApply.push(await decodeAndApply(nc, 'replay', false)),
        async () => void parsed.push(await parseOnly(nc, 'replay')),
      ];
      for (const step of r % 2 === 0 ? runs : runs.reverse()) await step();
      for (const replay of [raw, bus, zodApply, fastApply, parsed])
        if (replay.at(-1)?.count !== pods * 2) throw new Error(`replay incomplete: ${replay.at(-1)?.count}`);
      if (r === 0) {
        for (const replay of [raw, bus, zodApply, fastApply, parsed]) replay.pop();
        context.log('replay warm-up round done (not counted)');
        continue;
      }
      const x = raw.at(-1) as Replay;
      const y = bus.at(-1) as Replay;
      context.log(
        `replay round ${r + 1}: raw ${x.ms.toFixed(0)} ms (${(x.cpuUs / x.count).toFixed(1)} µs CPU/msg), reader ${y.ms.toFixed(0)} ms (${(y.cpuUs / y.count).toFixed(1)} µs CPU/msg)`,
      );
    }
    const rawMs = median(raw.map((x) => x.ms));
    const busMs = median(bus.map((x) => x.ms));
    const rawCpu = median(raw.map((x) => x.cpuUs / x.count));
    const busCpu = median(bus.map((x) => x.cpuUs / x.count));
    const replayRatio = rawMs / busMs;
    const parsedMs = median(parsed.map((x) => x.ms));
    const inline = (replays: Replay[]) =>
      `${median(replays.map((x) => x.ms)).toFixed(0)} ms; ${median(replays.map((x) => x.cpuUs / x.count)).toFixed(1)} µs CPU/msg`;

    context.log(`live: ${liveTotal} metrics from a child process, flat out`);
    const benchNats: BenchNats = { nc, jsm, url: server.url };
    const liveRaw = await liveRate(benchNats, { pool: 'live-raw', pods: 1_000, raw: true }, liveTotal);
    const liveBus = await liveRate(benchNats, { pool: 'live-bus', pods: 1_000, raw: false }, liveTotal);

    context.log(`lag: 1,000 pods x 10 samples/s for ${lagSeconds} s, ${lagRounds} round(s) each, alternating`);
    const lagRawAll: number[] = [];
    const lagBusAll: number[] = [];
    let lagRawCpu = 0;
    let lagBusCpu = 0;
    for (let r = 0; r < lagRounds; r++) {
      for (const isRaw of r % 2 === 0 ? [true, false] : [false, true]) {
        const cpu = process.cpuUsage();
        const lags = await lag(benchNats, { pool: `lag-${isRaw ? 'raw' : 'bus'}-${r}`, pods: 1_000, raw: isRaw }, 10_000, lagSeconds);
        const used = cpuSince(cpu);
        (isRaw ? lagRawAll : lagBusAll).push(...lags);
        if (isRaw) lagRawCpu += used;
        else lagBusCpu += used;
      }
    }
    const lagRaw = lagRawAll.sort((a, b) => a - b);
    const lagBus = lagBusAll.sort((a, b) => a - b);
    const lagRawP99 = percentile(lagRaw, 99);
    const lagBusP99 = percentile(lagBus, 99);

    const memory = fleetMemory(10_000);

    const rate = (n: number, sec: number) => `${Math.round(n / sec).toLocaleString('en-US')}/s`;
    const cpuPer = (us: number, n: number) => `${(us / n).toFixed(1)} µs CPU/msg`;
    const decodeTable = markdownTable(
      ['one event, CPU per call', 'zod alone (before, same run)', 'precompiled check (now)', 'before / now'],
      costs.flatMap((c) => [
        [
          `decode a ${c.kind} event (UTF-8, JSON, validate, subject)`,
          `${c.zodDecode.toFixed(0)} ns`,
          `${c.fastDecode.toFixed(0)} ns`,
          `${(c.zodDecode / c.fastDecode).toFixed(1)}×`,
        ],
        [
          `validate a ${c.kind} event (parsed JSON in hand)`,
          `${c.zodCheck.toFixed(0)} ns`,
          `${c.fastCheck.toFixed(0)} ns`,
          `${(c.zodCheck / c.fastCheck).toFixed(1)}×`,
        ],
      ]),
    );
    const table = markdownTable(
      ['measure', 'raw ordered consumer (baseline)', '@spillway/bus reader → Fleet', 'reader / raw'],
      [
        [
          `replay ${pods.toLocaleString('en-US')} pods (${(pods * 2).toLocaleString('en-US')} msgs), median of ${rounds} after a warm-up round`,
          `${rawMs.toFixed(0)} ms (${rate(pods * 2, rawMs / 1000)}; ${rawCpu.toFixed(1)} µs CPU/msg)`,
          `${busMs.toFixed(0)} ms (${rate(pods * 2, busMs / 1000)}; ${busCpu.toFixed(1)} µs CPU/msg)`,
          `${replayRatio.toFixed(2)}× the rate`,
        ],
        [
          'the same replay, the raw consumer plus UTF-8 decode and `JSON.parse` only (the floor for any JSON reader)',
          '',
          `${inline(parsed)}`,
          `${(rawMs / parsedMs).toFixed(2)}× the rate; the reader is ${(parsedMs / busMs).toFixed(2)}× this`,
        ],
        [
          'the same replay, decode and apply in the consumer loop: zod alone (before) → precompiled check (now)',
          '',
          `${inline(zodApply)} → ${inline(fastApply)}`,
          '',
        ],
        [
          `live ingestion, ${liveTotal.toLocaleString('en-US')} metrics published flat out by a child process`,
          `${rate(liveRaw.handled, liveRaw.seconds)} (${liveRaw.handled.toLocaleString('en-US')} delivered, publisher ${rate(liveTotal, liveRaw.publishSeconds)}; ${cpuPer(liveRaw.cpuUs, liveRaw.handled)})`,
          `${rate(liveBus.handled, liveBus.seconds)} applied (${liveBus.handled.toLocaleString('en-US')} delivered, publisher ${rate(liveTotal, liveBus.publishSeconds)}; ${cpuPer(liveBus.cpuUs, liveBus.handled)})`,
          `${(liveBus.handled / liveBus.seconds / (liveRaw.handled / liveRaw.seconds)).toFixed(2)}×`,
        ],
        [
          `publish → visible lag, 1,000 pods × 10 samples/s, ${lagRounds} × ${lagSeconds} s (p50 / p99 / max)`,
          `${percentile(lagRaw, 50)} / ${lagRawP99} / ${lagRaw.at(-1)} ms (${lagRaw.length} msgs; ${cpuPer(lagRawCpu, lagRaw.length)})`,
          `${percentile(lagBus, 50)} / ${lagBusP99} / ${lagBus.at(-1)} ms (${lagBus.length} msgs; ${cpuPer(lagBusCpu, lagBus.length)})`,
          `${(lagBusP99 / Math.max(1, lagRawP99)).toFixed(2)}× the p99`,
        ],
        [
          'heap of a Fleet holding 10,000 pods (readiness + metrics)',
          '',
          `${(memory / 2 ** 20).toFixed(1)} MiB (${Math.round(memory / 10_000)} B/pod)`,
          '',
        ],
      ],
    );
    const quiet = context.quiet.quiet;
    const targets = markdownTable(
      ['target', 'measured', 'result'],
      [
        [
          `replay ingestion ≥ ${REPLAY_TARGET}× the raw ordered consumer's rate`,
          `${replayRatio.toFixed(2)}×`,
          verdict(replayRatio >= REPLAY_TARGET, quiet),
        ],
        [
          `event lag p99 ≤ ${LAG_RATIO_TARGET}× the raw consumer's and < ${LAG_P99_TARGET_MS} ms`,
          `${lagBusP99} ms against ${lagRawP99} ms (${(lagBusP99 / Math.max(1, lagRawP99)).toFixed(2)}×)`,
          verdict(lagBusP99 <= LAG_RATIO_TARGET * Math.max(1, lagRawP99) && lagBusP99 < LAG_P99_TARGET_MS, quiet),
        ],
      ],
    );
    return [
      `## ${events.title}`,
      '',
      targets,
      '',
      replayBudget(rawMs, parsedMs, busMs, pods * 2),
      '',
      'Decoding one event, this process\'s CPU per call (median of alternating rounds). "zod alone" is how',
      '`decodeEvent` worked before the precompiled check: `safeParse` on every event and the subject parsed',
      'and compared field by field. Now a check compiled from the same zod schema accepts the event (zod',
      'still explains every rejection) and the subject is compared with the one the event names.',
      '',
      decodeTable,
      '',
      'One private nats-server 2.9 (file storage), stream `SPILLWAY` with the defaults of docs/events.md. The',
      'baseline is an ordered consumer (`last_per_subject` for replay, `new` for live) that counts',
      'messages without decoding (the lag baseline parses the JSON for `observedAt`); the reader decodes',
      'each one (`decodeEvent`) and applies it to a `Fleet`. Raw and reader rounds alternate. Live traffic',
      'is published with core NATS by a child process; the stream keeps one message per subject, so a',
      'consumer that falls behind skips superseded samples ("delivered" < published is expected and',
      'harmless). Lag is `Date.now()` at apply minus the `observedAt` the publisher stamped, on the same',
      "host clock. Timings include consumer creation; CPU is this process's (the client), from",
      '`process.cpuUsage`.',
      '',
      table,
    ].join('\n');
  } finally {
    await nc.close();
    await server.stop();
  }
}

/**
 * What the replay target leaves a reader once it has paid for UTF-8 and JSON.parse, which every
 * reader of these events must: the time at the target beyond the parse-only floor, against the
 * reader's own.
 */
function replayBudget(rawMs: number, parsedMs: number, readerMs: number, messages: number): string {
  const allowedMs = rawMs / REPLAY_TARGET;
  const perMsg = (ms: number) => `${((ms * 1000) / messages).toFixed(2)} µs/msg`;
  const budget = allowedMs - parsedMs;
  return [
    `The raw consumer does not decode. The same consumer decoding each message's UTF-8 and calling \`JSON.parse\` on it, and nothing else, replays at ${(rawMs / parsedMs).toFixed(2)}× the raw rate (${parsedMs.toFixed(0)} ms against ${rawMs.toFixed(0)} ms): that is the floor for any reader of JSON events.`,
    `At ${REPLAY_TARGET}× the reader may take ${allowedMs.toFixed(0)} ms, which leaves validation, the subject check and applying to the view ${budget > 0 ? `${budget.toFixed(0)} ms (${perMsg(budget)})` : 'no time at all'} beyond the floor; they take ${(readerMs - parsedMs).toFixed(0)} ms (${perMsg(readerMs - parsedMs)}).`,
  ].join(' ');
}
