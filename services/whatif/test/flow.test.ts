import { describe, expect, it } from 'vitest';
import { flowTable, resolveScenario, runStrategy, type ResolvedScenario, type RunResult } from '../src/index.js';
import { jainOfFairShares, maxMinFair } from '../src/tally.js';
import { ArrivalStream, constantRate, type WorkloadSpec } from '../src/workload.js';
import { parse, problems, smallScenario } from './helpers.js';

/** Whole simulations: generous on a busy machine. */
const SIM_TIMEOUT_MS = 180_000;

const TENANTS = [
  {
    name: 'steady',
    share: 0.25,
    priorities: [
      { priority: 1, share: 0.5 },
      { priority: 0, share: 0.5 },
    ],
  },
  {
    name: 'flood',
    share: 0.75,
    fairnessId: 'tenant-flood',
    priorities: [
      { priority: 1, share: 0.2 },
      { priority: 0, share: 0.8 },
    ],
  },
];

const resolve = (overrides: Record<string, unknown>): ResolvedScenario => resolveScenario(parse(smallScenario(overrides)));
const run = (s: ResolvedScenario, name: string): RunResult => {
  const spec = s.strategies.find((x) => x.name === name);
  if (!spec) throw new Error(`no strategy ${name}`);
  return runStrategy(s, spec, 7);
};

describe('tenants in the scenario file', () => {
  it('accepts tenants with fairness ids and priority bands; an old file without them is unchanged', () => {
    const s = resolve({ workload: { kind: 'sharegpt', tenants: TENANTS } });
    expect(s.workload.tenants?.map((t) => [t.name, t.fairnessId, t.priorities.length])).toEqual([
      ['steady', 'steady', 2],
      ['flood', 'tenant-flood', 2],
    ]);
    expect(s.ttftObjectiveMs).toBe(1000);
    expect(resolve({}).workload.tenants).toBeUndefined();
  });

  it('rejects shares that do not sum to 1, bands that do not, and a tenant listed twice, naming the field', () => {
    expect(problems(smallScenario({ workload: { kind: 'sharegpt', tenants: [{ name: 'a', share: 0.5 }] } }))).toEqual([
      'workload.tenants: shares must sum to 1, got 0.5',
    ]);
    expect(
      problems(
        smallScenario({
          workload: { kind: 'sharegpt', tenants: [{ name: 'a', share: 1, priorities: [{ priority: 1, share: 0.3 }] }] },
        }),
      ),
    ).toEqual(['workload.tenants.0.priorities: shares must sum to 1, got 0.3']);
    expect(
      problems(
        smallScenario({
          workload: {
            kind: 'sharegpt',
            tenants: [
              { name: 'a', share: 0.5 },
              { name: 'a', share: 0.5 },
            ],
          },
        }),
      ),
    ).toEqual(['workload.tenants.1.name: tenant a is listed twice']);
    expect(problems(smallScenario({ ttftObjectiveMs: 0 }))[0]).toMatch(/^ttftObjectiveMs: /);
    expect(problems(smallScenario({ workload: { kind: 'sharegpt', tenants: [{ name: 'a', share: 1, weight: 2 }] } }))[0]).toMatch(/weight/);
  });

  it('draws each request its tenant and band by share; without tenants the requests are what they were', () => {
    const base: WorkloadSpec = {
      parts: [{ weight: 1, spec: { kind: 'sharegpt', inputMean: 250, outputMean: 200, sigma: 0.8, inputMax: 2048, outputMax: 1024 } }],
      sheddableShare: 0,
    };
    const stream = (workload: WorkloadSpec) =>
      new ArrivalStream({ workload, groups: [undefined], schedule: constantRate(1000), gateway: 0, gateways: 1, seed: 3, endMs: 20_000 });
    const tenants = [
      {
        name: 'steady',
        share: 0.25,
        fairnessId: 'steady',
        priorities: [
          { priority: 1, share: 0.5 },
          { priority: 0, share: 0.5 },
        ],
      },
      { name: 'flood', share: 0.75, fairnessId: 'flood', priorities: [{ priority: 0, share: 1 }] },
    ];
    const plain = stream(base);
    const withTenants = stream({ ...base, tenants });
    let steady = 0;
    let steadyHigh = 0;
    let n = 0;
    for (let r = withTenants.next(), p = plain.next(); r && p; r = withTenants.next(), p = plain.next(), n++) {
      expect(p.tenant).toBe(0);
      expect(p.fairnessId).toBeUndefined();
      expect(p.priority).toBe(0);
      if (r.fairnessId === 'steady') {
        steady++;
        if (r.priority === 1) steadyHigh++;
      } else {
        expect(r.fairnessId).toBe('flood');
        expect(r.priority).toBe(0);
      }
    }
    expect(n).toBeGreaterThan(10_000);
    expect(steady / n).toBeGreaterThan(0.23);
    expect(steady / n).toBeLessThan(0.27);
    expect(steadyHigh / steady).toBeGreaterThan(0.45);
    expect(steadyHigh / steady).toBeLessThan(0.55);
  });
});

