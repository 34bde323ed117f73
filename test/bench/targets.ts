import { median, ZONE_UNAWARE, type Figures, type RunResult, type ScenarioReport, type WindowResult } from '@spillway/whatif';

/**
 * The routing targets of the spill-decision and shared-state work, evaluated over whatif results
 * of the shipped scenarios: each a MET / NOT MET verdict (or not measured) with the figures behind
 * it. Every figure is the median over the seeds run.
 */
export interface Verdict {
  readonly target: string;
  readonly scenario: string;
  readonly load: number | null;
  /** undefined: the target could not be measured (missing runs, or a feature not modelled yet). */
  readonly met: boolean | undefined;
  readonly detail: string;
}

/** Scenario reports keyed by file name and load. */
export class ResultSet {
  private readonly reports = new Map<string, ScenarioReport>();

  add(report: ScenarioReport): void {
    this.reports.set(key(report.scenario, report.load), report);
  }

  get(scenario: string, load: number | null): ScenarioReport | undefined {
    return this.reports.get(key(scenario, load));
  }

  loads(scenario: string): (number | null)[] {
    return [...this.reports.values()]
      .filter((r) => r.scenario === scenario)
      .map((r) => r.load)
      .sort((a, b) => (a ?? 0) - (b ?? 0));
  }
}

const key = (scenario: string, load: number | null) => `${scenario}@${load === null ? 'rps' : load.toFixed(4)}`;

/** A strategy's runs in a report. */
function runs(report: ScenarioReport | undefined, strategy: string): RunResult[] {
  return report ? report.results.filter((r) => r.strategy === strategy) : [];
}

const med = (rs: readonly Figures[], f: (r: Figures) => number) => median(rs, f);
const p90 = (rs: readonly Figures[]) => med(rs, (r) => r.ttftMs.p90);
const p99 = (rs: readonly Figures[]) => med(rs, (r) => r.ttftMs.p99);
const ms = (v: number) => (Number.isFinite(v) ? `${v.toFixed(0)} ms` : '–');
const pc = (v: number) => (Number.isFinite(v) ? `${(v * 100).toFixed(1)} %` : '–');
const x = (v: number) => (Number.isFinite(v) ? `${v.toFixed(2)}×` : '–');
const loadPc = (l: number | null) => (l === null ? 'rps' : `${Math.round(l * 100)} %`);

/** The zone-unaware strategy with the lowest median p90 TTFT (the fair reference included). */
function bestZoneUnaware(report: ScenarioReport | undefined): { name: string; runs: RunResult[] } | undefined {
  let best: { name: string; runs: RunResult[] } | undefined;
  for (const name of ZONE_UNAWARE) {
    const rs = runs(report, name);
    if (rs.length === 0) continue;
    if (!best || p90(rs) < p90(best.runs)) best = { name, runs: rs };
  }
  return best;
}

function missing(target: string, scenario: string, load: number | null, what: string): Verdict {
  return { target, scenario, load, met: undefined, detail: `not measured: ${what}` };
}

const inLoads = (load: number | null, lo: number, hi: number) => load !== null && load >= lo - 1e-9 && load <= hi + 1e-9;

/** Balanced load at 40–95 %: cross-zone < 1 %; p90 ≤ 1.05× (same region) / 1.0× (mixed region) the best zone-unaware strategy. */
export function balancedTargets(set: ResultSet, strategy = 'spillway'): Verdict[] {
  const out: Verdict[] = [];
  for (const [scenario, bound] of [
    ['balanced-same-region', 1.05],
    ['balanced-mixed-region', 1.0],
  ] as const) {
    for (const load of set.loads(scenario).filter((l) => inLoads(l, 0.4, 0.95))) {
      const target = `Balanced load, ${scenario.replace('balanced-', '')}`;
      const report = set.get(scenario, load);
      const s = runs(report, strategy);
      const best = bestZoneUnaware(report);
      if (s.length === 0 || !best) {
        out.push(missing(target, scenario, load, `no ${strategy} or zone-unaware runs`));
        continue;
      }
      const cross = med(s, (r) => r.crossZoneShare);
      const ratio = p90(s) / p90(best.runs);
      out.push({
        target,
        scenario,
        load,
        met: cross < 0.01 && ratio <= bound,
        detail: `cross-zone ${pc(cross)} (< 1 %); p90 ${ms(p90(s))} = ${x(ratio)} best zone-unaware (${best.name} ${ms(p90(best.runs))}; bound ${bound}×)`,
      });
    }
  }
  return out;
}

