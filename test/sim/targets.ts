import type { ScenarioName } from './scenarios.js';
import type { SimResult } from './stats.js';

/** One simulated point: a scenario at a cluster load under one strategy. */
export interface Row {
  readonly scenario: ScenarioName;
  readonly load: number;
  readonly result: SimResult;
  /** hot-zone: the share of all arrivals zone-a cannot serve itself. */
  readonly overflow?: number;
}

export const ZONE_UNAWARE = ['random', 'round-robin', 'least-queue', 'reference'] as const;

export interface Verdict {
  readonly load: number;
  readonly met: boolean;
  readonly detail: string;
}

function find(rows: readonly Row[], scenario: ScenarioName, load: number, strategy: string): SimResult | undefined {
  return rows.find((r) => r.scenario === scenario && r.load === load && r.result.strategy === strategy)?.result;
}

function loads(rows: readonly Row[], scenario: ScenarioName): number[] {
  return [...new Set(rows.filter((r) => r.scenario === scenario).map((r) => r.load))].sort((a, b) => a - b);
}

const ms = (v: number) => `${v.toFixed(0)} ms`;
const pc = (v: number) => `${(v * 100).toFixed(1)} %`;

/** Balanced: cross-zone share < 2 % and p90 TTFT within 10 % of the best zone-unaware strategy. */
export function balancedTarget(rows: readonly Row[], strategy: string): Verdict[] {
  return loads(rows, 'balanced').flatMap((load) => {
    const s = find(rows, 'balanced', load, strategy);
    const others = ZONE_UNAWARE.map((n) => find(rows, 'balanced', load, n)).filter((r): r is SimResult => r !== undefined);
    if (!s || others.length === 0) return [];
    const best = others.reduce((a, b) => (b.ttftP90 < a.ttftP90 ? b : a));
    const ratio = s.ttftP90 / best.ttftP90;
    const met = s.crossZoneShare < 0.02 && ratio <= 1.1;
    return [{ load, met, detail: `cross-zone ${pc(s.crossZoneShare)}; p90 ${ms(s.ttftP90)} = ${ratio.toFixed(2)}× best zone-unaware (${best.strategy} ${ms(best.ttftP90)})` }];
  });
}

/**
 * One zone at 150 %: p90 TTFT ≤ 1.5× the balanced case (same strategy, same cluster load), ≥ 3×
 * better than zone-local only, no 503s, cross-zone share close to the overflow (within ±30 %).
 */
export function hotZoneTarget(rows: readonly Row[], strategy: string): Verdict[] {
  return loads(rows, 'hot-zone').flatMap((load) => {
    const row = rows.find((r) => r.scenario === 'hot-zone' && r.load === load && r.result.strategy === strategy);
    const local = find(rows, 'hot-zone', load, 'zone-local');
    if (!row || !local) return [];
    const s = row.result;
    const balanced = find(rows, 'balanced', load, strategy);
    const overflow = row.overflow ?? 0;
    const vsBalanced = balanced ? s.ttftP90 / balanced.ttftP90 : Number.NaN;
    const vsLocal = local.ttftP90 / s.ttftP90;
    const close = Math.abs(s.crossZoneShare - overflow) <= 0.3 * overflow;
    const checks = [
      balanced ? vsBalanced <= 1.5 : false,
      vsLocal >= 3,
      s.unavailable503 === 0,
      close,
    ];
    const met = checks.every(Boolean);
    const detail = [
      balanced ? `p90 ${ms(s.ttftP90)} = ${vsBalanced.toFixed(2)}× balanced (${ms(balanced.ttftP90)})` : `p90 ${ms(s.ttftP90)}, no balanced run at this load`,
      `${vsLocal.toFixed(1)}× better than zone-local (${ms(local.ttftP90)})`,
      `${s.unavailable503} × 503`,
      `cross-zone ${pc(s.crossZoneShare)} vs overflow ${pc(overflow)}${close ? '' : ' (not close)'}`,
    ].join('; ');
    return [{ load, met, detail }];
  });
}

/** Prefix-heavy: p90 TTFT at least 5× lower than random and than least-queue. */
export function prefixTarget(rows: readonly Row[], strategy: string): Verdict[] {
  return loads(rows, 'prefix-heavy').flatMap((load) => {
    const s = find(rows, 'prefix-heavy', load, strategy);
    const random = find(rows, 'prefix-heavy', load, 'random');
    const lq = find(rows, 'prefix-heavy', load, 'least-queue');
    if (!s || !random || !lq) return [];
    const a = random.ttftP90 / s.ttftP90;
    const b = lq.ttftP90 / s.ttftP90;
    return [{ load, met: a >= 5 && b >= 5, detail: `p90 ${ms(s.ttftP90)}: ${a.toFixed(1)}× lower than random (${ms(random.ttftP90)}), ${b.toFixed(1)}× lower than least-queue (${ms(lq.ttftP90)})` }];
  });
}
