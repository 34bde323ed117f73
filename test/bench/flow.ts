import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import {
  flowTable,
  loadScenario,
  renderMarkdown,
  resolveScenario,
  runScenario,
  summaryTable,
  type RunResult,
  type ScenarioReport,
} from '@spillway/whatif';
import { median, type BenchContext, type BenchPart } from './part.js';

/**
 * `flow`: flow control by simulation. The flood scenarios (infra/scenarios/flood-tenant-*.yaml: a
 * tenant asking three quarters of the load, two priority bands) run `spillway` and `spillway-fc`
 * (flow control on) through spillway-whatif, seeds 1–3, one worker: at 110, 120 and 130 % of the
 * cluster's capacity, and at 90 %. The section gives each table with the command that reproduces
 * it and the targets as MET / NOT MET, each figure the median over the seeds. `--quick`: seed 1,
 * 120 % and 90 % only, 20 s measured.
 */
const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..', '..');
const OVERLOAD = 'infra/scenarios/flood-tenant-overload.yaml';
const LIGHT = 'infra/scenarios/flood-tenant-light.yaml';
const SEEDS = [1, 2, 3];
/** Every figure at ≤ 90 % load may be at most this much worse with flow control on. */
const LIGHT_LIMIT = 1.02;

interface Run {
  readonly file: string;
  readonly load: number;
  readonly report: ScenarioReport;
}

async function runOne(file: string, load: number, context: BenchContext): Promise<Run> {
  const resolved = resolveScenario(loadScenario(join(ROOT, file)), {
    load,
    seeds: context.quick ? [1] : SEEDS,
    ...(context.quick ? { durationS: 30 } : {}),
  });
  const started = Date.now();
  const report = await runScenario(resolved, { workers: 1 });
  context.log(`${file} at ${Math.round(load * 100)} %: ${report.results.length} runs in ${((Date.now() - started) / 1000).toFixed(0)} s`);
  return { file, load, report };
}

const of = (run: Run, strategy: string): RunResult[] => run.report.results.filter((r) => r.strategy === strategy);
const med = (runs: readonly RunResult[], f: (r: RunResult) => number): number => median(runs.map(f));
const ms = (v: number): string => `${v.toFixed(0)} ms`;
const x = (v: number): string => `${v.toFixed(2)}×`;
const verdict = (met: boolean): string => (met ? '**MET**' : '**NOT MET**');

/** The overload targets at one load: the steady tenant's p99, goodput, and the bands' p99. */
function overloadVerdicts(run: Run): string[] {
  const plain = of(run, 'spillway');
  const fc = of(run, 'spillway-fc');
  const steady = (r: RunResult) => r.tenants['steady']?.ttftMs.p99 ?? Number.NaN;
  const steadyRatio = med(fc, steady) / med(plain, steady);
  const goodRatio = med(fc, (r) => r.goodputPerS) / med(plain, (r) => r.goodputPerS);
  const high = med(fc, (r) => r.ttftP99ByBand['1'] ?? Number.NaN);
  const low = med(fc, (r) => r.ttftP99ByBand['0'] ?? Number.NaN);
  const at = `${Math.round(run.load * 100)} %`;
  return [
    `- ${at}: the well-behaved tenant's TTFT p99 ${ms(med(fc, steady))} with flow control, ${ms(med(plain, steady))} without: ${x(steadyRatio)} (target ≤ 0.5×) — ${verdict(steadyRatio <= 0.5)}`,
    `- ${at}: goodput ${med(fc, (r) => r.goodputPerS).toFixed(1)} req/s with flow control, ${med(plain, (r) => r.goodputPerS).toFixed(1)} without: ${x(goodRatio)} (target ≥ 1.2×) — ${verdict(goodRatio >= 1.2)}`,
    `- ${at}: with flow control the high band's TTFT p99 is ${ms(high)}, the low band's ${ms(low)}: ${x(high / low)} (target ≤ 0.5×) — ${verdict(high / low <= 0.5)}`,
  ];
}

