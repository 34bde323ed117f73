import { parseAddressPattern } from '@spillway/events';
import { Fleet, type Endpoint } from '@spillway/fleet';
import {
  defaultScorers,
  hashPromptBlocks,
  parseSchedulerConfig,
  prefixSeed,
  Scheduler,
  scoreGroup,
  seededRng,
  type Decision,
  type PickRequest,
  type Policy,
  type ScoringContext,
  type SubsetMode,
} from '@spillway/scheduler';
import { FlowControl } from '../../services/epp/src/request/flow-control.js';
import { markdownTable, median, percentile, type BenchContext, type BenchPart } from './part.js';
import { preciseCase } from './pick-kv.js';

/**
 * `pick`: the scheduler's cost per request, over pools of 10 to 10,000 endpoints in 3 zones, with
 * and without a subset, against a naive picker measured in the same run (filter the whole pool,
 * score every eligible endpoint with the same scorers, sort them all). The default policy (`cost`)
 * everywhere, and `weighted` too at 1,000 endpoints, where the performance target applies: pick p99 under
 * 100 µs with no subset and with 16- and 256-entry subsets, strict and locality.
 *
 * Virtual time runs at 5,000 picks per second per EPP; every 100 ms of it every endpoint gets a
 * fresh metrics sample (outside the timing), so stale metrics, shortlist rescans (20 ms) and the
 * picks the samples absorb behave as in a busy EPP. 64 requests are in flight at any time. The
 * subset hint is handed over as the EPP gets it: a list of strings freshly decoded for every
 * request (outside the timing), never the same objects twice.
 */
const POOL = 'bench';
const ZONES = [
  { zone: 'zone-a', region: 'r1' },
  { zone: 'zone-b', region: 'r1' },
  { zone: 'zone-c', region: 'r2' },
];
const PICK_INTERVAL_MS = 0.2;
const SAMPLE_EVERY_MS = 100;
const IN_FLIGHT = 64;

const SYSTEM = 'You are a careful assistant for an online bookshop. Answer briefly, cite titles, never invent prices. '.repeat(10);
const PROMPTS = Array.from(
  { length: 8 },
  (_, i) => `${SYSTEM}\nUser ${i}: ${`question number ${i} about a book I read last summer; `.repeat(18)}`,
);

interface Row {
  size: number;
  subset: number | undefined;
  mode: SubsetMode;
  policy: Policy;
}

interface Stats {
  p50: number;
  p99: number;
  perSecond: number;
  /** Process CPU per pick, µs (user + system over the timed picks: robust on a shared machine). */
  cpu: number;
}

/** The pick target: p99 under this many µs at TARGET_SIZE endpoints, every subset shape, both modes. */
const TARGET_P99_US = 100;
const TARGET_SIZE = 1_000;

function addressOf(i: number): string {
  return `10.${(i >> 16) & 255}.${(i >> 8) & 255}.${i & 255}:8000`;
}

function buildFleet(size: number, rng: () => number, now: number): Fleet {
  const fleet = new Fleet();
  for (let i = 0; i < size; i++) {
    const { zone, region } = ZONES[i % ZONES.length] as (typeof ZONES)[number];
    fleet.apply(
      {
        v: 1,
        kind: 'readiness',
        pool: POOL,
        zone,
        region,
        pod: `pod-${i}`,
        address: addressOf(i + 1),
        ready: true,
        observedAt: now - 1000,
      },
      now - 1000,
    );
  }
  resample(fleet, size, rng, now);
  return fleet;
}

/** Fresh samples for every pod: ~25% saturated by queue or KV, the rest spread over the range. */
function resample(fleet: Fleet, size: number, rng: () => number, now: number): void {
  for (let i = 0; i < size; i++) {
    const zone = (ZONES[i % ZONES.length] as (typeof ZONES)[number]).zone;
    fleet.apply(
      {
        v: 1,
        kind: 'metrics',
        pool: POOL,
        zone,
        pod: `pod-${i}`,
        observedAt: now,
        waitingRequests: Math.floor(rng() * 6),
        runningRequests: Math.floor(rng() * 30),
        kvCacheUsage: rng() * 0.95,
        cache: { blockSize: 16, numBlocks: 20_000 },
      },
      now,
    );
  }
}

