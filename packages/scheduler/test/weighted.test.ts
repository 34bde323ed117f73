import { describe, expect, it } from 'vitest';
import { Scheduler, type Decision, type PickRequest, type SchedulerConfigInput } from '../src/index.js';
import { buildFleet, POOL, saturate, T0, threeZones, type PodSpec } from './fleet-fixture.js';

interface Scenario {
  name: string;
  pods: PodSpec[];
  config?: SchedulerConfigInput;
  request?: Partial<PickRequest>;
  zone?: string;
  pool?: string;
  expect: {
    status: Decision['status'];
    rule: Decision['rule'];
    /** Pods of the list, in order. */
    pods?: string[];
    reasons?: string[];
    destination?: string;
    overloaded?: boolean;
    counts?: Partial<Decision['counts']>;
    penaltiesIgnored?: boolean;
  };
}

const subsetOf = (pods: PodSpec[], names: string[]): string[] => names.map((n) => pods.find((p) => p.pod === n)?.address as string);
const idle = threeZones();
const localBusy = saturate(threeZones(), ['a']);
const allBusy = saturate(threeZones(), ['a', 'b', 'c']);
const objectives = { objectives: { batch: { priority: -1 }, chat: { priority: 10 } } };

const scenarios: Scenario[] = [
  {
    name: 'all zones idle, no subset: best local first, the last slot to the nearest remote',
    pods: idle,
    expect: {
      status: 'routed',
      rule: 'local',
      pods: ['a0', 'a1', 'b0'],
      reasons: ['local-best', 'local', 'cross-zone-fallback'],
      overloaded: false,
      destination: '10.0.0.1:8000,10.0.0.2:8000,10.0.1.1:8000',
    },
  },
  {
    name: 'local zone overloaded: spill to the same region, best local keeps the last slot',
    pods: localBusy,
    expect: { status: 'routed', rule: 'spill', pods: ['b0', 'b1', 'a0'], reasons: ['spill', 'spill', 'local-fallback'], overloaded: true },
  },
  {
    name: 'region tiers: a busier same-region zone still comes before an idle other region',
    pods: threeZones({ b0: { waiting: 4 }, b1: { waiting: 4, kv: 0.7 } }),
    expect: { status: 'routed', rule: 'local', pods: ['a0', 'a1', 'b0'] },
  },
  {
    name: 'region tiers: the other region once the same region is saturated',
    pods: saturate(threeZones(), ['a', 'b']),
    expect: { status: 'routed', rule: 'spill', pods: ['c0', 'c1', 'a0'], reasons: ['spill', 'spill', 'local-fallback'] },
  },
  {
    name: 'strict subset of local pods while local is overloaded: the list stays inside the subset',
    pods: localBusy,
    request: { subset: subsetOf(localBusy, ['a0', 'a1', 'a2']) },
    expect: {
      status: 'routed',
      rule: 'last-resort',
      pods: ['a0', 'a1', 'a2'],
      reasons: ['last-resort', 'last-resort', 'last-resort'],
      counts: { eligible: 3, full: 3 },
    },
  },
  {
    name: 'strict subset with one remote pod: spill stays inside the subset',
    pods: localBusy,
    request: { subset: subsetOf(localBusy, ['a0', 'a1', 'c1']) },
    expect: { status: 'routed', rule: 'spill', pods: ['c1', 'a0', 'a1'], reasons: ['spill', 'local-fallback', 'local-fallback'] },
  },
  {
    name: 'locality mode: spills beyond the subset to other zones from the view',
    pods: localBusy,
    config: { subsetMode: 'locality' },
    request: { subset: subsetOf(localBusy, ['a1', 'a2']) },
    expect: { status: 'routed', rule: 'spill', pods: ['b0', 'b1', 'a1'], counts: { eligibleLocal: 2, eligible: 6 } },
  },
  {
    name: 'locality mode: local pods outside the subset are not eligible; unfilled local slots go remote',
    pods: idle,
    config: { subsetMode: 'locality' },
    request: { subset: subsetOf(idle, ['a2']) },
    expect: {
      status: 'routed',
      rule: 'local',
      pods: ['a2', 'b0', 'b1'],
      reasons: ['local-best', 'cross-zone-fallback', 'cross-zone-fallback'],
    },
  },
  {
    name: 'locality mode with an empty subset: no local preference, so it spills (documented choice)',
    pods: idle,
    config: { subsetMode: 'locality' },
    request: { subset: [] },
    expect: { status: 'routed', rule: 'spill', pods: ['b0', 'b1', 'c0'], overloaded: true },
  },
  {
    name: 'all saturated, sheddable objective: 429',
    pods: allBusy,
    config: objectives,
    request: { objective: 'batch' },
    expect: { status: 429, rule: 'shed', pods: [], destination: '', overloaded: true },
  },
  {
    name: 'all saturated, non-sheddable objective: stays local, best score, fallback to the nearest remote',
    pods: allBusy,
    config: objectives,
    request: { objective: 'chat' },
    expect: { status: 'routed', rule: 'last-resort', pods: ['a0', 'a1', 'b0'], reasons: ['last-resort', 'last-resort', 'last-resort'] },
  },
  {
    name: 'all saturated, unknown objective is priority 0: not shed',
    pods: allBusy,
    config: objectives,
    request: { objective: 'no-such-objective' },
    expect: { status: 'routed', rule: 'last-resort' },
  },
  {
    name: 'sheddable request while something has room: routed',
    pods: localBusy,
    config: objectives,
    request: { objective: 'batch' },
    expect: { status: 'routed', rule: 'spill' },
  },
  {
    name: 'empty strict subset: 503',
    pods: idle,
    request: { subset: [] },
    expect: { status: 503, rule: 'empty-subset', pods: [], counts: { eligible: 0, subsetEntries: 0 } },
  },
  {
    name: 'subset of malformed entries only: 503, each counted',
    pods: idle,
    request: { subset: ['nope', '10.0.0.1:99999', '10.0.0.1:', 42, '[fd00::1', ''] },
    expect: { status: 503, rule: 'subset-unmatched', counts: { subsetEntries: 6, subsetIgnored: 6, subsetUnmatched: 0 } },
  },
  {
    name: 'subset of unknown endpoints only: 503, counted as unmatched',
    pods: idle,
    request: { subset: ['10.9.9.9:8000', '10.0.0.1:9000'] },
    expect: { status: 503, rule: 'subset-unmatched', counts: { subsetEntries: 2, subsetUnmatched: 2, subsetIgnored: 0 } },
  },
  {
    name: 'malformed entries beside a good one are ignored and counted',
    pods: idle,
    request: { subset: ['garbage', '10.0.0.2:8000', '10.0.0.2:8000'] },
    expect: { status: 'routed', rule: 'local', pods: ['a1'], counts: { eligible: 1, subsetEntries: 3, subsetIgnored: 1 } },
  },
  {
    name: 'comma-separated subset string',
    pods: idle,
    request: { subset: '10.0.0.3:8000,10.0.0.2:8000' },
    expect: { status: 'routed', rule: 'local', pods: ['a1', 'a2'] },
  },
  {
    name: 'a stale pod whose zone-mates are fresh is suspect: saturated',
    pods: threeZones({ a0: { metricsAge: 1500 } }),
    expect: { status: 'routed', rule: 'local', pods: ['a1', 'a2', 'b0'], reasons: ['local-best', 'local', 'cross-zone-fallback'] },
  },
  {
    name: 'a pod without metrics whose zone-mates have them is suspect: saturated',
    pods: threeZones({ a0: { noMetrics: true } }),
    expect: { status: 'routed', rule: 'local', pods: ['a1', 'a2', 'b0'] },
  },
  {
    name: 'KV cache at the threshold saturates',
    pods: threeZones({ a0: { kv: 0.8 } }),
    expect: { status: 'routed', rule: 'local', pods: ['a1', 'a2', 'b0'] },
  },
  {
    name: 'pods not ready or deleted are not eligible',
    pods: threeZones({ a0: { ready: false }, a1: { deleted: true } }),
    expect: { status: 'routed', rule: 'local', pods: ['a2', 'b0', 'b1'], counts: { eligibleLocal: 1, eligible: 5 } },
  },
  {
    name: 'subset naming only not-ready and deleted pods: 503',
    pods: threeZones({ a0: { ready: false }, a1: { deleted: true } }),
    request: { subset: ['10.0.0.1:8000', '10.0.0.2:8000'] },
    expect: { status: 503, rule: 'subset-unmatched', counts: { subsetUnmatched: 2 } },
  },
  {
    name: 'no ready pod at all: 503',
    pods: threeZones({
      a0: { ready: false },
      a1: { ready: false },
      a2: { ready: false },
      b0: { ready: false },
      b1: { ready: false },
      c0: { ready: false },
      c1: { ready: false },
    }),
    expect: { status: 503, rule: 'no-ready-endpoints' },
  },
  {
    name: 'unknown pool: 503',
    pods: idle,
    pool: 'other',
    expect: { status: 503, rule: 'unknown-pool' },
  },
  {
    name: 'IPv6 subset entries match whatever their spelling; the destination is canonical',
    pods: [
      { pod: 'v0', zone: 'a', address: '[fd00::1]:8000', waiting: 0 },
      { pod: 'v1', zone: 'a', address: '[fd00::2]:8000', waiting: 1 },
      { pod: 'v2', zone: 'b', address: '[fd00::3]:8000', waiting: 0 },
    ],
    request: { subset: ['[FD00:0:0::1]:8000', '[fd00::3]:8000', 'fd00::2'] },
    expect: { status: 'routed', rule: 'local', destination: '[fd00::1]:8000,[fd00::2]:8000,[fd00::3]:8000' },
  },
  {
    name: 'bare-IP subset entry matches every port of that IP',
    pods: [
      { pod: 'r0', zone: 'a', address: '10.0.0.1:8000', waiting: 1 },
      { pod: 'r1', zone: 'a', address: '10.0.0.1:8001', waiting: 0 },
      { pod: 'r2', zone: 'a', address: '10.0.0.2:8000', waiting: 0 },
    ],
    request: { subset: ['10.0.0.1'] },
    expect: { status: 'routed', rule: 'local', pods: ['r1', 'r0'], counts: { eligible: 2 } },
  },
  {
    name: 'LoRA affinity: the pod running the adapter wins between equals',
    pods: [
      { pod: 'l0', zone: 'a', address: '10.0.0.1:8000', lora: { running: [], waiting: [], max: 0 } },
      { pod: 'l1', zone: 'a', address: '10.0.0.2:8000', lora: { running: ['sql-lora'], waiting: [], max: 1 } },
      { pod: 'l2', zone: 'a', address: '10.0.0.3:8000', lora: { running: ['other'], waiting: ['sql-lora'], max: 1 } },
    ],
    request: { model: 'sql-lora' },
    expect: { status: 'routed', rule: 'local', pods: ['l1', 'l2', 'l0'] },
  },
  {
    name: 'maxEndpoints 1: only the primary',
    pods: idle,
    config: { maxEndpoints: 1 },
    expect: { status: 'routed', rule: 'local', pods: ['a0'] },
  },
  {
    name: 'maxEndpoints 1 while overloaded: the remote primary only',
    pods: localBusy,
    config: { maxEndpoints: 1 },
    expect: { status: 'routed', rule: 'spill', pods: ['b0'] },
  },
  {
    name: 'crossZoneFallbacks 0: all local',
    pods: idle,
    config: { crossZoneFallbacks: 0 },
    expect: { status: 'routed', rule: 'local', pods: ['a0', 'a1', 'a2'] },
  },
  {
    name: 'crossZoneFallbacks 2: nearest remote first',
    pods: idle,
    config: { crossZoneFallbacks: 2 },
    expect: {
      status: 'routed',
      rule: 'local',
      pods: ['a0', 'b0', 'b1'],
      reasons: ['local-best', 'cross-zone-fallback', 'cross-zone-fallback'],
    },
  },
  {
    name: 'crossZoneFallbacks larger than the list never takes the primary slot',
    pods: idle,
    config: { crossZoneFallbacks: 9 },
    expect: { status: 'routed', rule: 'local', pods: ['a0', 'b0', 'b1'] },
  },
  {
    name: 'no remote capacity: the list still holds a remote entry, so a retry can leave the zone',
    pods: saturate(threeZones(), ['b', 'c']),
    expect: { status: 'routed', rule: 'local', pods: ['a0', 'a1', 'b0'], reasons: ['local-best', 'local', 'cross-zone-fallback'] },
  },
  {
    name: 'too few unsaturated local pods: unsaturated remote ones before saturated local ones',
    pods: threeZones({ a1: { waiting: 6 }, a2: { waiting: 7 } }),
    expect: {
      status: 'routed',
      rule: 'local',
      pods: ['a0', 'b0', 'b1'],
      reasons: ['local-best', 'cross-zone-fallback', 'cross-zone-fallback'],
    },
  },
  {
    name: 'local zone without pods: remote only',
    pods: threeZones().filter((p) => p.zone !== 'a'),
    expect: { status: 'routed', rule: 'spill', pods: ['b0', 'b1', 'c0'], counts: { eligibleLocal: 0 } },
  },
  {
    name: 'everything saturated and nothing local: best saturated remote as last resort',
    pods: saturate(threeZones(), ['b', 'c']).filter((p) => p.zone !== 'a'),
    expect: { status: 'routed', rule: 'last-resort', pods: ['b0', 'b1', 'c0'] },
  },
  {
    name: 'exact remote scan (refreshMs 0) agrees with the shortlist',
    pods: localBusy,
    config: { remote: { refreshMs: 0 } },
    expect: { status: 'routed', rule: 'spill', pods: ['b0', 'b1', 'a0'] },
  },
];

