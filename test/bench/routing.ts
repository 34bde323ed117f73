import { mkdirSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { availableParallelism, loadavg } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import {
  byStrategy,
  lineChart,
  loadScenario,
  renderMarkdown,
  resolveScenario,
  runScenario,
  SimPool,
  summaryTable,
  windowTables,
  type ScenarioFile,
  type ScenarioReport,
} from '@spillway/whatif';
import type { BenchContext, BenchPart } from './part.js';
import { allTargets, ResultSet, type Verdict } from './targets.js';

/**
 * `routing`: routing quality by simulation. Every scenario file in infra/scenarios/ runs through
 * spillway-whatif's code (the production scheduler and fleet, in virtual time) at each load of its
 * ladder, seeds 1–3; the section reports each table with the command that reproduces it and the
 * routing targets as MET / NOT MET. `--quick`: one load per file (80 % where the ladder has it), seed 1.
 */
const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..', '..');
const SCENARIO_DIR = join(ROOT, 'infra', 'scenarios');
const CHART_DIR = join(ROOT, 'docs', 'bench');
const SEEDS = [1, 2, 3];

/** Report order: the headline scenarios in both topologies, then the event-gap and EPP ones. */
const ORDER = [
  'balanced-same-region',
  'balanced-mixed-region',
  'hot-zone-same-region',
  'hot-zone-mixed-region',
  'moving-hot-spot',
  'zone-loss-same-region',
  'zone-loss-mixed-region',
  'prefix-heavy-same-region',
  'prefix-heavy-mixed-region',
  'llm-d-like',
  'llm-d-like-4-epps',
  'collector-outage',
  'nats-outage',
  'epp-restart',
  'two-epps-hot-zone',
  'two-epps-prefix-heavy',
];

interface Entry {
  readonly file: string;
  readonly scenario: ScenarioFile;
  readonly loads: readonly (number | undefined)[];
}

function entries(quick: boolean): Entry[] {
  const files = readdirSync(SCENARIO_DIR).filter((f) => f.endsWith('.yaml'));
  const rank = (f: string) => {
    const i = ORDER.indexOf(f.replace(/\.yaml$/, ''));
    return i < 0 ? ORDER.length : i;
  };
  files.sort((a, b) => rank(a) - rank(b) || a.localeCompare(b));
  return files.map((f) => {
    const scenario = loadScenario(join(SCENARIO_DIR, f));
    const ladder = scenario.ladder ?? [scenario.load.clusterFraction];
    const loads = quick ? [ladder.includes(0.8) ? 0.8 : scenario.load.clusterFraction] : ladder;
    return { file: `infra/scenarios/${f}`, scenario, loads };
  });
}

const pc = (v: number) => `${Math.round(v * 100)} %`;

function command(file: string, load: number | undefined, seeds: readonly number[]): string {
  return `npx spillway-whatif --scenario ${file}${load !== undefined ? ` --load ${load}` : ''} --seeds ${seeds.join(',')}`;
}

function verdictLines(verdicts: readonly Verdict[]): string[] {
  if (verdicts.length === 0) return ['  - not measured in this run'];
  return verdicts.map((v) => {
    const status = v.met === undefined ? 'NOT MEASURED' : v.met ? 'MET' : 'NOT MET';
    return `  - ${v.scenario}${v.load !== null ? ` at ${pc(v.load)}` : ''}: **${status}** — ${v.detail}`;
  });
}

function scenarioSection(entry: Entry, reports: readonly ScenarioReport[]): string[] {
  const out: string[] = [];
  const first = reports[0];
  if (!first) return out;
  out.push(`### ${first.title}`, '');
  const description = entry.scenario.description;
  if (description) out.push(description, '');
  out.push(`File \`${entry.file}\`. ${reports.length > 1 ? 'Each load is reproduced by:' : 'Reproduce:'}`, '');
  out.push('```', ...reports.map((r) => command(entry.file, r.load ?? undefined, r.seeds)), '```', '');
  const c = first.capacity;
  const facts = [
    `capacity ${Object.values(c.perReplicaRps)[0]?.toFixed(2)} req/s per replica (cluster ${c.clusterRps.toFixed(1)} req/s)`,
    ...(c.cacheBlindPerReplicaRps ? [`a cache-blind replica ${Object.values(c.cacheBlindPerReplicaRps)[0]?.toFixed(2)} req/s`] : []),
    `${first.durationS} s of arrivals, the first ${first.warmupS} s not measured`,
  ];
  if (reports.some((r) => r.overflowShare > 0))
    facts.push(
      `overflow share ${reports.map((r) => `${r.load !== null ? pc(r.load) : 'rps'} → ${(r.overflowShare * 100).toFixed(1)} %`).join(', ')}`,
    );
  out.push(`${facts.join('; ')}.`, '');
  // One table for the whole ladder: a load column before the strategy.
  const tables = reports.map((r) => ({ load: r.load, table: summaryTable(r) }));
  const header = ['load', ...(tables[0]?.table.header ?? [])];
  const rows = tables.flatMap((t) => t.table.rows.map((row) => [t.load !== null ? pc(t.load) : 'rps', ...row]));
  out.push(
    renderMarkdown({ header, rows: rows.map((r) => (r[1]?.startsWith('spillway') ? [r[0] as string, `**${r[1]}**`, ...r.slice(2)] : r)) }),
    '',
  );
  for (const r of reports) {
    const zones = Object.keys(r.capacity.perReplicaRps);
    for (const w of windowTables(r, zones)) {
      out.push(`Window ${w.title}${reports.length > 1 && r.load !== null ? `, load ${pc(r.load)}` : ''}:`, '');
      out.push(
        renderMarkdown(w.table, (row) => row[0]?.startsWith('spillway') === true),
        '',
      );
    }
  }
  return out;
}

function chart(reports: readonly ScenarioReport[]): string {
  const first = reports[0] as ScenarioReport;
  return lineChart({
    title: `p90 TTFT vs load — ${first.scenario}`,
    xLabel: 'offered load (fraction of calibrated cluster capacity)',
    yLabel: 'p90 TTFT, median of seeds (log scale)',
    logY: true,
    xFormat: (x) => `${Math.round(x * 100)} %`,
    series: byStrategy(first).map(({ name }) => ({
      name,
      points: reports.map((r) => {
        const runs = r.results
          .filter((x) => x.strategy === name)
          .map((x) => x.ttftMs.p90)
          .sort((a, b) => a - b);
        return [r.load ?? 0, runs[Math.floor(runs.length / 2)] ?? Number.NaN] as const;
      }),
    })),
  });
}

async function run(ctx: BenchContext): Promise<string> {
  const started = Date.now();
  const loadBefore = loadavg()[0] ?? 0;
  const cpuBefore = process.cpuUsage();
  const seeds = ctx.quick ? [1] : SEEDS;
  const list = entries(ctx.quick);
  const threads = Math.max(1, Math.min(availableParallelism(), 4));
  const pool = new SimPool(threads);
  const set = new ResultSet();
  const byEntry = new Map<string, ScenarioReport[]>();
  let runs = 0;
  try {
    // Resolve (and calibrate) in this thread, then keep every worker busy across all scenarios.
    const instances = list.flatMap((entry) =>
      entry.loads.map((load) => ({ entry, resolved: resolveScenario(entry.scenario, { load, seeds }) })),
    );
    const reports = await Promise.all(
      instances.map(async ({ entry, resolved }) => {
        const t0 = Date.now();
        const report = await runScenario(resolved, { pool });
        const spill = report.results.filter((r) => r.strategy === 'spillway').map((r) => r.ttftMs.p90);
        ctx.log(
          `${resolved.name}${resolved.clusterFraction !== undefined ? ` ${pc(resolved.clusterFraction)}` : ''}: ${report.results.length} runs, ` +
            `spillway p90 ${spill.map((v) => v.toFixed(0)).join('/')} ms (done ${((Date.now() - started) / 1000).toFixed(0)} s in, ${((Date.now() - t0) / 1000).toFixed(0)} s queued+run)`,
        );
        return { entry, report };
      }),
    );
    for (const { entry, report } of reports) {
      set.add(report);
      runs += report.results.length;
      byEntry.set(entry.file, [...(byEntry.get(entry.file) ?? []), report]);
    }
  } finally {
    await pool.close();
  }
  const elapsed = (Date.now() - started) / 1000;
  const loadAfter = loadavg()[0] ?? 0;
  const cpu = process.cpuUsage(cpuBefore);

  const charts: string[] = [];
  if (!ctx.quick) {
    mkdirSync(CHART_DIR, { recursive: true });
    for (const f of readdirSync(CHART_DIR)) if (f.startsWith('routing-') && f.endsWith('.svg')) rmSync(join(CHART_DIR, f));
    for (const entry of list) {
      const reports = byEntry.get(entry.file) ?? [];
      if (reports.length < 2) continue;
      const name = `routing-${reports[0]?.scenario}.svg`;
      writeFileSync(join(CHART_DIR, name), chart(reports));
      charts.push(`[${reports[0]?.scenario}](docs/bench/${name})`);
    }
  }

  const groups = allTargets(set, 'spillway');
  const all = groups.flatMap((g) => g.verdicts);
  const count = (m: boolean | undefined) => all.filter((v) => v.met === m).length;
  const sample = set.get('balanced-same-region', 0.8) ?? [...byEntry.values()][0]?.[0];
  const prefix = [...byEntry.values()].flat().find((r) => r.capacity.cacheBlindPerReplicaRps);

  const out: string[] = [];
  out.push('## Routing quality (simulation)', '');
  out.push(
    `Every scenario file in \`infra/scenarios/\` run through \`spillway-whatif\` (\`services/whatif\`): the **production** \`@spillway/scheduler\` and ` +
      '`@spillway/fleet` behind one gateway per zone, against `@spillway/engine` replicas in step mode (vLLM-style steps under a token budget, ' +
      'calibrated against published vLLM figures: `packages/engine/README.md`), in deterministic virtual time. ' +
      `Seeds ${seeds.join(', ')}; every figure is the **median over the seeds**, with the range in brackets for TTFT and cross-zone share. ` +
      'Every strategy of a (file, load, seed) sees the identical arrival sequence. The model, each baseline, what the simulation leaves out, and how ' +
      'load is calibrated are in [docs/whatif.md](docs/whatif.md); every table below names the command that reproduces it.',
  );
  out.push('');
  if (sample) {
    out.push(
      `- **Capacity** (the load axis, independent of the strategy): ShareGPT-like ${Object.values(sample.capacity.perReplicaRps)[0]?.toFixed(2)} req/s per replica` +
        (prefix
          ? `; prefix-heavy ${Object.values(prefix.capacity.perReplicaRps)[0]?.toFixed(2)} req/s per replica holding its share of the prompt groups (a replica seeing every group: ${Object.values(prefix.capacity.cacheBlindPerReplicaRps ?? {})[0]?.toFixed(2)} req/s)`
          : '') +
        ". Replicas: `llama-8b-h100` in step mode with 64 sequences and 7,000 KV blocks (¼ of an H100's, keeping the KV room per sequence), 12 replicas in 3 zones.",
    );
  }
  out.push(
    '- **Baselines**: `random`, `round-robin`, `least-queue` (zone-unaware, every ready replica); `reference` = ONE pool-wide picker shared by all gateways ' +
      "(the reference EPP's deployment) with its default scoring and saturation rule; `zone-local` = strict zone-local subsets; `spillway` = Spillway with its default config " +
      "(the approximate prefix index); `spillway-precise` = the same with the precise block index fed by every replica's KV events (batched, delayed, snapshots every 10 s); " +
      '`oracle` = the same with every KV event applied the instant it happens.',
  );
  out.push(
    '- **Backlog**: `UNBOUNDED +N/s` marks a strategy whose backlog (accepted, unfinished requests) grows by more than 5 % of the arrival rate per second over the ' +
      "second half of the measured window — its TTFT then depends on the run's length, so compare it by that growth, not by a ratio.",
  );
  out.push('');
  out.push(`### Targets (issues 11, 13 and 15): \`spillway\` and \`spillway-precise\`, default config`, '');
  out.push(
    `${count(true)} MET, ${count(false)} NOT MET, ${count(undefined)} not measured${ctx.quick ? ' (a quick run measures one load per file, so many comparisons are missing)' : ''}.`,
    '',
  );
  for (const g of groups) out.push(`- ${g.title}:`, ...verdictLines(g.verdicts));
  out.push('');
  for (const entry of list) out.push(...scenarioSection(entry, byEntry.get(entry.file) ?? []));
  if (charts.length > 0) out.push(`Charts (p90 TTFT vs load, median of seeds, log scale): ${charts.join(', ')}.`, '');
  out.push(
    `${runs} simulated runs (${list.length} files × loads × strategies × seeds) in ${elapsed.toFixed(0)} s wall time on ${threads} worker threads ` +
      `(${((cpu.user + cpu.system) / 1e6).toFixed(0)} s of CPU in this process, workers included; 1-minute load average ${loadBefore.toFixed(1)} before, ${loadAfter.toFixed(1)} after — ` +
      'on a shared machine the wall time stretches with the load).',
  );
  return out.join('\n');
}

export const routing: BenchPart = { name: 'routing', title: 'Routing quality (simulation)', loadIndependent: true, run };