function hotBounds(
  where: { readonly target: string; readonly scenario: string; readonly load: number | null },
  s: RunResult[],
  balanced: RunResult[],
  bounds: { readonly overflow: number; readonly tolerance: number },
): Verdict {
  const { target, scenario, load } = where;
  const { overflow, tolerance } = bounds;
  const ratio = p90(s) / p90(balanced);
  const cross = med(s, (r) => r.crossZoneShare);
  const e503 = s.reduce((n, r) => n + r.rejected503, 0);
  const close = overflow > 0 ? Math.abs(cross - overflow) <= tolerance * overflow : cross < 0.01;
  return {
    target,
    scenario,
    load,
    met: ratio <= 1.25 && close && e503 === 0,
    detail:
      `p90 ${ms(p90(s))} = ${x(ratio)} the balanced case (${ms(p90(balanced))}; ≤ 1.25×); ` +
      `cross-zone ${pc(cross)} vs overflow ${pc(overflow)} (±${Math.round(tolerance * 100)} %${close ? '' : ': outside'}); ${e503} × 503`,
  };
}

/** One zone at 150 % of its capacity, cluster at 60–95 %, both topologies; and the moving hot spot over the whole run. */
export function hotZoneTargets(set: ResultSet, strategy = 'spillway'): Verdict[] {
  const out: Verdict[] = [];
  const cases: [string, string, string][] = [
    ['hot-zone-same-region', 'balanced-same-region', 'One zone at 150 %, same-region'],
    ['hot-zone-mixed-region', 'balanced-mixed-region', 'One zone at 150 %, mixed-region'],
    ['moving-hot-spot', 'balanced-same-region', 'Moving hot spot (whole run)'],
  ];
  for (const [scenario, balancedName, target] of cases) {
    for (const load of set.loads(scenario).filter((l) => inLoads(l, 0.6, 0.95))) {
      const report = set.get(scenario, load);
      const s = runs(report, strategy);
      const balanced = runs(set.get(balancedName, load), strategy);
      if (s.length === 0 || balanced.length === 0) {
        out.push(missing(target, scenario, load, `needs ${scenario} and ${balancedName} at ${loadPc(load)}`));
        continue;
      }
      out.push(hotBounds({ target, scenario, load }, s, balanced, { overflow: report?.overflowShare ?? 0, tolerance: 0.25 }));
    }
  }
  return out;
}

/** The window of a run whose name starts with `prefix` (fault windows). */
function windowOf(r: RunResult, prefix: string): WindowResult | undefined {
  return r.windows.find((w) => w.name.startsWith(prefix));
}

/** Zone loss (half a zone's replicas down) at 60–95 %: p90 and p99 during the loss ≤ 1.1× the best zone-unaware strategy. */
export function zoneLossTargets(set: ResultSet, strategy = 'spillway'): Verdict[] {
  const out: Verdict[] = [];
  for (const scenario of ['zone-loss-same-region', 'zone-loss-mixed-region']) {
    for (const load of set.loads(scenario).filter((l) => inLoads(l, 0.6, 0.95))) {
      const target = `Zone loss, ${scenario.replace('zone-loss-', '')}`;
      const report = set.get(scenario, load);
      const during = (rs: RunResult[]) => rs.map((r) => windowOf(r, 'replica-down')).filter((w): w is WindowResult => w !== undefined);
      const s = during(runs(report, strategy));
      let best: { name: string; w: WindowResult[] } | undefined;
      for (const name of ZONE_UNAWARE) {
        const w = during(runs(report, name));
        if (w.length > 0 && (!best || p90(w) < p90(best.w))) best = { name, w };
      }
      if (s.length === 0 || !best) {
        out.push(missing(target, scenario, load, 'no replica-down window'));
        continue;
      }
      const r90 = p90(s) / p90(best.w);
      const bestP99 = Math.min(
        ...ZONE_UNAWARE.map((n) => during(runs(report, n)))
          .filter((w) => w.length > 0)
          .map((w) => p99(w)),
      );
      const r99 = p99(s) / bestP99;
      out.push({
        target,
        scenario,
        load,
        met: r90 <= 1.1 && r99 <= 1.1,
        detail: `during the loss: p90 ${ms(p90(s))} = ${x(r90)} best zone-unaware (${best.name} ${ms(p90(best.w))}), p99 ${ms(p99(s))} = ${x(r99)} the best p99 (${ms(bestP99)}); bound 1.1×`,
      });
    }
  }
  return out;
}

