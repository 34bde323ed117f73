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
  sweepTables,
  windowTables,
  type ScenarioFile,
  type ScenarioReport,
} from '@spillway/whatif';
import type { BenchContext, BenchPart } from './part.js';
import { allTargets, ResultSet, type Verdict } from './targets.js';

/**
 * `routing`: routing quality by simulation. Every scenario file in infra/scenarios/ runs through
 * spillway-whatif's code (the production scheduler and fleet, every baseline on its own signal
 * path, in virtual time) at each load of its ladder, seeds 1–3, full-size replicas; the section
 * reports each table with the command that reproduces it, the latency / cross-zone curves, and
 * the routing targets as MET / NOT MET. `--quick`: one load per file (80 % where the ladder has
 * it), seed 1, 15 s measured, the headline strategies only, no sweeps — to see that it works.
 */
const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..', '..');
const SCENARIO_DIR = join(ROOT, 'infra', 'scenarios');
const CHART_DIR = join(ROOT, 'docs', 'bench');
const SEEDS = [1, 2, 3];
/** The quick run's strategies: Spillway and the baselines of the first target. */
const QUICK_STRATEGIES = ['spillway', 'reference', 'reference-plus', 'reference-zonal', 'envoy-load-aware', 'llm-d-topology'];
const QUICK_MEASURED_S = 15;

/** Report order: the headline scenarios, the held-out kinds, then prefix, event-gap and EPP ones. */
const ORDER = [
  'balanced-same-region',
  'balanced-mixed-region',
  'hot-zone-same-region',
  'hot-zone-mixed-region',
  'moving-hot-spot',
  'heterogeneous-zones',
  'diurnal-leading-zone',
  'bursts-correlated',
  'bursts-rotating',
  'two-regions',
  'long-context-mix',
  'lora-heavy',
  'zone-loss-same-region',
  'zone-loss-mixed-region',
  'prefix-heavy-same-region',
  'prefix-heavy-mixed-region',
  'llm-d-like',
  'llm-d-like-4-epps',
  'collector-outage',
  'collector-restart-prefix',
  'nats-outage',
  'epp-restart',
  'two-epps-hot-zone',
  'two-epps-prefix-heavy',
];

export interface Entry {
  readonly file: string;
  readonly scenario: ScenarioFile;
  readonly loads: readonly (number | undefined)[];
}

function quickVersion(s: ScenarioFile): ScenarioFile {
  const keep = s.strategies.filter((e) => QUICK_STRATEGIES.includes(typeof e === 'string' ? e : e.name));
  const { sweep: _sweep, ...rest } = s;
  return { ...rest, strategies: keep.length > 0 ? keep : s.strategies };
}

/** One scenario file as the part runs it (the quick version with `quick`). */
export function entryOf(f: string, quick: boolean): Entry {
  const file = loadScenario(join(SCENARIO_DIR, f));
  const ladder = file.ladder ?? [file.load.clusterFraction];
  const loads = quick ? [ladder.includes(0.8) ? 0.8 : file.load.clusterFraction] : ladder;
  return { file: `infra/scenarios/${f}`, scenario: quick ? quickVersion(file) : file, loads };
}

function entries(quick: boolean): Entry[] {
  // The flood scenarios compare flow control on and off: the `flow` part (flow.ts) runs and judges them.
  const files = readdirSync(SCENARIO_DIR).filter((f) => f.endsWith('.yaml') && !f.startsWith('flood-tenant-'));
  const rank = (f: string) => {
    const i = ORDER.indexOf(f.replace(/\.yaml$/, ''));
    return i < 0 ? ORDER.length : i;
  };
  files.sort((a, b) => rank(a) - rank(b) || a.localeCompare(b));
  return files.map((f) => entryOf(f, quick));
}

const pc = (v: number) => `${Math.round(v * 100)} %`;
const pc1 = (v: number) => `${(v * 100).toFixed(1)} %`;

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

