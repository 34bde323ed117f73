import type { RunResult, ScenarioReport, WindowResult } from '@spillway/whatif';
import { describe, expect, it } from 'vitest';
import { allTargets, curveTargets, fairBaselineTargets, requiredSpillTargets, ResultSet, zonalTargets } from './targets.js';

/** A run with the given figures (everything else neutral). */
function result(strategy: string, f: { p90: number; p99?: number; cross?: number; windows?: WindowResult[] }): RunResult {
  const figures = {
    arrivals: 1000,
    served: 1000,
    rejected429: 0,
    rejected503: 0,
    aborted: 0,
    ttftMs: { p50: f.p90 / 2, p90: f.p90, p99: f.p99 ?? f.p90 * 2 },
    e2eMs: { p50: 1000, p90: 2000 },
    outputTokensPerS: 1000,
    crossZoneShare: f.cross ?? 0,
    fallbackShare: 0,
    prefixHitShare: 0,
    servedByZone: {},
    arrivalsByZone: {},
    crossZoneShareByZone: {},
    goodputPerS: 20,
    goodputShare: 1,
    ttftP99ByBand: {},
    tenants: {},
    fairness: 1,
  };
  return { strategy, seed: 1, ...figures, unbounded: false, queueGrowthPerS: 0, windows: f.windows ?? [] };
}

function report(
  scenario: string,
  load: number,
  results: RunResult[],
  spill: { required?: number; sweep?: Record<string, number> } = {},
): ScenarioReport {
  const sweep = spill.sweep ?? {};
  return {
    scenario,
    title: scenario,
    seeds: [1],
    load,
    meanLoad: load,
    peakLoad: load,
    overflowShare: spill.required ?? 0,
    requiredSpillShare: spill.required ?? 0,
    equalUtilisationShare: spill.required ?? 0,
    durationS: 60,
    warmupS: 10,
    ttftObjectiveMs: 1000,
    capacity: { perReplicaRps: {}, clusterRps: 100, method: '' },
    strategies: [...new Set(results.map((r) => r.strategy))].map((name) => ({
      name,
      kind: 'spillway' as const,
      description: '',
      config: {},
      ...(name in sweep ? { sweep: { of: 'spillway', field: 'zoneBiasMs', value: sweep[name] as number } } : {}),
    })),
    results,
  };
}

function lossWindow(p90: number): WindowResult {
  const { strategy: _s, seed: _seed, unbounded: _u, queueGrowthPerS: _q, windows: _w, ...figures } = result('x', { p90 });
  return { name: 'replica-down zone-a (2 replicas)', fromS: 20, toS: 50, staleShareByZone: {}, eventsDelivered: 0, ...figures };
}

