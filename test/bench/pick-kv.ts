import { kvBlockKeys, type KvBatch } from '@spillway/events';
import { Fleet } from '@spillway/fleet';
import { KvBlockIndex, Scheduler, seededRng, type Decision, type PickRequest } from '@spillway/scheduler';
import { markdownTable, percentile, type BenchContext } from './part.js';

/**
 * The `pick` part's precise-index case: `Scheduler.pick` with a 2,000-token prompt's token ids
 * (tokenization excluded: the EPP caches it) over 1,000 endpoints in 3 zones whose precise block
 * index is populated (every pod holds 1,000 blocks: 1 M entries; each prompt family's prefix is held
 * by 1–30 pods in every zone), against the same picks without token ids (the approximate index
 * alone) measured in the same run. Target: p99 < 100 µs. Also what the index costs to feed.
 */
const POOL = 'bench';
const ZONES = [
  { zone: 'zone-a', region: 'r1' },
  { zone: 'zone-b', region: 'r1' },
  { zone: 'zone-c', region: 'r2' },
];
const SIZE = 1_000;
const BLOCK = 16;
const BLOCKS_PER_POD = 1_000;
const PROMPT_TOKENS = 2_000;
const FAMILIES = 16;
const PICK_INTERVAL_MS = 0.2;
const SAMPLE_EVERY_MS = 100;
const IN_FLIGHT = 64;
export const PRECISE_P99_TARGET_US = 100;

const zoneOf = (i: number) => ZONES[i % ZONES.length] as (typeof ZONES)[number];
const addressOf = (i: number) => `10.${(i >> 16) & 255}.${(i >> 8) & 255}.${i & 255}:8000`;

function resample(fleet: Fleet, rng: () => number, now: number): void {
  for (let i = 0; i < SIZE; i++) {
    fleet.apply(
      {
        v: 1,
        kind: 'metrics',
        pool: POOL,
        zone: zoneOf(i).zone,
        pod: `pod-${i}`,
        observedAt: now,
        waitingRequests: Math.floor(rng() * 6),
        runningRequests: Math.floor(rng() * 30),
        kvCacheUsage: rng() * 0.95,
        cache: { blockSize: BLOCK, numBlocks: 20_000 },
      },
      now,
    );
  }
}

/** Prompt families: a shared 1,200-token head per family, then a per-request tail (2,000 tokens in all). */
function prompts(rng: () => number): Uint32Array[] {
  const out: Uint32Array[] = [];
  for (let f = 0; f < FAMILIES; f++) {
    for (let v = 0; v < 4; v++) {
      const ids = new Uint32Array(PROMPT_TOKENS);
      for (let t = 0; t < PROMPT_TOKENS; t++) ids[t] = t < 1_200 ? (f * 7_919 + t * 31) % 151_000 : Math.floor(rng() * 151_000);
      out.push(ids);
    }
  }
  return out;
}

function storedBatch(i: number, seq: number, keys: number[]): KvBatch {
  return { v: 1, pool: POOL, zone: zoneOf(i).zone, pod: `pod-${i}`, seq, observedAt: 0, blockSize: BLOCK, events: [[1, keys]] };
}

/** Fills a scheduler's (or a bare index's) KV data: filler blocks per pod, and each family's prompts on 1–30 pods. */
function populate(apply: (batch: KvBatch) => void, rng: () => number, families: Uint32Array[]): number {
  let keys = 0;
  const seqs = new Array<number>(SIZE).fill(0);
  for (let i = 0; i < SIZE; i++) {
    const filler: number[] = [];
    for (let b = 0; b < BLOCKS_PER_POD - 125; b++) filler.push(Math.floor(rng() * 2 ** 52));
    apply(storedBatch(i, (seqs[i] = (seqs[i] as number) + 1), filler));
    keys += filler.length;
  }
  for (const ids of families) {
    const chain = kvBlockKeys(ids, BLOCK);
    const holders = 1 + Math.floor(rng() * 30);
    for (let h = 0; h < holders; h++) {
      const i = Math.floor(rng() * SIZE);
      const depth = 1 + Math.floor(rng() * chain.length);
      apply(storedBatch(i, (seqs[i] = (seqs[i] as number) + 1), chain.slice(0, depth)));
      keys += depth;
    }
  }
  return keys;
}

interface Stats {
  p50: number;
  p99: number;
  cpuUsPerPick: number;
}

/** What a measurement picks with: the scheduler, its pool, and the prompts' token-id families. */
interface KvPickSetup {
  readonly scheduler: Scheduler;
  readonly fleet: Fleet;
  readonly families: Uint32Array[];
}