function subsetFor(fleet: Fleet, size: number | undefined): string[] | undefined {
  if (size === undefined) return undefined;
  const local = [...(fleet.pool(POOL)?.readyInZone('zone-a') ?? [])];
  if (local.length < size) return undefined;
  return local.slice(0, size).map((ep) => ep.address as string);
}

/**
 * The hint as the EPP hands it over: strings decoded from the request's bytes, new every request
 * (a pick cannot recognise a repeated hint by its identity, only by its content).
 */
function hintDecoder(subset: readonly string[] | undefined): () => string[] | undefined {
  if (subset === undefined) return () => undefined;
  const encoder = new TextEncoder();
  const decoder = new TextDecoder();
  const encoded = subset.map((entry) => encoder.encode(entry));
  return () => encoded.map((bytes) => decoder.decode(bytes));
}

/**
 * The naive picker: the same eligibility, saturation and scorers, but over the whole pool with a
 * full sort and no prefix index (it still hashes the prompt, so both sides pay that).
 */
function naivePicker(fleet: Fleet, mode: SubsetMode) {
  const config = parseSchedulerConfig({ subsetMode: mode });
  const scorers = defaultScorers(config.weights);
  const hashes = new Float64Array(config.prefix.maxBlocks);
  const rng = seededRng(9);
  const tierOf = (zone: string | undefined): number => (zone === 'zone-a' ? 0 : zone === 'zone-b' ? 1 : 2);
  return (request: PickRequest, now: number): string => {
    hashPromptBlocks(request.prompt ?? '', prefixSeed(request.model), 64, config.prefix.maxBlocks, hashes);
    const subset = request.subset as string[] | undefined;
    const patterns = subset?.map((entry) => parseAddressPattern(entry)).filter((p) => p !== undefined);
    const eligible: Endpoint[] = [];
    for (const ep of fleet.pool(POOL)?.endpoints() ?? []) {
      if (!ep.ready || ep.deleted || ep.address === undefined) continue;
      const inSubset = patterns === undefined || patterns.some((p) => (p.port === undefined ? p.ip === ep.ip : p.key === ep.address));
      if (inSubset || (mode === 'locality' && ep.zone !== 'zone-a')) eligible.push(ep);
    }
    const scores = new Float64Array(eligible.length);
    const context: ScoringContext = { model: request.model, now, prefixBlocks: 0, prefixMatch: () => 0 };
    scoreGroup(scorers, context, eligible, eligible.length, { scorer: new Float64Array(eligible.length), scores });
    const ranked = eligible.map((ep, i) => {
      const m = ep.metrics;
      const saturated =
        !m || now - m.receivedAt > fleet.staleAfterMs || m.waitingRequests + ep.unsampledPicks >= 5 || m.kvCacheUsage >= 0.8;
      return { ep, saturated, tier: tierOf(ep.zone), score: (scores[i] as number) + rng() * 1e-9 };
    });
    ranked.sort((a, b) => Number(a.saturated) - Number(b.saturated) || a.tier - b.tier || b.score - a.score);
    return ranked
      .slice(0, 3)
      .map((r) => r.ep.address)
      .join(',');
  };
}

/** The pool a measurement picks from, and the subset hint its requests carry. */
interface PickPool {
  readonly fleet: Fleet;
  readonly size: number;
  readonly subset: string[] | undefined;
}

/** How many picks are timed, after how many untimed ones, from when on the clock (ms). */
interface PickRun {
  readonly picks: number;
  readonly warmup: number;
  readonly startAt: number;
}

/** The picker timed, and what follows each pick, untimed (commit and release). */
interface Picker {
  pick(request: PickRequest, now: number): Decision | string;
  after(result: Decision | string, now: number): void;
}