describe('routing targets (picking v3)', () => {
  it('fair baselines: each percentile against the baseline best at it, cross-zone against half the p90-best one', () => {
    const set = new ResultSet();
    const baselines = [
      result('reference', { p90: 120, p99: 150, cross: 0.66 }),
      result('reference-plus', { p90: 100, p99: 300, cross: 0.66 }),
      result('envoy-load-aware', { p90: 400, p99: 900, cross: 0.1 }),
      result('llm-d-topology', { p90: 500, p99: 1000, cross: 0.1 }),
    ];
    set.add(report('hot-zone-same-region', 0.8, [result('spillway', { p90: 104, p99: 157, cross: 0.3 }), ...baselines]));
    set.add(report('hot-zone-same-region', 0.95, [result('spillway', { p90: 104, p99: 160, cross: 0.3 }), ...baselines]));
    set.add(report('balanced-same-region', 0.6, [result('spillway', { p90: 90, p99: 100, cross: 0.4 }), ...baselines]));
    // Out of the 60–95 % range: not judged.
    set.add(report('balanced-same-region', 0.4, [result('spillway', { p90: 999, cross: 0.9 }), ...baselines]));
    const v = fairBaselineTargets(set);
    expect(v.map((r) => [r.scenario, r.load, r.met])).toEqual([
      ['balanced-same-region', 0.6, false],
      ['hot-zone-same-region', 0.8, true],
      ['hot-zone-same-region', 0.95, false],
    ]);
    expect(v[1]?.detail).toMatch(/p90 104 ms = 1\.04× reference-plus \(100 ms\), p99 157 ms = 1\.05× reference \(150 ms\)/);
    expect(v[1]?.detail).toMatch(/cross-zone 30\.0 % vs ≤ 33\.0 %/);
    // 0.4 > half of 0.66: the cross-zone bound fails balanced at 60 %.
    expect(v[0]?.detail).toMatch(/cross-zone 40\.0 % vs ≤ 33\.0 %/);
  });

  it('fair baselines: a scenario without baseline runs is not measured, never a silent pass', () => {
    const set = new ResultSet();
    set.add(report('two-regions', 0.8, [result('spillway', { p90: 1 })]));
    expect(fairBaselineTargets(set)[0]?.met).toBeUndefined();
  });

  it('reference-zonal: the whole window where a zone is overloaded, the loss window where one is lost', () => {
    const set = new ResultSet();
    set.add(report('hot-zone-same-region', 0.95, [result('spillway', { p90: 90 }), result('reference-zonal', { p90: 100 })]));
    set.add(report('heterogeneous-zones', 0.8, [result('spillway', { p90: 95 }), result('reference-zonal', { p90: 100 })]));
    set.add(
      report('zone-loss-same-region', 0.8, [
        // Over the whole window Spillway is worse; during the loss it is better.
        result('spillway', { p90: 200, windows: [lossWindow(50)] }),
        result('reference-zonal', { p90: 100, windows: [lossWindow(100)] }),
      ]),
    );
    const v = zonalTargets(set);
    expect(v.map((r) => [r.scenario, r.met])).toEqual([
      ['hot-zone-same-region', true],
      ['heterogeneous-zones', false],
      ['zone-loss-same-region', true],
    ]);
    expect(v[2]?.detail).toMatch(/^during the loss: p90 50 ms = 0\.50×/);
  });

  it('required spill: within ±25 % of the required share, at 95 % only', () => {
    const set = new ResultSet();
    set.add(report('hot-zone-same-region', 0.95, [result('spillway', { p90: 1, cross: 0.21 })], { required: 0.175 }));
    set.add(report('hot-zone-mixed-region', 0.95, [result('spillway', { p90: 1, cross: 0.23 })], { required: 0.175 }));
    set.add(report('hot-zone-mixed-region', 0.8, [result('spillway', { p90: 1, cross: 0.5 })], { required: 0.2 }));
    const v = requiredSpillTargets(set);
    expect(v.map((r) => [r.scenario, r.load, r.met])).toEqual([
      ['hot-zone-same-region', 0.95, true],
      ['hot-zone-mixed-region', 0.95, false],
    ]);
    expect(v[1]?.detail).toMatch(/cross-zone 23\.0 % vs required 17\.5 % \(1\.31×/);
  });

  it('curve: met when any swept point reaches the best zone-unaware p99', () => {
    const set = new ResultSet();
    const sweep = { spillway: 8, 'spillway zoneBiasMs=0': 0, 'spillway zoneBiasMs=32': 32 };
    set.add(
      report(
        'hot-zone-same-region',
        0.95,
        [
          result('spillway', { p90: 1, p99: 200 }),
          result('spillway zoneBiasMs=0', { p90: 1, p99: 140 }),
          result('spillway zoneBiasMs=32', { p90: 1, p99: 300 }),
          result('reference-plus', { p90: 1, p99: 150 }),
          result('random', { p90: 1, p99: 900 }),
          // Not zone-unaware: not the bar.
          result('envoy-load-aware', { p90: 1, p99: 100 }),
        ],
        { sweep },
      ),
    );
    set.add(
      report('balanced-same-region', 0.8, [result('spillway', { p90: 1, p99: 200 }), result('reference-plus', { p90: 1, p99: 150 })], {
        sweep,
      }),
    );
    const v = curveTargets(set);
    expect(v.map((r) => [r.scenario, r.met])).toEqual([
      ['balanced-same-region', false],
      ['hot-zone-same-region', true],
    ]);
    expect(v[1]?.detail).toMatch(/best point zoneBiasMs=0: p99 140 ms = 0\.93× reference-plus \(150 ms\)/);
  });

  it('allTargets lists the four targets in report order', () => {
    expect(allTargets(new ResultSet()).map((g) => g.verdicts.length)).toEqual([0, 0, 0, 0]);
  });
});
