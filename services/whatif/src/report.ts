import type { ScenarioReport } from './run.js';
import type { RunResult, WindowResult } from './measure.js';
import type { Figures } from './tally.js';

/**
 * Report tables of a scenario run: one row per strategy, each figure the median over seeds (with
 * the range when there are several). The same rows render as aligned text (the CLI) or markdown
 * (BENCHMARKS.md).
 */
export interface Table {
  readonly header: readonly string[];
  readonly rows: readonly (readonly string[])[];
}

/** Median and range of a figure over a strategy's seeds. */
export interface Spread {
  readonly median: number;
  readonly min: number;
  readonly max: number;
}

export function spread(values: readonly number[]): Spread {
  const v = values.filter((x) => Number.isFinite(x)).sort((a, b) => a - b);
  if (v.length === 0) return { median: Number.NaN, min: Number.NaN, max: Number.NaN };
  const mid = Math.floor(v.length / 2);
  const median = v.length % 2 === 1 ? (v[mid] as number) : ((v[mid - 1] as number) + (v[mid] as number)) / 2;
  return { median, min: v[0] as number, max: v[v.length - 1] as number };
}

/** A strategy's runs (one per seed), in report order. */
export function byStrategy(report: ScenarioReport): { name: string; runs: RunResult[] }[] {
  return report.strategies.map((s) => ({ name: s.name, runs: report.results.filter((r) => r.strategy === s.name) }));
}

/** The median over seeds of one figure of a strategy. */
export function median<T>(items: readonly T[], f: (item: T) => number): number {
  return spread(items.map(f)).median;
}

const ms = (v: number) => (Number.isFinite(v) ? v.toFixed(0) : '–');
const pc = (v: number) => (!Number.isFinite(v) ? '–' : v === 0 ? '0' : (v * 100).toFixed(v < 0.001 ? 2 : 1));
const sec = (v: number) => (Number.isFinite(v) ? (v / 1000).toFixed(1) : '–');

function ranged(values: readonly number[], fmt: (v: number) => string): string {
  const s = spread(values);
  if (values.length <= 1 || s.min === s.max) return fmt(s.median);
  return `${fmt(s.median)} (${fmt(s.min)}–${fmt(s.max)})`;
}

function rate(runs: readonly Figures[], f: (r: Figures) => number): number {
  return median(runs, (r) => f(r) / Math.max(1, r.arrivals));
}

export function summaryTable(report: ScenarioReport): Table {
  const prefix = report.results.some((r) => r.prefixHitShare > 0);
  const aborted = report.results.some((r) => r.aborted > 0);
  const header = [
    'strategy',
    'TTFT p50 (ms)',
    'p90',
    'p99',
    'e2e p90 (s)',
    'output tok/s',
    'cross-zone %',
    'fallback %',
    ...(prefix ? ['prefix hit %'] : []),
    '429 %',
    '503 %',
    ...(aborted ? ['aborted %'] : []),
    'queue',
  ];
  const rows = byStrategy(report).map(({ name, runs }) => {
    const unbounded = runs.filter((r) => r.unbounded).length;
    const growth = median(runs, (r) => r.queueGrowthPerS);
    return [
      name,
      ranged(
        runs.map((r) => r.ttftMs.p50),
        ms,
      ),
      ranged(
        runs.map((r) => r.ttftMs.p90),
        ms,
      ),
      ranged(
        runs.map((r) => r.ttftMs.p99),
        ms,
      ),
      sec(median(runs, (r) => r.e2eMs.p90)),
      median(runs, (r) => r.outputTokensPerS).toFixed(0),
      ranged(
        runs.map((r) => r.crossZoneShare),
        pc,
      ),
      pc(median(runs, (r) => r.fallbackShare)),
      ...(prefix ? [pc(median(runs, (r) => r.prefixHitShare))] : []),
      pc(rate(runs, (r) => r.rejected429)),
      pc(rate(runs, (r) => r.rejected503)),
      ...(aborted ? [pc(rate(runs, (r) => r.aborted))] : []),
      unbounded === 0
        ? 'bounded'
        : `UNBOUNDED${unbounded < runs.length ? ` (${unbounded}/${runs.length} seeds)` : ''} +${growth.toFixed(0)}/s`,
    ];
  });
  return { header, rows };
}

/**
 * Flow control's figures, for workloads with tenants: goodput (served within the TTFT objective),
 * TTFT p99 per priority band (highest first) and per tenant, fairness between tenants (Jain's
 * index over their goodput ÷ max-min fair share) and cross-zone share. Undefined without tenants.
 */