function facts(first: ScenarioReport, reports: readonly ScenarioReport[]): string {
  const c = first.capacity;
  const perReplica = [...new Set(Object.values(c.perReplicaRps))].map((v) => v.toFixed(2)).join(' / ');
  const out = [
    `capacity ${perReplica} req/s per replica (cluster ${c.clusterRps.toFixed(1)} req/s)`,
    ...(c.cacheBlindPerReplicaRps
      ? [`a cache-blind replica ${[...new Set(Object.values(c.cacheBlindPerReplicaRps))].map((v) => v.toFixed(2)).join(' / ')} req/s`]
      : []),
    `${first.durationS} s of arrivals, the first ${first.warmupS} s not measured`,
  ];
  const shaped = reports.some((r) => r.load !== null && (Math.abs(r.meanLoad - r.load) > 0.005 || r.peakLoad - r.meanLoad > 0.005));
  if (shaped)
    out.push(
      `offered load over the measured window ${reports.map((r) => `${r.load !== null ? pc(r.load) : 'rps'} → mean ${pc1(r.meanLoad)}, peak ${pc1(r.peakLoad)}`).join('; ')}`,
    );
  if (reports.some((r) => r.overflowShare > 0))
    out.push(
      `spill asked of routing (required / equal utilisation / overflow): ${reports
        .map(
          (r) =>
            `${r.load !== null ? pc(r.load) : 'rps'} → ${pc1(r.requiredSpillShare)} / ${pc1(r.equalUtilisationShare)} / ${pc1(r.overflowShare)}`,
        )
        .join('; ')}`,
    );
  return `${out.join('; ')}.`;
}