function measure({ fleet, size, subset }: PickPool, { picks, warmup, startAt }: PickRun, picker: Picker): Stats {
  const rng = seededRng(size);
  const latencies = new Float64Array(picks);
  const hint = hintDecoder(subset);
  let now = startAt;
  let nextSample = startAt + SAMPLE_EVERY_MS;
  let cpu = 0;
  for (let i = -warmup; i < picks; i++) {
    now += PICK_INTERVAL_MS;
    if (now >= nextSample) {
      resample(fleet, size, rng, now);
      nextSample += SAMPLE_EVERY_MS;
    }
    const request: PickRequest = { model: 'llama', prompt: PROMPTS[(i + warmup) % PROMPTS.length], subset: hint() };
    const cpuStarted = process.cpuUsage();
    const started = process.hrtime.bigint();
    const result = picker.pick(request, now);
    const elapsed = Number(process.hrtime.bigint() - started);
    const used = process.cpuUsage(cpuStarted);
    if (i >= 0) {
      latencies[i] = elapsed;
      cpu += used.user + used.system;
    }
    picker.after(result, now);
  }
  const total = latencies.reduce((a, b) => a + b, 0);
  latencies.sort();
  return {
    p50: percentile(latencies, 50) / 1000,
    p99: percentile(latencies, 99) / 1000,
    perSecond: picks / (total / 1e9),
    cpu: cpu / picks,
  };
}

const us = (v: number): string => (v < 10 ? v.toFixed(2) : v.toFixed(1));
const rate = (v: number): string => (v >= 1e6 ? `${(v / 1e6).toFixed(2)} M` : `${(v / 1e3).toFixed(0)} k`);