/** `withIds`: requests carry their prompt's token ids (the precise index), or not (the approximate one). */
function measure(
  { scheduler, fleet, families }: KvPickSetup,
  { picks, warmup, startAt }: { picks: number; warmup: number; startAt: number },
  withIds: boolean,
): Stats {
  const rng = seededRng(7);
  const latencies = new Float64Array(picks);
  const outstanding: Decision[] = [];
  let now = startAt;
  let nextSample = startAt + SAMPLE_EVERY_MS;
  let cpu = process.cpuUsage();
  for (let i = -warmup; i < picks; i++) {
    if (i === 0) cpu = process.cpuUsage();
    now += PICK_INTERVAL_MS;
    if (now >= nextSample) {
      // Outside the CPU figure as well as the latency one.
      const before = process.cpuUsage();
      resample(fleet, rng, now);
      const spent = process.cpuUsage(before);
      cpu = { user: cpu.user + spent.user, system: cpu.system + spent.system };
      nextSample += SAMPLE_EVERY_MS;
    }
    const ids = families[(i + warmup) % families.length] as Uint32Array;
    const request: PickRequest = { model: 'llama', promptTokens: PROMPT_TOKENS, ...(withIds ? { promptTokenIds: ids } : {}) };
    const started = process.hrtime.bigint();
    const d = scheduler.pick(request, now);
    const elapsed = Number(process.hrtime.bigint() - started);
    if (i >= 0) latencies[i] = elapsed;
    scheduler.commit(d, now);
    outstanding.push(d);
    if (outstanding.length > IN_FLIGHT) scheduler.release(outstanding.shift() as Decision);
  }
  const used = process.cpuUsage(cpu);
  latencies.sort();
  return { p50: percentile(latencies, 50) / 1000, p99: percentile(latencies, 99) / 1000, cpuUsPerPick: (used.user + used.system) / picks };
}

const us = (v: number): string => (v < 10 ? v.toFixed(2) : v.toFixed(1));

/** Runs the case; returns its markdown lines and whether the target was met. */
export function preciseCase(context: BenchContext): { lines: string[]; met: boolean; p99: number } {
  const picks = context.quick ? 3_000 : 30_000;
  const warmup = context.quick ? 500 : 3_000;
  const t0 = 1_764_420_000_000;
  const rng = seededRng(11);
  const fleet = new Fleet();
  for (let i = 0; i < SIZE; i++) {
    const { zone, region } = zoneOf(i);
    fleet.apply(
      { v: 1, kind: 'readiness', pool: POOL, zone, region, pod: `pod-${i}`, address: addressOf(i + 1), ready: true, observedAt: t0 - 1000 },
      t0 - 1000,
    );
  }
  resample(fleet, rng, t0);
  const families = prompts(rng);
  const scheduler = new Scheduler({ fleet, pool: POOL, zone: 'zone-a', region: 'r1', seed: 1 });

  // Feeding the index: CPU per relayed key (1 M keys in batches of up to 875).
  const feedStart = process.cpuUsage();
  const fed = populate((batch) => scheduler.applyKvBatch(batch, t0), seededRng(5), families);
  const feed = process.cpuUsage(feedStart);
  const feedNsPerKey = ((feed.user + feed.system) * 1000) / fed;
  const stats = scheduler.kvIndexStats;

  // A lookup alone (hash 125 blocks, walk the holders), on a bare index with the same data.
  const bare = new KvBlockIndex(POOL);
  populate((batch) => bare.applyBatch(batch, t0), seededRng(5), families);
  const lookups = new Float64Array(picks);
  for (let i = -warmup; i < picks; i++) {
    const started = process.hrtime.bigint();
    bare.prepare(families[(i + warmup) % families.length] as Uint32Array, 0);
    if (i >= 0) lookups[i] = Number(process.hrtime.bigint() - started);
  }
  lookups.sort();

  const setup: KvPickSetup = { scheduler, fleet, families };
  const precise = measure(setup, { picks, warmup, startAt: t0 }, true);
  const approximate = measure(setup, { picks, warmup, startAt: t0 + 3_600_000 }, false);
  const met = precise.p99 < PRECISE_P99_TARGET_US;
  context.log(
    `precise pick at ${SIZE} endpoints: p50 ${us(precise.p50)} µs, p99 ${us(precise.p99)} µs (approximate p99 ${us(approximate.p99)} µs)`,
  );
  const lines = [
    '### Precise prefix scoring (block index populated)',
    '',
    `\`Scheduler.pick\` with a ${PROMPT_TOKENS.toLocaleString('en-US')}-token prompt's token ids (tokenization excluded), ${SIZE.toLocaleString('en-US')} endpoints in 3 zones, no subset,`,
    `every pod holding ${BLOCKS_PER_POD.toLocaleString('en-US')} blocks in the precise index (${stats.blocks.toLocaleString('en-US')} entries, ~${(stats.bytes / 2 ** 20).toFixed(0)} MiB estimated),`,
    `${FAMILIES * 4} prompts in ${FAMILIES} families each held (1–30 pods, partial prefixes) in every zone; baseline: the same picks without token ids`,
    '(approximate index only), same run, same fleet. CPU per pick from `process.cpuUsage` (samples excluded).',
    '',
    markdownTable(
      ['case', 'p50 µs', 'p99 µs', 'CPU µs/pick'],
      [
        ['precise (token ids)', us(precise.p50), us(precise.p99), us(precise.cpuUsPerPick)],
        ['approximate (no token ids)', us(approximate.p50), us(approximate.p99), us(approximate.cpuUsPerPick)],
        ['lookup alone (125 keys hashed + holder walk)', us(percentile(lookups, 50) / 1000), us(percentile(lookups, 99) / 1000), '–'],
      ],
    ),
    '',
    `- Target: precise pick p99 < ${PRECISE_P99_TARGET_US} µs at ${SIZE.toLocaleString('en-US')} endpoints (excluding tokenization): **${met ? 'MET' : 'NOT MET'}** (${us(precise.p99)} µs).`,
    `- Feeding the index: ${feedNsPerKey.toFixed(0)} ns CPU per relayed key (${fed.toLocaleString('en-US')} keys).`,
  ];
  return { lines, met, p99: precise.p99 };
}