describe("fairness between tenants (Jain's index over max-min fair shares)", () => {
  it('water-fills the total over the demands', () => {
    expect(maxMinFair(100, [25, 100])).toEqual([25, 75]);
    expect(maxMinFair(60, [100, 100, 10])).toEqual([25, 25, 10]);
    expect(maxMinFair(10, [0, 100])).toEqual([0, 10]);
  });

  it('is 1 at the fair shares, falls when one tenant takes the others’ share, and is 1 with one tenant', () => {
    expect(jainOfFairShares([25, 75], [25, 100])).toBeCloseTo(1, 6);
    // Split in proportion to demand (FCFS at the servers): the small tenant gets less than it asked.
    expect(jainOfFairShares([20, 80], [25, 100])).toBeLessThan(0.99);
    expect(jainOfFairShares([0, 100], [50, 100])).toBeCloseTo(0.5, 6);
    expect(jainOfFairShares([10], [20])).toBe(1);
    expect(jainOfFairShares([0, 0], [10, 10])).toBe(1);
  });
});

describe('spillway-fc', () => {
  it(
    'under a flood at 130 % of capacity: the steady tenant and the high band stay fast, held requests are answered, every arrival is counted',
    () => {
      const s = resolve({
        durationS: 20,
        workload: { kind: 'sharegpt', tenants: TENANTS },
        load: { clusterFraction: 1.3 },
        strategies: ['spillway', 'spillway-fc'],
      });
      const plain = run(s, 'spillway');
      const fc = run(s, 'spillway-fc');
      for (const r of [plain, fc]) expect(r.served + r.rejected429 + r.rejected503 + r.aborted).toBe(r.arrivals);
      // Without flow control nobody is refused and everyone waits; with it the flood's surplus is refused.
      expect(plain.rejected503).toBe(0);
      expect(fc.rejected503).toBeGreaterThan(0);
      // The steady tenant, asking less than its fair share, is served (a few of its low-band requests
      // may give way to the flood's high band when the queue is full); the flood's surplus is not.
      const servedShare = (tenant: string) => (fc.tenants[tenant]?.served ?? 0) / (fc.tenants[tenant]?.arrivals ?? 1);
      expect(servedShare('steady')).toBeGreaterThan(0.98);
      expect(servedShare('flood')).toBeLessThan(servedShare('steady'));
      expect(fc.tenants['steady']?.ttftMs.p99).toBeLessThan((plain.tenants['steady']?.ttftMs.p99 as number) / 2);
      expect(fc.ttftP99ByBand['1']).toBeLessThan((fc.ttftP99ByBand['0'] as number) / 2);
      expect(fc.goodputPerS).toBeGreaterThan(plain.goodputPerS);
      expect(fc.fairness).toBeGreaterThan(plain.fairness);
      // No request waits at its EPP past maxHoldMs (5 s) plus its way to the replica and its prefill.
      expect(fc.tenants['flood']?.ttftMs.p99).toBeLessThan(5000 + 2000);
    },
    SIM_TIMEOUT_MS,
  );

  it(
    'with room to spare it holds nothing: the same figures as spillway',
    () => {
      const s = resolve({ durationS: 12, workload: { kind: 'sharegpt', tenants: TENANTS }, strategies: ['spillway', 'spillway-fc'] });
      const plain = run(s, 'spillway');
      const fc = run(s, 'spillway-fc');
      expect(fc.rejected503).toBe(0);
      expect(fc.ttftMs).toEqual(plain.ttftMs);
      expect(fc.crossZoneShare).toBe(plain.crossZoneShare);
      expect(fc.goodputPerS).toBe(plain.goodputPerS);
    },
    SIM_TIMEOUT_MS,
  );

  it('reports the flow figures only for workloads with tenants', () => {
    const s = resolve({ durationS: 8, workload: { kind: 'sharegpt', tenants: TENANTS }, strategies: ['spillway-fc'] });
    const result = run(s, 'spillway-fc');
    const report = {
      scenario: 'small',
      title: 'small',
      seeds: [7],
      load: 0.6,
      meanLoad: 0.6,
      peakLoad: 0.6,
      overflowShare: 0,
      requiredSpillShare: 0,
      equalUtilisationShare: 0,
      durationS: 8,
      warmupS: 3,
      ttftObjectiveMs: 1000,
      capacity: { perReplicaRps: {}, clusterRps: 1, method: '' },
      strategies: [{ name: 'spillway-fc', kind: 'spillway-fc' as const, description: '', config: {} }],
      results: [result],
    };
    const table = flowTable(report);
    expect(table?.table.header).toEqual([
      'strategy',
      'goodput (req/s)',
      'goodput %',
      'p99 band 1 (ms)',
      'p99 band 0 (ms)',
      'p99 steady (ms)',
      'p99 flood (ms)',
      'steady served %',
      'flood served %',
      'fairness (Jain)',
      'cross-zone %',
    ]);
    expect(flowTable({ ...report, results: [{ ...result, tenants: { all: result.tenants['steady'] as never } }] })).toBeUndefined();
  });
});
