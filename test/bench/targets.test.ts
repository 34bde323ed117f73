import { describe, expect, it } from 'vitest';
import type { RunResult, ScenarioReport, WindowResult } from '@spillway/whatif';
import {
  allTargets,
  balancedTargets,
  hotZoneTargets,
  llmdTargets,
  outageTargets,
  preciseTargets,
  prefixTargets,
  ResultSet,
  twoEppTargets,
} from './targets.js';

/** A run with the given figures (everything else neutral). */
function result(
  strategy: string,
  f: { p90: number; p99?: number; cross?: number; e503?: number; e429?: number; hit?: number; seed?: number; windows?: WindowResult[] },
): RunResult {
  const figures = {
    arrivals: 1000,
    served: 1000 - (f.e503 ?? 0) - (f.e429 ?? 0),
    rejected429: f.e429 ?? 0,
    rejected503: f.e503 ?? 0,
    aborted: 0,
    ttftMs: { p50: f.p90 / 2, p90: f.p90, p99: f.p99 ?? f.p90 * 2 },
    e2eMs: { p50: 1000, p90: 2000 },
    outputTokensPerS: 1000,
    crossZoneShare: f.cross ?? 0,
    fallbackShare: 0,
    prefixHitShare: f.hit ?? 0,
    servedByZone: {},
    arrivalsByZone: {},
    crossZoneShareByZone: {},
  };
  return { strategy, seed: f.seed ?? 1, ...figures, unbounded: false, queueGrowthPerS: 0, windows: f.windows ?? [] };
}

function report(scenario: string, load: number, results: RunResult[], overflowShare = 0): ScenarioReport {
  return {
    scenario,
    title: scenario,
    seeds: [1],
    load,
    meanLoad: load,
    peakLoad: load,
    overflowShare,
    requiredSpillShare: overflowShare,
    equalUtilisationShare: overflowShare,
    durationS: 60,
    warmupS: 10,
    capacity: { perReplicaRps: {}, clusterRps: 100, method: '' },
    strategies: [...new Set(results.map((r) => r.strategy))].map((name) => ({
      name,
      kind: name as 'spillway',
      description: '',
      config: {},
    })),
    results,
  };
}

function window(name: string, p90: number, before: number, extra: Partial<WindowResult> = {}): WindowResult {
  const base = result('x', { p90 });
  const { strategy: _s, seed: _seed, unbounded: _u, queueGrowthPerS: _q, windows: _w, ...figures } = base;
  const {
    strategy: _s2,
    seed: _seed2,
    unbounded: _u2,
    queueGrowthPerS: _q2,
    windows: _w2,
    ...beforeFigures
  } = result('x', { p90: before });
  return {
    name,
    fromS: 25,
    toS: 40,
    staleShareByZone: {},
    eventsDelivered: 0,
    ...figures,
    before: { fromS: 10, toS: 25, ...beforeFigures },
    ...extra,
  };
}