export function flowTable(report: ScenarioReport): { title: string; table: Table } | undefined {
  const first = report.results[0];
  if (!first || Object.keys(first.tenants).length < 2) return undefined;
  const bands = [...new Set(report.results.flatMap((r) => Object.keys(r.ttftP99ByBand)))].sort((a, b) => Number(b) - Number(a));
  const tenants = Object.keys(first.tenants);
  const header = [
    'strategy',
    'goodput (req/s)',
    'goodput %',
    ...bands.map((b) => `p99 band ${b} (ms)`),
    ...tenants.map((t) => `p99 ${t} (ms)`),
    ...tenants.map((t) => `${t} served %`),
    'fairness (Jain)',
    'cross-zone %',
  ];
  const rows = byStrategy(report).map(({ name, runs }) => [
    name,
    ranged(
      runs.map((r) => r.goodputPerS),
      (v) => v.toFixed(1),
    ),
    pc(median(runs, (r) => r.goodputShare)),
    ...bands.map((b) =>
      ranged(
        runs.map((r) => r.ttftP99ByBand[b] ?? Number.NaN),
        ms,
      ),
    ),
    ...tenants.map((t) =>
      ranged(
        runs.map((r) => r.tenants[t]?.ttftMs.p99 ?? Number.NaN),
        ms,
      ),
    ),
    ...tenants.map((t) => pc(median(runs, (r) => (r.tenants[t]?.served ?? 0) / Math.max(1, r.tenants[t]?.arrivals ?? 0)))),
    median(runs, (r) => r.fairness).toFixed(3),
    pc(median(runs, (r) => r.crossZoneShare)),
  ]);
  return { title: `flow control: goodput (TTFT within ${report.ttftObjectiveMs} ms), bands, tenants`, table: { header, rows } };
}

/** One table per fault window: the window's figures next to the span before it. */
export function windowTables(report: ScenarioReport, zones: readonly string[]): { title: string; table: Table }[] {
  const first = report.results[0];
  if (!first) return [];
  const prefix = report.results.some((r) => r.prefixHitShare > 0);
  return first.windows.map((w, wi) => {
    const zone = zoneOf(w.name, zones);
    const header = [
      'strategy',
      'p90 TTFT during (ms)',
      'before',
      'p99 during',
      ...(prefix ? ['prefix hit % during', 'before'] : []),
      zone ? `cross-zone % (${zone} gateway)` : 'cross-zone %',
      ...(zone ? ['before'] : []),
      '429 %',
      '503 %',
      'aborted %',
      zone ? `stale ${zone} %` : 'stale (all zones) %',
      ...(zone ? ['stale other zones %'] : []),
      'events delivered',
    ];
    const rows = byStrategy(report).map(({ name, runs }) => {
      const ws = runs.map((r) => r.windows[wi] as WindowResult);
      const before = ws.map((x) => x.before).filter((x): x is NonNullable<typeof x> => x !== undefined);
      const staleOf = (x: WindowResult, inZone: boolean) => {
        const entries = Object.entries(x.staleShareByZone).filter(([z]) => (zone ? (z === zone) === inZone : inZone));
        return entries.length === 0 ? 0 : entries.reduce((a, [, v]) => a + v, 0) / entries.length;
      };
      return [
        name,
        ranged(
          ws.map((x) => x.ttftMs.p90),
          ms,
        ),
        before.length ? ms(median(before, (x) => x.ttftMs.p90)) : '–',
        ms(median(ws, (x) => x.ttftMs.p99)),
        ...(prefix
          ? [
              ranged(
                ws.map((x) => x.prefixHitShare),
                pc,
              ),
              before.length ? pc(median(before, (x) => x.prefixHitShare)) : '–',
            ]
          : []),
        pc(median(ws, (x) => (zone ? (x.crossZoneShareByZone[zone] ?? 0) : x.crossZoneShare))),
        ...(zone ? [before.length ? pc(median(before, (x) => x.crossZoneShareByZone[zone] ?? 0)) : '–'] : []),
        pc(rate(ws, (x) => x.rejected429)),
        pc(rate(ws, (x) => x.rejected503)),
        pc(rate(ws, (x) => x.aborted)),
        pc(median(ws, (x) => staleOf(x, true))),
        ...(zone ? [pc(median(ws, (x) => staleOf(x, false)))] : []),
        median(ws, (x) => x.eventsDelivered).toFixed(0),
      ];
    });
    const before = w.before ? `; before: ${w.before.fromS}–${w.before.toS} s` : '';
    return { title: `${w.name}, ${w.fromS}–${w.toS} s${before}`, table: { header, rows } };
  });
}