// The reference scorers: those of the Gateway API Inference Extension's EPP (now in llm-d).
describe('weighted policy scenarios (the reference scorers with the v1 zone rule)', () => {
  for (const scenario of scenarios) {
    it(scenario.name, () => {
      const fleet = buildFleet(scenario.pods);
      const scheduler = new Scheduler({
        fleet,
        pool: scenario.pool ?? POOL,
        zone: scenario.zone ?? 'a',
        region: 'r1',
        config: { policy: 'weighted', ...scenario.config },
      });
      const decision = scheduler.pick({ model: 'llama', ...scenario.request }, T0);
      const want = scenario.expect;
      expect(decision.status).toBe(want.status);
      expect(decision.rule).toBe(want.rule);
      if (want.pods) expect(decision.entries.map((e) => e.endpoint.pod)).toEqual(want.pods);
      if (want.reasons) expect(decision.entries.map((e) => e.reason)).toEqual(want.reasons);
      if (want.destination !== undefined) expect(decision.destination).toBe(want.destination);
      if (want.overloaded !== undefined) expect(decision.localOverloaded).toBe(want.overloaded);
      if (want.counts) expect(decision.counts).toMatchObject(want.counts);
      if (want.penaltiesIgnored !== undefined) expect(decision.penaltiesIgnored).toBe(want.penaltiesIgnored);
      // Always: the destination is the entries' addresses; routed iff non-empty.
      expect(decision.destination).toBe(decision.entries.map((e) => e.address).join(','));
      expect(decision.status === 'routed').toBe(decision.entries.length > 0);
    });
  }
});