/** Prefix-heavy at 40–110 %: p90 ≤ 1.1× the best zone-unaware (reference included), and ≥ 5× lower than random and least-queue. */
export function prefixTargets(set: ResultSet, strategy = 'spillway'): Verdict[] {
  const out: Verdict[] = [];
  for (const scenario of ['prefix-heavy-same-region', 'prefix-heavy-mixed-region']) {
    for (const load of set.loads(scenario).filter((l) => inLoads(l, 0.4, 1.1))) {
      const target = `Prefix-heavy, ${scenario.replace('prefix-heavy-', '')}`;
      const report = set.get(scenario, load);
      const s = runs(report, strategy);
      const best = bestZoneUnaware(report);
      const random = runs(report, 'random');
      const lq = runs(report, 'least-queue');
      if (s.length === 0 || !best || random.length === 0 || lq.length === 0) {
        out.push(missing(target, scenario, load, 'needs spillway, random, least-queue and the zone-unaware runs'));
        continue;
      }
      const vsBest = p90(s) / p90(best.runs);
      const vsRandom = p90(random) / p90(s);
      const vsLq = p90(lq) / p90(s);
      out.push({
        target,
        scenario,
        load,
        met: vsBest <= 1.1 && vsRandom >= 5 && vsLq >= 5,
        detail:
          `p90 ${ms(p90(s))} = ${x(vsBest)} best zone-unaware (${best.name} ${ms(p90(best.runs))}; ≤ 1.1×); ${vsRandom.toFixed(1)}× lower than random (${ms(p90(random))}), ` +
          `${vsLq.toFixed(1)}× lower than least-queue (${ms(p90(lq))}) (≥ 5×); prefix hit ${pc(med(s, (r) => r.prefixHitShare))}`,
      });
    }
  }
  return out;
}

/**
 * Precise prefix routing (KV events): on prefix-heavy load at 40–110 %, `spillway-precise` p90
 * ≤ 0.8× `spillway` (approximate) and ≤ 0.8× the reference, and its prefix hit rate ≥ 90 % of the
 * oracle's (a router that knows every cache exactly).
 */
export function preciseTargets(set: ResultSet): Verdict[] {
  const out: Verdict[] = [];
  for (const scenario of ['prefix-heavy-same-region', 'prefix-heavy-mixed-region']) {
    for (const load of set.loads(scenario).filter((l) => inLoads(l, 0.4, 1.1))) {
      const target = `Precise prefix routing, ${scenario.replace('prefix-heavy-', '')}`;
      const report = set.get(scenario, load);
      const precise = runs(report, 'spillway-precise');
      const approx = runs(report, 'spillway');
      const reference = runs(report, 'reference');
      const oracle = runs(report, 'oracle');
      if (precise.length === 0 || approx.length === 0 || reference.length === 0 || oracle.length === 0) {
        out.push(missing(target, scenario, load, 'needs spillway-precise, spillway, reference and oracle runs'));
        continue;
      }
      const vsApprox = p90(precise) / p90(approx);
      const vsReference = p90(precise) / p90(reference);
      const hit = med(precise, (r) => r.prefixHitShare);
      const oracleHit = med(oracle, (r) => r.prefixHitShare);
      const hitRatio = oracleHit > 0 ? hit / oracleHit : Number.NaN;
      out.push({
        target,
        scenario,
        load,
        met: vsApprox <= 0.8 && vsReference <= 0.8 && hitRatio >= 0.9,
        detail:
          `p90 ${ms(p90(precise))} = ${x(vsApprox)} spillway approximate (${ms(p90(approx))}; ≤ 0.8×), ${x(vsReference)} reference (${ms(p90(reference))}; ≤ 0.8×); ` +
          `prefix hit ${pc(hit)} = ${x(hitRatio)} the oracle's ${pc(oracleHit)} (≥ 0.9×; spillway approximate ${pc(med(approx, (r) => r.prefixHitShare))})`,
      });
    }
  }
  return out;
}