/** At ≤ 90 %: no figure worse than LIGHT_LIMIT× (latencies higher, goodput and fairness lower, more refused). */
function lightVerdict(run: Run): string[] {
  const plain = of(run, 'spillway');
  const fc = of(run, 'spillway-fc');
  const lower: [string, (r: RunResult) => number][] = [
    ['TTFT p50', (r) => r.ttftMs.p50],
    ['TTFT p90', (r) => r.ttftMs.p90],
    ['TTFT p99', (r) => r.ttftMs.p99],
    ['e2e p90', (r) => r.e2eMs.p90],
    ['high band p99', (r) => r.ttftP99ByBand['1'] ?? Number.NaN],
    ['low band p99', (r) => r.ttftP99ByBand['0'] ?? Number.NaN],
    ['steady p99', (r) => r.tenants['steady']?.ttftMs.p99 ?? Number.NaN],
    ['flood p99', (r) => r.tenants['flood']?.ttftMs.p99 ?? Number.NaN],
    ['cross-zone share', (r) => r.crossZoneShare],
  ];
  const higher: [string, (r: RunResult) => number][] = [
    ['goodput', (r) => r.goodputPerS],
    ['output tokens/s', (r) => r.outputTokensPerS],
    ['fairness', (r) => r.fairness],
  ];
  let worst = { name: '', ratio: 0 };
  for (const [name, f] of lower) {
    const ratio = med(fc, f) / Math.max(1e-9, med(plain, f));
    if (ratio > worst.ratio) worst = { name, ratio };
  }
  for (const [name, f] of higher) {
    const ratio = med(plain, f) / Math.max(1e-9, med(fc, f));
    if (ratio > worst.ratio) worst = { name, ratio };
  }
  const refused = med(fc, (r) => r.rejected429 + r.rejected503) - med(plain, (r) => r.rejected429 + r.rejected503);
  const met = worst.ratio <= LIGHT_LIMIT && refused <= 0;
  return [
    `- ${Math.round(run.load * 100)} %: the worst figure with flow control is ${worst.name} at ${x(worst.ratio)} of its value without (worse-is-higher; target ≤ ${LIGHT_LIMIT}×), ${refused <= 0 ? 'no more requests refused' : `${refused.toFixed(0)} more requests refused`} — ${verdict(met)}`,
  ];
}

function section(run: Run): string[] {
  const flow = flowTable(run.report);
  const seeds = run.report.seeds.join(',');
  return [
    `#### ${run.report.title} — ${Math.round(run.load * 100)} % of capacity`,
    '',
    `\`npx spillway-whatif --scenario ${run.file} --load ${run.load} --seeds ${seeds} --workers 1\``,
    '',
    renderMarkdown(summaryTable(run.report)),
    '',
    ...(flow ? [`${flow.title}:`, '', renderMarkdown(flow.table), ''] : []),
  ];
}

async function run(context: BenchContext): Promise<string> {
  const overloads = context.quick ? [1.2] : [1.1, 1.2, 1.3];
  const runs: Run[] = [];
  for (const load of overloads) runs.push(await runOne(OVERLOAD, load, context));
  const light = await runOne(LIGHT, 0.9, context);
  const first = runs[0]?.report;
  return [
    '## Flow control (simulation)',
    '',
    'Flow control (docs/flow-control.md) in spillway-whatif: `spillway-fc` is `spillway` with flow control on — the',
    "EPP's queue and hold rule in virtual time — against `spillway` without it, on the same arrivals. Three zones of",
    'four full-size replicas in one region; two tenants, one (`flood`) asking three quarters of the load, the other',
    "(`steady`) a quarter; each tenant's requests in two bands (priority 1 and 0: steady half and half, flood a fifth",
    "high). Goodput counts served requests whose TTFT met the scenario's objective" +
      (first ? ` (${first.ttftObjectiveMs} ms)` : '') +
      "; fairness is Jain's index over",
    "the tenants' goodput relative to their max-min fair shares. Each figure is the median over seeds " +
      `${(context.quick ? [1] : SEEDS).join(', ')}.`,
    '',
    'Targets:',
    '',
    ...runs.flatMap(overloadVerdicts),
    ...lightVerdict(light),
    '',
    ...runs.flatMap(section),
    ...section(light),
  ].join('\n');
}

export const flow: BenchPart = { name: 'flow', title: 'Flow control (simulation)', loadIndependent: true, run };