describe('routing targets', () => {
  it('balanced: met within the bound and under 1 % cross-zone, not met beyond either', () => {
    const set = new ResultSet();
    set.add(
      report('balanced-same-region', 0.6, [
        result('spillway', { p90: 104, cross: 0.002 }),
        result('least-queue', { p90: 100 }),
        result('random', { p90: 150 }),
      ]),
    );
    set.add(report('balanced-same-region', 0.95, [result('spillway', { p90: 110, cross: 0.002 }), result('reference', { p90: 100 })]));
    set.add(report('balanced-mixed-region', 0.6, [result('spillway', { p90: 99, cross: 0.02 }), result('reference', { p90: 100 })]));
    const v = balancedTargets(set);
    expect(v.map((x) => [x.scenario, x.load, x.met])).toEqual([
      ['balanced-same-region', 0.6, true],
      ['balanced-same-region', 0.95, false],
      ['balanced-mixed-region', 0.6, false],
    ]);
    expect(v[0]?.detail).toMatch(/1\.04× best zone-unaware \(least-queue 100 ms/);
  });

  it('hot zone: compares with the balanced case at the same load and with the overflow share', () => {
    const set = new ResultSet();
    set.add(report('balanced-same-region', 0.8, [result('spillway', { p90: 200 })]));
    set.add(report('hot-zone-same-region', 0.8, [result('spillway', { p90: 240, cross: 0.22 })], 0.2));
    set.add(report('hot-zone-same-region', 0.95, [result('spillway', { p90: 240, cross: 0.22 })], 0.2));
    const v = hotZoneTargets(set);
    expect(v[0]?.met).toBe(true);
    // No balanced run at 95 %: not measured, never a silent pass.
    expect(v[1]?.met).toBeUndefined();
    set.add(report('hot-zone-mixed-region', 0.8, [result('spillway', { p90: 240, cross: 0.3, e503: 1 })], 0.2));
    set.add(report('balanced-mixed-region', 0.8, [result('spillway', { p90: 200 })]));
    const mixed = hotZoneTargets(set).find((x) => x.scenario === 'hot-zone-mixed-region');
    expect(mixed?.met).toBe(false);
    expect(mixed?.detail).toMatch(/1 × 503/);
  });

  it('prefix-heavy: needs both the fair bound and the 5× gap', () => {
    const set = new ResultSet();
    set.add(
      report('prefix-heavy-same-region', 0.4, [
        result('spillway', { p90: 100, hit: 0.8 }),
        result('reference', { p90: 95 }),
        result('random', { p90: 600 }),
        result('least-queue', { p90: 550 }),
      ]),
    );
    set.add(
      report('prefix-heavy-same-region', 0.8, [
        result('spillway', { p90: 100 }),
        result('reference', { p90: 80 }),
        result('random', { p90: 600 }),
        result('least-queue', { p90: 600 }),
      ]),
    );
    const v = prefixTargets(set);
    expect(v.map((x) => x.met)).toEqual([true, false]);
  });

  it('outages: compare the window with the span before it', () => {
    const set = new ResultSet();
    const collector = window('collector-down zone-b', 110, 100, { crossZoneShareByZone: { 'zone-b': 0.01 } });
    set.add(report('collector-outage', 0.6, [result('spillway', { p90: 100, windows: [collector] })]));
    const shedding = window('collector-down zone-b', 110, 100, { crossZoneShareByZone: { 'zone-b': 0.01 }, rejected429: 5 });
    set.add(report('nats-outage', 0.6, [result('spillway', { p90: 100, windows: [window('nats-down', 140, 100)] })]));
    let v = outageTargets(set);
    expect(v.map((x) => [x.target, x.met])).toEqual([
      ['Collector outage in one zone', true],
      ['NATS outage', false],
    ]);
    set.add(report('collector-outage', 0.6, [result('spillway', { p90: 100, windows: [shedding] })]));
    v = outageTargets(set);
    expect(v[0]?.met).toBe(false);
    expect(v[0]?.detail).toMatch(/429 during 5 vs 0 before/);
  });

  it('two EPPs per zone, sharing: every figure within 5 % of one EPP per zone; the unshared variant reported beside it', () => {
    const set = new ResultSet();
    set.add(report('hot-zone-same-region', 0.95, [result('spillway', { p90: 200, cross: 0.18, hit: 0.3 })], 0.175));
    set.add(
      report(
        'two-epps-hot-zone',
        0.95,
        [result('spillway', { p90: 206, cross: 0.184, hit: 0.3 }), result('spillway-unshared', { p90: 300, cross: 0.25 })],
        0.175,
      ),
    );
    let v = twoEppTargets(set);
    expect(v[0]?.met).toBe(true);
    expect(v[0]?.detail).toMatch(/p90 206 ms vs 200 ms \(1\.03×\)/);
    expect(v[0]?.detail).toMatch(/without sharing \(spillway-unshared\): p90 300 ms \(1\.50×\)/);
    expect(v[1]?.met).toBe(true);
    expect(v[1]?.detail).toMatch(/cross-zone 18\.4 % vs overflow 17\.5 % \(with sharing\); without sharing 25\.0 %/);
    // 6 % slower at p90, or a cross-zone share 2 points off: not met, and said where.
    set.add(report('two-epps-hot-zone', 0.95, [result('spillway', { p90: 212, cross: 0.2, hit: 0.3 })], 0.175));
    v = twoEppTargets(set);
    expect(v[0]?.met).toBe(false);
    expect(v[0]?.detail).toMatch(/p90 212 ms vs 200 ms \(1\.06×, outside\)/);
    expect(v[0]?.detail).toMatch(/cross-zone 20\.0 % vs 18\.0 % \(outside\)/);
    // Small shares compare within half a point.
    set.add(report('prefix-heavy-same-region', 0.8, [result('spillway', { p90: 100, cross: 0.001, hit: 0.85 })]));
    set.add(report('two-epps-prefix-heavy', 0.8, [result('spillway', { p90: 100, cross: 0.004, hit: 0.848 })]));
    expect(twoEppTargets(set).find((t) => t.scenario === 'two-epps-prefix-heavy')?.met).toBe(true);
    expect(
      allTargets(set)
        .map((g) => g.verdicts.length)
        .reduce((a, b) => a + b, 0),
    ).toBeGreaterThanOrEqual(3);
  });

  it('two EPPs per zone without the one-EPP runs at that load: not measured', () => {
    const set = new ResultSet();
    set.add(report('two-epps-hot-zone', 0.95, [result('spillway', { p90: 206 })], 0.175));
    expect(twoEppTargets(set)[0]).toMatchObject({ met: undefined, detail: 'not measured: needs hot-zone-same-region at 95 %' });
  });

  it("precise: ≤ 0.8× spillway and the reference, and ≥ 90 % of the oracle's hits; missing runs are not measured", () => {
    const set = new ResultSet();
    const base = [
      result('spillway', { p90: 1000, hit: 0.6 }),
      result('reference', { p90: 900 }),
      result('oracle', { p90: 500, hit: 0.85 }),
    ];
    set.add(report('prefix-heavy-same-region', 0.8, [...base, result('spillway-precise', { p90: 700, hit: 0.8 })]));
    set.add(report('prefix-heavy-same-region', 1.1, [...base, result('spillway-precise', { p90: 750, hit: 0.8 })]));
    set.add(report('prefix-heavy-mixed-region', 0.8, [...base, result('spillway-precise', { p90: 700, hit: 0.7 })]));
    set.add(report('prefix-heavy-mixed-region', 0.4, base));
    const v = preciseTargets(set);
    expect(v.map((x) => [x.scenario, x.load, x.met])).toEqual([
      ['prefix-heavy-same-region', 0.8, true],
      ['prefix-heavy-same-region', 1.1, false],
      ['prefix-heavy-mixed-region', 0.4, undefined],
      ['prefix-heavy-mixed-region', 0.8, false],
    ]);
    expect(v[0]?.detail).toMatch(/0\.70× spillway approximate \(1000 ms; ≤ 0\.8×\), 0\.78× reference/);
    expect(v[3]?.detail).toMatch(/= 0\.82× the oracle's 85\.0 %/);
  });

  it('llm-d-like: the order and the halved published ratios, approximate being the better of spillway and the reference', () => {
    const set = new ResultSet();
    set.add(
      report('llm-d-like', 0.8, [
        result('spillway-precise', { p90: 100 }),
        result('spillway', { p90: 3000 }),
        result('reference', { p90: 2600 }),
        result('random', { p90: 5000 }),
      ]),
    );
    set.add(
      report('llm-d-like', 0.95, [
        result('spillway-precise', { p90: 100 }),
        result('spillway', { p90: 200 }),
        result('random', { p90: 5000 }),
      ]),
    );
    set.add(
      report('llm-d-like-4-epps', 0.8, [
        result('spillway-precise', { p90: 100 }),
        result('spillway', { p90: 3000 }),
        result('random', { p90: 4000 }),
      ]),
    );
    const v = llmdTargets(set);
    expect(v.map((x) => [x.scenario, x.load, x.met])).toEqual([
      ['llm-d-like', 0.8, true],
      ['llm-d-like', 0.95, false],
      ['llm-d-like-4-epps', 0.8, false],
    ]);
    expect(v[0]?.detail).toMatch(/approximate \(reference\) 2600 ms.*approximate\/precise 26\.00×/);
  });
});