/** A scenario's subsection of the part: title, description, commands, facts, the table over its ladder, curves and fault windows. */
export function scenarioSection(entry: Entry, reports: readonly ScenarioReport[]): string[] {
  const out: string[] = [];
  const first = reports[0];
  if (!first) return out;
  out.push(`### ${first.title}`, '');
  const description = entry.scenario.description;
  if (description) out.push(description, '');
  out.push(`File \`${entry.file}\`. ${reports.length > 1 ? 'Each load is reproduced by:' : 'Reproduce:'}`, '');
  out.push('```', ...reports.map((r) => command(entry.file, r.load ?? undefined, r.seeds)), '```', '');
  out.push(facts(first, reports), '');
  // One table for the whole ladder (a load column before the strategy), without the sweep's points.
  const tables = reports.map((r) => ({ load: r.load, table: summaryTable(r) }));
  const header = ['load', ...(tables[0]?.table.header ?? [])];
  const swept = new Set(first.strategies.filter((s) => s.sweep && s.sweep.of !== s.name).map((s) => s.name));
  const rows = tables.flatMap((t) =>
    t.table.rows.filter((row) => !swept.has(row[0] ?? '')).map((row) => [t.load !== null ? pc(t.load) : 'rps', ...row]),
  );
  out.push(
    renderMarkdown({ header, rows: rows.map((r) => (r[1]?.startsWith('spillway') ? [r[0] as string, `**${r[1]}**`, ...r.slice(2)] : r)) }),
    '',
  );
  for (const r of reports) {
    for (const s of sweepTables(r)) {
      out.push(`Curve${reports.length > 1 && r.load !== null ? ` at ${pc(r.load)}` : ''} — ${s.title}:`, '');
      out.push(
        renderMarkdown(s.table, (row) => row[0]?.startsWith('spillway') === true),
        '',
      );
    }
  }
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
  const plain = byStrategy(first).filter(({ name }) => !first.strategies.some((s) => s.name === name && s.sweep && s.sweep.of !== name));
  return lineChart({
    title: `p90 TTFT vs load — ${first.scenario}`,
    xLabel: 'offered load (fraction of calibrated cluster capacity)',
    yLabel: 'p90 TTFT, median of seeds (log scale)',
    logY: true,
    xFormat: (x) => `${Math.round(x * 100)} %`,
    series: plain.map(({ name }) => ({
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
      entry.loads.map((load) => ({
        entry,
        resolved: resolveScenario(entry.scenario, {
          load,
          seeds,
          ...(ctx.quick ? { durationS: entry.scenario.warmupS + QUICK_MEASURED_S } : {}),
        }),
      })),
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

  const out: string[] = [];
  out.push('## Routing quality (simulation)', '');
  out.push(
    `Every scenario file in \`infra/scenarios/\` run through \`spillway-whatif\` (\`services/whatif\`): the **production** \`@spillway/scheduler\` and ` +
      '`@spillway/fleet` behind one gateway per zone, every baseline deployed as in production on its own signal path, against ' +
      '`@spillway/engine` replicas in step mode (vLLM-style steps under a token budget, prefill attention growing with the prompt, ' +
      'calibrated against published vLLM figures: `packages/engine/README.md`), in deterministic virtual time; every message between two ' +
      'zones takes at least half their round trip. ' +
      `Seeds ${seeds.join(', ')}; every figure is the **median over the seeds**, with the range in brackets for TTFT and cross-zone share. ` +
      'Every strategy of a (file, load, seed) sees the identical arrival sequence. The model, each baseline and what it leaves out, and how ' +
      'load is calibrated are in [docs/whatif.md](docs/whatif.md); every table below names the command that reproduces it.',
  );
  out.push('');
  if (sample) {
    out.push(
      `- **Replicas**: full size by default — \`llama-8b-h100\` (256 sequences, 28,000 KV blocks of 16 tokens) in step mode; ShareGPT-like ` +
        `capacity ${Object.values(sample.capacity.perReplicaRps)[0]?.toFixed(2)} req/s per replica (a saturated replica, the load axis), 12 replicas in 3 or 4 zones.`,
    );
  }
  out.push(
    "- **Baselines** (each on its own signal path): `reference` = the Gateway API Inference Extension's EPP (now in llm-d) as deployed — ONE pool-wide " +
      'picker in the first zone that every gateway asks (paying the round trip), its own 50 ms scrapes, no accounting of its own picks, queue 2 / KV 2 / ' +
      'prefix 3, one endpoint per answer; `reference-plus` = the same counting its picks; `reference-zonal` / `reference-regional` = one per zone / region, ' +
      "failing over by Envoy priorities only when saturated; `envoy-load-aware` = no EPP, Envoy's load_aware_locality over least-request from ORCA " +
      'reports; `llm-d-topology` = reference scorers + zone topology scorer behind the capacity filter, per zone; `random`, `round-robin`, `least-queue`, ' +
      "`zone-local`; `spillway` = Spillway's default config (the approximate prefix index), its EPPs sharing state; `spillway-precise` / `oracle` with KV events.",
  );
  out.push(
    '- **Spill** is judged against what is *required*: min(Σ overflow, Σ spare capacity of the others) over time; the equal-utilisation share and ' +
      "the raw overflow are given beside it. Files whose load changes over time give the window's mean and peak load.",
  );
  out.push(
    "- **Queue**: `UNBOUNDED +N/s` marks a strategy whose replicas' waiting queues grow by more than 5 % of the arrival rate per second over the " +
      "second half of the measured window — its TTFT then depends on the run's length, so compare it by that growth, not by a ratio.",
  );
  out.push('');
  out.push('### Targets of the picking work (v3 of the cost): `spillway` at its default config', '');
  out.push(
    `${count(true)} MET, ${count(false)} NOT MET, ${count(undefined)} not measured${ctx.quick ? ' (a quick run measures one load per file, 15 s, no sweeps: many comparisons are missing)' : ''}. ` +
      'The pick-latency target (p99 < 100 µs at 1,000 endpoints) is the pick benchmark\'s: see "Scheduler pick latency".',
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