export const pick: BenchPart = {
  name: 'pick',
  title: 'Scheduler pick latency',
  async run(context) {
    const picks = context.quick ? 3_000 : 30_000;
    const warmup = context.quick ? 500 : 3_000;
    const rows: Row[] = [];
    const shapes = (size: number, policy: Policy): Row[] => [
      { size, subset: undefined, mode: 'strict', policy },
      ...[16, 256].flatMap((subset) => (['strict', 'locality'] as const).map((mode) => ({ size, subset, mode, policy }))),
    ];
    for (const size of [10, 100, 1_000, 10_000]) rows.push(...shapes(size, 'cost'));
    rows.push(...shapes(TARGET_SIZE, 'weighted'));
    const table: (string | number)[][] = [];
    const verdicts: string[] = [];
    for (const row of rows) {
      const t0 = 1_764_420_000_000;
      const fleet = buildFleet(row.size, seededRng(row.size), t0);
      const subset = subsetFor(fleet, row.subset);
      if (row.subset !== undefined && subset === undefined) continue;
      const scheduler = new Scheduler({
        fleet,
        pool: POOL,
        zone: 'zone-a',
        region: 'r1',
        seed: 1,
        config: { subsetMode: row.mode, policy: row.policy },
      });
      const outstanding: Decision[] = [];
      const pool: PickPool = { fleet, size: row.size, subset };
      const ours = measure(
        pool,
        { picks, warmup, startAt: t0 },
        {
          pick: (request, now) => scheduler.pick(request, now),
          after: (result, now) => {
            const decision = result as Decision;
            scheduler.commit(decision, now);
            outstanding.push(decision);
            if (outstanding.length > IN_FLIGHT) scheduler.release(outstanding.shift() as Decision);
          },
        },
      );
      const naivePicks = Math.max(300, Math.min(picks, Math.floor((context.quick ? 3e5 : 3e6) / row.size)));
      const naive = measure(
        pool,
        { picks: naivePicks, warmup: Math.min(warmup, naivePicks), startAt: t0 + 3_600_000 },
        { pick: naivePicker(fleet, row.mode), after: () => undefined },
      );
      const label = row.subset === undefined ? 'none' : `${row.subset} ${row.mode}`;
      context.log(
        `${row.size} endpoints, ${row.policy}, subset ${label}: p50 ${us(ours.p50)} µs, p99 ${us(ours.p99)} µs, CPU ${us(ours.cpu)} µs/pick; naive p99 ${us(naive.p99)} µs`,
      );
      table.push([
        row.size.toLocaleString('en-US'),
        row.policy,
        label,
        rate(ours.perSecond),
        us(ours.p50),
        us(ours.p99),
        us(ours.cpu),
        rate(naive.perSecond),
        us(naive.p50),
        us(naive.p99),
        `${(naive.p50 / ours.p50).toFixed(1)}×`,
      ]);
      if (row.size === TARGET_SIZE) {
        const met = ours.p99 < TARGET_P99_US;
        verdicts.push(
          `- ${row.policy}, subset ${label}: p99 ${us(ours.p99)} µs (p50 ${us(ours.p50)} µs, CPU ${us(ours.cpu)} µs/pick) — ${met ? '**MET**' : '**NOT MET**'}${row.policy === 'weighted' ? ' (reported; the target names the default policy)' : ''}`,
        );
      }
    }
    // The prompt hashing every pick pays, whatever the pool: the floor under the small pools' figures.
    const hashes = new Float64Array(256);
    const hashTimes = new Float64Array(picks);
    for (let i = -warmup; i < picks; i++) {
      const started = process.hrtime.bigint();
      hashPromptBlocks(PROMPTS[(i + warmup) % PROMPTS.length] as string, prefixSeed('llama'), 64, 256, hashes);
      if (i >= 0) hashTimes[i] = Number(process.hrtime.bigint() - started);
    }
    hashTimes.sort();
    const hashLine = `Hashing one such prompt alone (included above): p50 ${us(percentile(hashTimes, 50) / 1000)} µs, p99 ${us(percentile(hashTimes, 99) / 1000)} µs.`;
    context.log(hashLine);
    const provisional = context.quiet.quiet
      ? ''
      : ' The machine was not quiet when this part ran (see below): latency percentiles are provisional, CPU per pick is the steadier figure.';
    return [
      '## Scheduler pick latency',
      '',
      'One `Scheduler.pick` per request (single thread, µs per pick from `process.hrtime.bigint`, CPU per',
      'pick from `process.cpuUsage`), with the default config (policy cost, maxEndpoints 3,',
      'crossZoneFallbacks 1) unless the policy column says `weighted` (weights 2/2/3/1), over pools',
      'spread evenly on 3 zones (the EPP in zone-a; zone-b same region, zone-c another), ~25% of',
      'endpoints saturated, prompts of ~2,000 characters (32 blocks, a shared system prefix) hashed on',
      'every pick. Virtual time runs at 5,000 picks/s with fresh samples every 100 ms and 64 requests in',
      'flight, so remote shortlist rescans (every 20 ms without a strict subset, spread over the next picks',
      '64 pods a pick: `remote.scanPerPick`) are inside the figures.',
      'Subsets are taken from zone-a and handed over as freshly decoded strings on every request, as the',
      'EPP gets them; "locality" adds every other zone from the EPP\'s view. Baseline "naive": the same',
      'eligibility and scorers over the whole pool, a full sort, no prefix index — measured in the same',
      'run on the same fleet.',
      '',
      markdownTable(
        [
          'endpoints',
          'policy',
          'subset',
          'picks/s',
          'p50 µs',
          'p99 µs',
          'CPU µs/pick',
          'naive picks/s',
          'naive p50 µs',
          'naive p99 µs',
          'naive/ours p50',
        ],
        table,
      ),
      '',
      hashLine,
      '',
      `Target: pick p99 < ${TARGET_P99_US} µs at ${TARGET_SIZE.toLocaleString('en-US')} endpoints, without a subset and with 16- and 256-entry subsets, strict and locality.${provisional}`,
      '',
      ...verdicts,
      '',
      ...flowControlCase(context, picks, warmup),
      '',
      ...preciseCase(context).lines,
    ].join('\n');
  },
};

/** Flow control's cost with nothing held: at most this many µs of CPU per request more (the target). */
const FLOW_TARGET_US = 2;
const FLOW_ROUNDS = 9;

/**
 * Flow control on, nothing held: every pick runs the hold rule (hold.ts) and the EPP then asks its
 * flow control whether to hold (`FlowControl.shouldHold`: the decision's verdict, or anything held
 * already). Measured against the same picks with flow control off, in alternating rounds on fresh
 * fleets built from the same seed (so both see the same samples), at 1,000 endpoints. The figure is
 * the median of the rounds' paired differences (on minus off within a round, the two runs back to
 * back): a difference of medians mixes the rounds' drift (a busy neighbour, a GC) into a figure of a
 * few µs. The spread of the paired differences (quartiles) says how far to trust it.
 */