/**
 * The llm-d-like scenario: the published order precise < approximate < random with at least the
 * published ratios halved (random 92.6 s vs approximate 31.1 s: ≥ 1.5×; approximate vs precise 0.54 s,
 * 57×: ≥ 25×). Approximate is the better of `spillway` and the reference at each load.
 */
export function llmdTargets(set: ResultSet): Verdict[] {
  const out: Verdict[] = [];
  // The default deployment (EPPs sharing state; the reference's one pool-wide picker), and EPPs that do not share state.
  for (const [scenario, approximate] of [
    ['llm-d-like', ['spillway', 'reference']],
    ['llm-d-like-4-epps', ['spillway']],
  ] as const) {
    for (const load of set.loads(scenario)) {
      const target = `${scenario} order and ratios`;
      const report = set.get(scenario, load);
      const precise = runs(report, 'spillway-precise');
      const random = runs(report, 'random');
      const candidates = approximate.map((name) => ({ name, runs: runs(report, name) })).filter((c) => c.runs.length > 0);
      if (precise.length === 0 || random.length === 0 || candidates.length === 0) {
        out.push(missing(target, scenario, load, 'needs spillway-precise, random and spillway or reference runs'));
        continue;
      }
      const approx = candidates.reduce((a, b) => (p90(b.runs) < p90(a.runs) ? b : a));
      const approxOverPrecise = p90(approx.runs) / p90(precise);
      const randomOverApprox = p90(random) / p90(approx.runs);
      out.push({
        target,
        scenario,
        load,
        met: approxOverPrecise >= 25 && randomOverApprox >= 1.5,
        detail:
          `p90 precise ${ms(p90(precise))}, approximate (${approx.name}) ${ms(p90(approx.runs))}, random ${ms(p90(random))}: ` +
          `approximate/precise ${x(approxOverPrecise)} (≥ 25×), random/approximate ${x(randomOverApprox)} (≥ 1.5×); ` +
          `prefix hit precise ${pc(med(precise, (r) => r.prefixHitShare))}, approximate ${pc(med(approx.runs, (r) => r.prefixHitShare))}, random ${pc(med(random, (r) => r.prefixHitShare))}`,
      });
    }
  }
  return out;
}

/** Collector outage in one zone (60 %, 15 s) and NATS outage (15 s). */
export function outageTargets(set: ResultSet, strategy = 'spillway'): Verdict[] {
  const out: Verdict[] = [];
  for (const load of set.loads('collector-outage')) {
    const target = 'Collector outage in one zone';
    const rs = runs(set.get('collector-outage', load), strategy);
    const ws = rs.map((r) => windowOf(r, 'collector-down')).filter((w): w is WindowResult => w !== undefined);
    const before = ws.map((w) => w.before).filter((b): b is NonNullable<typeof b> => b !== undefined);
    if (ws.length === 0 || before.length === 0) {
      out.push(missing(target, 'collector-outage', load, 'no collector-down window'));
      continue;
    }
    const zone = /collector-down (\S+)/.exec(ws[0]?.name ?? '')?.[1] ?? '';
    const cross = med(ws, (w) => w.crossZoneShareByZone[zone] ?? 0);
    const shedDuring = ws.reduce((n, w) => n + w.rejected429, 0);
    const shedBefore = before.reduce((n, w) => n + w.rejected429, 0);
    // "Caused by the gap": sheds beyond those of the same span before it.
    const gapSheds = Math.max(0, shedDuring - shedBefore);
    const ratio = p90(ws) / p90(before);
    out.push({
      target,
      scenario: 'collector-outage',
      load,
      met: cross < 0.05 && gapSheds === 0 && ratio <= 1.2,
      detail: `${zone}'s cross-zone share during the outage ${pc(cross)} (< 5 %); 429 during ${shedDuring} vs ${shedBefore} before (0 caused by the gap); p90 during ${ms(p90(ws))} = ${x(ratio)} before (${ms(p90(before))}; ≤ 1.2×)`,
    });
  }
  for (const load of set.loads('nats-outage')) {
    const target = 'NATS outage';
    const rs = runs(set.get('nats-outage', load), strategy);
    const ws = rs.map((r) => windowOf(r, 'nats-down')).filter((w): w is WindowResult => w !== undefined);
    const before = ws.map((w) => w.before).filter((b): b is NonNullable<typeof b> => b !== undefined);
    if (ws.length === 0 || before.length === 0) {
      out.push(missing(target, 'nats-outage', load, 'no nats-down window'));
      continue;
    }
    const e503 = ws.reduce((n, w) => n + w.rejected503, 0);
    const ratio = p90(ws) / p90(before);
    // Not part of the target, but the same rule as for a collector outage: a gap is not overload.
    const shed = `429 during ${ws.reduce((n, w) => n + w.rejected429, 0)} vs ${before.reduce((n, w) => n + w.rejected429, 0)} before`;
    out.push({
      target,
      scenario: 'nats-outage',
      load,
      met: e503 === 0 && ratio <= 1.3,
      detail: `${e503} × 503 during the outage; p90 during ${ms(p90(ws))} = ${x(ratio)} before (${ms(p90(before))}; ≤ 1.3×); ${shed}`,
    });
  }
  return out;
}