function zoneOf(windowName: string, zones: readonly string[]): string | undefined {
  const word = windowName.split(/[ #(]/)[1];
  return word !== undefined && zones.includes(word) ? word : undefined;
}

export function renderText(t: Table): string {
  const widths = t.header.map((h, i) => Math.max(h.length, ...t.rows.map((r) => (r[i] ?? '').length)));
  const line = (cells: readonly string[]) =>
    cells.map((c, i) => (i === 0 ? c.padEnd(widths[i] as number) : c.padStart(widths[i] as number))).join('  ');
  return [line(t.header), widths.map((w) => '-'.repeat(w)).join('  '), ...t.rows.map(line)].join('\n');
}

export function renderMarkdown(t: Table, bold?: (row: readonly string[]) => boolean): string {
  const line = (cells: readonly string[]) => `| ${cells.join(' | ')} |`;
  const rows = t.rows.map((r) => (bold?.(r) ? [`**${r[0]}**`, ...r.slice(1)] : r));
  return [line(t.header), line(t.header.map(() => '---')), ...rows.map(line)].join('\n');
}

/** The latency / cross-zone curve: per swept strategy, one row per value, then every other strategy's point. */
export function sweepTables(report: ScenarioReport): { title: string; table: Table }[] {
  const points = report.strategies.filter((s) => s.sweep !== undefined);
  const swept = [...new Set(points.map((p) => p.sweep?.of ?? ''))];
  const figures = (name: string): string[] => {
    const runs = report.results.filter((r) => r.strategy === name);
    return [
      ms(median(runs, (r) => r.ttftMs.p50)),
      ms(median(runs, (r) => r.ttftMs.p90)),
      ms(median(runs, (r) => r.ttftMs.p99)),
      pc(median(runs, (r) => r.crossZoneShare)),
    ];
  };
  return swept.map((of) => {
    const mine = points.filter((p) => p.sweep?.of === of).sort((a, b) => (a.sweep?.value ?? 0) - (b.sweep?.value ?? 0));
    const field = mine[0]?.sweep?.field ?? '';
    const others = report.strategies.filter((s) => s.sweep === undefined && s.name !== of);
    const rows = [
      ...mine.map((p) => [`${of} ${field}=${p.sweep?.value}`, ...figures(p.name)]),
      ...others.map((s) => [s.name, ...figures(s.name)]),
    ];
    return {
      title: `${of}: the latency / cross-zone curve over ${field}, beside every other strategy's point`,
      table: { header: ['strategy', 'TTFT p50 (ms)', 'p90', 'p99', 'cross-zone %'], rows },
    };
  });
}

/** The header the CLI prints above the table: what was run and what each baseline is. */
export function describe(report: ScenarioReport): string {
  const c = report.capacity;
  const perReplica = [...new Set(Object.values(c.perReplicaRps))].map((v) => v.toFixed(2)).join(' / ');
  const pct = (v: number) => `${(v * 100).toFixed(1)} %`;
  const shaped = Math.abs(report.meanLoad - (report.load ?? report.meanLoad)) > 0.005 || report.peakLoad - report.meanLoad > 0.005;
  const lines = [
    `${report.scenario}${report.title !== report.scenario ? ` — ${report.title}` : ''}`,
    `load: ${report.load !== null ? `${(report.load * 100).toFixed(0)} % of calibrated capacity (${(report.load * c.clusterRps).toFixed(1)} of ${c.clusterRps.toFixed(1)} req/s)` : 'given in req/s'}` +
      (shaped ? `; over the measured window mean ${pct(report.meanLoad)}, peak ${pct(report.peakLoad)}` : '') +
      `; seeds ${report.seeds.join(', ')}; ${report.durationS} s of arrivals, the first ${report.warmupS} s not measured`,
    `spill asked of routing: required ${pct(report.requiredSpillShare)} of arrivals, equal utilisation ${pct(report.equalUtilisationShare)} (overflow ${pct(report.overflowShare)})`,
    `capacity: ${perReplica} req/s per replica — ${c.method}` +
      (c.cacheBlindPerReplicaRps
        ? `; a replica seeing every group manages ${[...new Set(Object.values(c.cacheBlindPerReplicaRps))].map((v) => v.toFixed(2)).join(' / ')} req/s`
        : ''),
    'strategies:',
    ...report.strategies
      .filter((s) => s.sweep === undefined || s.sweep.of === s.name)
      .map((s) => `  ${s.name.padEnd(19)} ${s.description}${Object.keys(s.config).length ? ` — config ${JSON.stringify(s.config)}` : ''}`),
  ];
  return lines.join('\n');
}