function flowControlCase(context: BenchContext, picks: number, warmup: number): string[] {
  const t0 = 1_764_420_000_000;
  const rows: { subset: number | undefined; mode: SubsetMode }[] = [
    { subset: undefined, mode: 'strict' },
    { subset: 16, mode: 'strict' },
    { subset: 256, mode: 'locality' },
  ];
  const table: string[][] = [];
  const verdicts: string[] = [];
  for (const row of rows) {
    const cpu = { off: [] as number[], on: [] as number[] };
    let held = 0;
    for (let round = 0; round < FLOW_ROUNDS; round++) {
      for (const on of round % 2 === 0 ? [false, true] : [true, false]) {
        const fleet = buildFleet(TARGET_SIZE, seededRng(TARGET_SIZE), t0);
        const subset = subsetFor(fleet, row.subset);
        const scheduler = new Scheduler({
          fleet,
          pool: POOL,
          zone: 'zone-a',
          region: 'r1',
          seed: 1,
          config: { subsetMode: row.mode, flowControl: { enabled: on } },
        });
        const flow = new FlowControl({
          pick: (request) => scheduler.pick(request, t0),
          config: scheduler.config.flowControl,
          observer: { flowHeld: () => undefined, flowLeft: () => undefined },
          now: () => t0,
        });
        const outstanding: Decision[] = [];
        const stats = measure(
          { fleet, size: TARGET_SIZE, subset },
          { picks, warmup, startAt: t0 },
          {
            pick: (request, now) => {
              const decision = scheduler.pick(request, now);
              // What the stream asks right after the pick; nothing is ever held here, so it goes on.
              if (on && flow.shouldHold(decision)) held++;
              return decision;
            },
            after: (result, now) => {
              const decision = result as Decision;
              scheduler.commit(decision, now);
              outstanding.push(decision);
              if (outstanding.length > IN_FLIGHT) scheduler.release(outstanding.shift() as Decision);
            },
          },
        );
        (on ? cpu.on : cpu.off).push(stats.cpu);
      }
    }
    const off = median(cpu.off);
    const on = median(cpu.on);
    const label = row.subset === undefined ? 'none' : `${row.subset} ${row.mode}`;
    const paired = cpu.on.map((value, round) => value - (cpu.off[round] as number)).sort((a, b) => a - b);
    const extra = median(paired);
    const signed = (v: number): string => `${v >= 0 ? '+' : ''}${us(v)}`;
    const quartiles = `${signed(percentile(paired, 25))} … ${signed(percentile(paired, 75))}`;
    context.log(`flow control, subset ${label}: CPU off ${us(off)} µs, on ${us(on)} µs, paired ${signed(extra)} µs/pick (${quartiles})`);
    table.push([label, us(off), us(on), signed(extra), quartiles, `${((held / (FLOW_ROUNDS * picks)) * 100).toFixed(1)} %`]);
    verdicts.push(
      `- subset ${label}: ${extra >= 0 ? '+' : ''}${us(extra)} µs of CPU per pick — ${extra <= FLOW_TARGET_US ? '**MET**' : '**NOT MET**'}`,
    );
  }
  return [
    '### Flow control on, nothing held',
    '',
    `\`Scheduler.pick\` with \`flowControl.enabled\` and the EPP's \`FlowControl.shouldHold\` after it, against the same`,
    `picks with flow control off, at ${TARGET_SIZE.toLocaleString('en-US')} endpoints: ${FLOW_ROUNDS} alternating rounds of each on fresh fleets`,
    "from the same seed: the median CPU per pick of each, and the median (and quartiles) of the rounds' paired",
    'differences (on minus off, back to back in one round). "would hold" is the share of picks whose',
    'verdict was hold (the bench commits them anyway: nothing is ever held).',
    '',
    markdownTable(['subset', 'CPU µs/pick off', 'on', 'difference (paired median)', 'quartiles', 'would hold'], table),
    '',
    `Target: at most ${FLOW_TARGET_US} µs per request more with flow control on and nothing held.`,
    '',
    ...verdicts,
  ];
}