/**
 * Two EPPs per zone (the manifests' two replicas), sharing state as deployed: every figure within
 * 5 % of one EPP per zone at the same load — p50, p90 and p99 TTFT and output tokens/s as ratios
 * (≤ 1.05×, ≥ 0.95×), the cross-zone and prefix-hit shares within 5 % of their value or half a
 * percentage point, whichever is larger. The unshared variant (`unshared`, `epps.sharing` off)
 * is reported beside it: how much sharing buys. Hot zone at 95 %: the cross-zone share within
 * ±15 % of the overflow share.
 */
export function twoEppTargets(set: ResultSet, strategy = 'spillway', unshared = 'spillway-unshared'): Verdict[] {
  const out: Verdict[] = [];
  const pairs: [string, string][] = [
    ['two-epps-hot-zone', 'hot-zone-same-region'],
    ['two-epps-prefix-heavy', 'prefix-heavy-same-region'],
  ];
  for (const [scenario, single] of pairs) {
    for (const load of set.loads(scenario)) {
      const report = set.get(scenario, load);
      const two = runs(report, strategy);
      const one = runs(set.get(single, load), strategy);
      if (two.length === 0 || one.length === 0) {
        out.push(missing('Two EPPs per zone vs one', scenario, load, `needs ${single} at ${loadPc(load)}`));
        continue;
      }
      const checks = compareFigures(two, one);
      const alone = runs(report, unshared);
      const without =
        alone.length === 0
          ? ''
          : `; without sharing (${unshared}): p90 ${ms(p90(alone))} (${x(p90(alone) / p90(one))}), p99 ${ms(p99(alone))} (${x(p99(alone) / p99(one))}), ` +
            `cross-zone ${pc(med(alone, (r) => r.crossZoneShare))}, prefix hit ${pc(med(alone, (r) => r.prefixHitShare))}${alone.some((r) => r.unbounded) ? ', backlog unbounded' : ''}`;
      out.push({
        target: 'Two EPPs per zone, with sharing, within 5 % of one EPP per zone',
        scenario,
        load,
        met: checks.every((c) => c.ok),
        detail: `two EPPs vs one: ${checks.map((c) => c.text).join(', ')}${without}`,
      });
      if (scenario === 'two-epps-hot-zone' && load !== null && Math.abs(load - 0.95) < 1e-9) {
        const overflow = report?.overflowShare ?? 0;
        const cross = med(two, (r) => r.crossZoneShare);
        const crossAlone = alone.length === 0 ? '' : `; without sharing ${pc(med(alone, (r) => r.crossZoneShare))}`;
        out.push({
          target: 'Two EPPs per zone, hot zone at 95 %: cross-zone share within ±15 % of the overflow',
          scenario,
          load,
          met: Math.abs(cross - overflow) <= 0.15 * overflow,
          detail: `cross-zone ${pc(cross)} vs overflow ${pc(overflow)} (with sharing)${crossAlone}`,
        });
      }
    }
  }
  return out;
}

