import { describe, expect, it } from 'vitest';
import { resolveScenario, runScenario, sweepTables, withSweep, strategySpecs } from '../src/index.js';
import { rateSchedules } from '../src/load.js';
import { spillOf } from '../src/spill.js';
import type { ZoneSpec } from '../src/topology.js';
import { parse, smallScenario } from './helpers.js';

/** Whole simulations: generous on a busy machine. */
const SIM_TIMEOUT_MS = 180_000;

const zones: ZoneSpec[] = [
  { zone: 'zone-a', region: 'r1', replicas: 2 },
  { zone: 'zone-b', region: 'r1', replicas: 2 },
  { zone: 'zone-c', region: 'r1', replicas: 2 },
];
const perReplica = [10, 10, 10];
const constant = (rates: number[]) => rates.map((r) => ({ startsMs: [0], rates: [r] }));

describe('spill judged against what is required', () => {
  it('one hot zone: required = its overflow while the others have room; equal utilisation asks for more', () => {
    // Capacities 20 each; a offered 30, b and c 10: overflow 10, spare 20.
    const f = spillOf({ rates: constant([30, 10, 10]), faults: [], zones, perReplica, fromMs: 0, toMs: 10_000 });
    expect(f.overflowShare).toBeCloseTo(10 / 50, 9);
    expect(f.requiredShare).toBeCloseTo(10 / 50, 9);
    // Utilisation 50/60 everywhere: a keeps 20 × 5/6, sends 30 − 16.67.
    expect(f.equalUtilisationShare).toBeCloseTo((30 - (20 * 50) / 60) / 50, 9);
    expect(f.meanLoad).toBeCloseTo(50 / 60, 9);
  });

  it('everyone over at once: overflow but nowhere to go, so no spill is required', () => {
    const f = spillOf({ rates: constant([30, 25, 22]), faults: [], zones, perReplica, fromMs: 0, toMs: 10_000 });
    expect(f.overflowShare).toBeGreaterThan(0.2);
    expect(f.requiredShare).toBe(0);
    expect(f.peakLoad).toBeCloseTo(77 / 60, 9);
  });

  it('overflow larger than the others’ room: required is the room', () => {
    const f = spillOf({ rates: constant([50, 18, 18]), faults: [], zones, perReplica, fromMs: 0, toMs: 10_000 });
    expect(f.requiredShare).toBeCloseTo(4 / 86, 9);
    expect(f.overflowShare).toBeCloseTo(30 / 86, 9);
  });

  it('over time: a lost replica halves a zone for part of the window, and the shares weigh each span by its arrivals', () => {
    const faults = [
      { kind: 'replica-down' as const, atMs: 5000, zone: 0, replicas: [0] },
      { kind: 'replica-up' as const, atMs: 7500, zone: 0, replicas: [0] },
    ];
    // a offered 15: fine at 20, over by 5 at 10 (2.5 s of 10 s).
    const f = spillOf({ rates: constant([15, 10, 10]), faults, zones, perReplica, fromMs: 0, toMs: 10_000 });
    expect(f.requiredShare).toBeCloseTo((5 * 2.5) / (35 * 10), 9);
    expect(f.peakLoad).toBeCloseTo(35 / 50, 9);
  });

  it('bursts keep each zone’s mean and give the burst its peak; correlated bursts require no spill, rotating ones do', () => {
    const shaped = (bursts: Record<string, unknown>) => {
      const file = parse(smallScenario({ durationS: 60, warmupS: 0, load: { clusterFraction: 0.6, bursts } }));
      const zoneCapacity = [20, 20, 20];
      return rateSchedules({ file, zones, zoneCapacity, clusterRps: 60, loadOverride: undefined, durationMs: 60_000 });
    };
    const all = shaped({ everyS: 10, lengthS: 2, factor: 3, zones: 'all' });
    // 60 s: four rotations of three 5 s bursts, so every zone bursts equally often.
    const rotating = shaped({ everyS: 5, lengthS: 2.5, factor: 3, zones: 'rotate' });
    for (const schedules of [all, rotating]) {
      for (const s of schedules) {
        const mean = s.rates.reduce((acc, r, i) => acc + r * ((s.startsMs[i + 1] ?? 60_000) - (s.startsMs[i] as number)), 0) / 60_000;
        expect(mean).toBeCloseTo(12, 6);
      }
    }
    const figures = (rates: typeof all) => spillOf({ rates, faults: [], zones, perReplica, fromMs: 0, toMs: 60_000 });
    expect(figures(all).requiredShare).toBe(0);
    expect(figures(all).peakLoad).toBeGreaterThan(1);
    expect(figures(rotating).requiredShare).toBeGreaterThan(0.05);
  });

  it('a diurnal swing leads with the zone of the smallest lag', () => {
    const file = parse(
      smallScenario({
        durationS: 40,
        warmupS: 0,
        load: { clusterFraction: 0.6, diurnal: { periodS: 40, amplitude: 0.5, lagS: { 'zone-b': 10 } } },
      }),
    );
    const [a, b] = rateSchedules({ file, zones, zoneCapacity: [20, 20, 20], clusterRps: 60, loadOverride: undefined, durationMs: 40_000 });
    const peakAt = (s: { startsMs: readonly number[]; rates: readonly number[] }) => s.startsMs[s.rates.indexOf(Math.max(...s.rates))];
    expect(peakAt(a!)).toBeCloseTo(19_000, -3);
    expect(peakAt(b!)).toBeCloseTo(29_000, -3);
  });
});

describe('the latency / cross-zone curve', () => {
  it('a sweep adds one point per value after each Spillway strategy; the strategy’s own value is its own run', () => {
    const specs = withSweep(strategySpecs(['reference', 'spillway', { name: 'spillway-unshared', kind: 'spillway', sharing: false }], {}), {
      zoneBiasMs: [0, 8, 16],
    });
    expect(specs.map((s) => s.name)).toEqual([
      'reference',
      'spillway',
      'spillway zoneBiasMs=0',
      'spillway zoneBiasMs=16',
      'spillway-unshared',
    ]);
    expect(specs[1]?.sweep).toEqual({ of: 'spillway', field: 'zoneBiasMs', value: 8 });
    expect(specs[3]?.config).toEqual({ zoneBiasMs: 16 });
  });

  it(
    'reports, per value, p50/p90/p99 and the cross-zone share, beside every other strategy’s point',
    async () => {
      const s = resolveScenario(
        parse(
          smallScenario({
            durationS: 10,
            strategies: ['random', 'spillway'],
            load: { clusterFraction: 0.8, zoneFractions: { 'zone-a': 1.5 } },
          }),
        ),
        { sweep: { zoneBiasMs: [0, 32] } },
      );
      const report = await runScenario(s, { workers: 0 });
      const [table] = sweepTables(report);
      expect(table?.table.header).toEqual(['strategy', 'TTFT p50 (ms)', 'p90', 'p99', 'cross-zone %']);
      expect(table?.table.rows.map((r) => r[0])).toEqual(['spillway zoneBiasMs=0', 'spillway zoneBiasMs=32', 'random']);
      const crossOf = (name: string) => report.results.find((r) => r.strategy === name)?.crossZoneShare ?? Number.NaN;
      // A higher bias buys locality.
      expect(crossOf('spillway zoneBiasMs=32')).toBeLessThan(crossOf('spillway zoneBiasMs=0'));
    },
    SIM_TIMEOUT_MS,
  );
});