/** Each figure of `two` against `one` (medians over seeds): within 5 % (ratios), or 5 % / 0.5 points (shares). */
function compareFigures(two: readonly RunResult[], one: readonly RunResult[]): { ok: boolean; text: string }[] {
  const ratio = (name: string, f: (r: Figures) => number, higherIsBetter = false) => {
    const [a, b] = [med(two, f), med(one, f)];
    const r = a / b;
    const ok = higherIsBetter ? r >= 0.95 : r <= 1.05;
    return {
      ok,
      text: `${name} ${name.includes('tok') ? a.toFixed(0) : ms(a)} vs ${name.includes('tok') ? b.toFixed(0) : ms(b)} (${x(r)}${ok ? '' : ', outside'})`,
    };
  };
  const share = (name: string, f: (r: Figures) => number) => {
    const [a, b] = [med(two, f), med(one, f)];
    const ok = Math.abs(a - b) <= Math.max(0.05 * b, 0.005);
    return { ok, text: `${name} ${pc(a)} vs ${pc(b)}${ok ? '' : ' (outside)'}` };
  };
  return [
    ratio('p50', (r) => r.ttftMs.p50),
    ratio('p90', (r) => r.ttftMs.p90),
    ratio('p99', (r) => r.ttftMs.p99),
    ratio('output tok/s', (r) => r.outputTokensPerS, true),
    share('cross-zone', (r) => r.crossZoneShare),
    share('prefix hit', (r) => r.prefixHitShare),
  ];
}

/** Every target, in report order. */
export function allTargets(set: ResultSet, strategy = 'spillway'): { title: string; verdicts: Verdict[] }[] {
  return [
    {
      title:
        'Balanced load at 40–95 %: cross-zone share < 1 %; p90 TTFT ≤ 1.05× the best zone-unaware strategy (same region), ≤ 1.0× (mixed region)',
      verdicts: balancedTargets(set, strategy),
    },
    {
      title:
        'One zone at 150 % of its capacity, cluster at 60–95 % (and the moving hot spot over the whole run): p90 TTFT ≤ 1.25× the balanced case at the same load; cross-zone share within ±25 % of the overflow share; 0 × 503',
      verdicts: hotZoneTargets(set, strategy),
    },
    {
      title: 'Zone loss (half a zone down) at 60–95 %: p90 and p99 TTFT during the loss ≤ 1.1× the best zone-unaware strategy',
      verdicts: zoneLossTargets(set, strategy),
    },
    {
      title:
        'Prefix-heavy at 40–110 %: p90 TTFT ≤ 1.1× the best zone-unaware strategy (the reference included) and ≥ 5× lower than random and least-queue',
      verdicts: prefixTargets(set, strategy),
    },
    {
      title:
        "Precise prefix routing (`spillway-precise`), prefix-heavy at 40–110 %: p90 TTFT ≤ 0.8× `spillway` (approximate) and ≤ 0.8× the reference; prefix hit rate ≥ 90 % of the oracle's",
      verdicts: preciseTargets(set),
    },
    {
      title:
        'llm-d-like scenario: p90 TTFT order precise < approximate < random with the published ratios halved (approximate/precise ≥ 25×, random/approximate ≥ 1.5×)',
      verdicts: llmdTargets(set),
    },
    {
      title:
        "Collector outage in one zone (60 %, 15 s): that zone's cross-zone share < 5 %, no 429 caused by the gap, p90 TTFT ≤ 1.2× before; NATS outage (15 s): no 503, p90 TTFT ≤ 1.3× before",
      verdicts: outageTargets(set, strategy),
    },
    {
      title:
        'Two EPPs per zone, sharing state: every figure within 5 % of one EPP per zone (and how much worse without sharing); hot zone at 95 %: cross-zone within ±15 % of the overflow',
      verdicts: twoEppTargets(set, strategy),
    },
  ];
}
