import { describe, expect, it } from 'vitest';
import { Scheduler, type Decision, type EntryCost, type PickRequest, type SchedulerConfigInput } from '../src/index.js';
import { buildFleet, POOL, sample, T0, threeZones, type PodSpec } from './fleet-fixture.js';

/**
 * Picking v2, cost policy: every rule as a table row. The standard pool (fleet-fixture) is zone a
 * (local, r1) a0..a2 waiting 0/1/2, zone b (r1) b0..b1 waiting 0/1, zone c (r2) c0..c1 waiting 0/1.
 * With the default rates a backlogged waiting request costs 100 ms (10 requests/s); a remote zone
 * costs its round trip (1 ms same region, 30 ms other region) plus zoneBiasMs (8 ms). So, without a
 * prompt: a0 0, b0 9, c0 38, a1 100, b1 109, c1 138, a2 200.
 */
interface Row {
  name: string;
  pods: PodSpec[];
  config?: SchedulerConfigInput;
  request?: Partial<PickRequest>;
  expect: {
    status: Decision['status'];
    rule: Decision['rule'];
    pods?: string[];
    reasons?: string[];
    counts?: Partial<Decision['counts']>;
    penaltiesIgnored?: boolean;
  };
}

const busy = (pods: PodSpec[], zones: string[], waiting: number): PodSpec[] =>
  pods.map((p) => (zones.includes(p.zone) ? { ...p, waiting } : p));
const equal = (waiting: number, running = 20): PodSpec[] => threeZones().map((p) => ({ ...p, waiting, running }));
const objectives = { objectives: { batch: { priority: -1 }, chat: { priority: 10 } } };
const prompt = (chars: number, seed = 'p'): string => seed.repeat(chars);

const rows: Row[] = [
  {
    name: 'idle pool: the cheapest local primary, then the next cheapest, a remote one among them',
    pods: threeZones(),
    expect: {
      status: 'routed',
      rule: 'local',
      pods: ['a0', 'b0', 'c0'],
      reasons: ['local-best', 'cross-zone-fallback', 'cross-zone-fallback'],
    },
  },
  {
    name: 'balanced load stays local: equal queues everywhere, leaving the zone only costs',
    pods: equal(2),
    expect: { status: 'routed', rule: 'local', reasons: ['local-best', 'local', 'cross-zone-fallback'] },
  },
  {
    name: 'a local queue shorter than the bias plus the round trip does not spill',
    pods: busy(threeZones(), ['a'], 1),
    config: { zoneBiasMs: 150 },
    expect: { status: 'routed', rule: 'local', reasons: ['local-best', 'local', 'cross-zone-fallback'] },
  },
  {
    name: 'the same queue spills once it costs more than the bias plus the round trip',
    pods: busy(threeZones(), ['a'], 1),
    config: { zoneBiasMs: 50 },
    expect: { status: 'routed', rule: 'spill', pods: ['b0', 'c0', 'a0'], reasons: ['spill', 'spill', 'local-fallback'] },
  },
  {
    name: 'hot zone: the same region first, the spilled request keeps a way home',
    pods: busy(threeZones(), ['a'], 5),
    expect: { status: 'routed', rule: 'spill', pods: ['b0', 'c0', 'a0'], reasons: ['spill', 'spill', 'local-fallback'] },
  },
  {
    name: 'a busier same-region zone loses to an idle other region once the queue outweighs the round trip',
    pods: busy(busy(threeZones(), ['a'], 5), ['b'], 2),
    expect: { status: 'routed', rule: 'spill', pods: ['c0', 'c1', 'a0'] },
  },
  {
    name: 'strict subset: the list never leaves it, ordered by cost',
    pods: busy(threeZones(), ['a'], 5),
    request: { subset: ['10.0.0.1:8000', '10.0.0.2:8000', '10.0.0.3:8000'] },
    expect: { status: 'routed', rule: 'local', pods: ['a0', 'a1', 'a2'], counts: { eligible: 3 } },
  },
  {
    name: 'strict subset with one remote pod: spills inside the subset only',
    pods: busy(threeZones(), ['a'], 5),
    request: { subset: ['10.0.0.1:8000', '10.0.0.2:8000', '10.0.2.2:8000'] },
    expect: { status: 'routed', rule: 'spill', reasons: ['spill', 'local-fallback', 'local-fallback'], counts: { eligible: 3 } },
  },
  {
    name: 'locality mode: remote candidates come from the view, local ones only from the subset',
    pods: busy(threeZones(), ['a'], 5),
    config: { subsetMode: 'locality' },
    request: { subset: ['10.0.0.2:8000', '10.0.0.3:8000'] },
    expect: { status: 'routed', rule: 'spill', pods: ['b0', 'c0', 'a1'], counts: { eligibleLocal: 2, eligible: 6 } },
  },
  {
    name: 'suspect: a pod whose samples stopped while its zone-mates report ranks after them',
    pods: threeZones({ a0: { metricsAge: 3000 }, a1: { waiting: 0 }, a2: { waiting: 0 } }),
    config: { crossZoneFallbacks: 0 },
    expect: { status: 'routed', rule: 'local', pods: ['a1', 'a2', 'b0'] },
  },
  {
    name: 'a zone whose samples all stopped (collector restart) keeps its traffic local while the estimate shows room',
    pods: threeZones({ a0: { metricsAge: 8000 }, a1: { metricsAge: 8000 }, a2: { metricsAge: 8000 } }),
    expect: { status: 'routed', rule: 'local', pods: ['a0', 'b0', 'c0'] },
  },
  {
    name: 'NATS outage: every sample stale, the order is kept',
    pods: threeZones().map((p) => ({ ...p, metricsAge: 15_000 })),
    expect: { status: 'routed', rule: 'local', pods: ['a0', 'b0', 'c0'] },
  },
  {
    name: "a pod whose readiness was not re-published while its zone-mates' was is dropped",
    pods: threeZones({ a0: { readinessAge: 95_000 } }),
    config: { crossZoneFallbacks: 0 },
    expect: { status: 'routed', rule: 'spill', pods: ['b0', 'c0', 'a1'], counts: { penalised: 1, eligibleLocal: 2 } },
  },
  {
    name: 'a silence of the whole zone drops nobody',
    pods: threeZones().map((p) => (p.zone === 'a' ? { ...p, readinessAge: 95_000 } : p)),
    expect: { status: 'routed', rule: 'local', pods: ['a0', 'b0', 'c0'], counts: { penalised: 0 } },
  },
  {
    name: 'full (KV cache full with a queue): listed only after everything else',
    pods: threeZones({ a0: { waiting: 1, kv: 1 }, a1: { waiting: 1 } }),
    config: { zoneBiasMs: 500 },
    expect: { status: 'routed', rule: 'local', pods: ['a1', 'a2', 'b0'] },
  },
  {
    name: 'everything full, not sheddable: the lowest cost, round trip included, not pinned local',
    pods: threeZones().map((p) => ({ ...p, kv: 1, waiting: p.zone === 'a' ? 9 : 3 })),
    config: objectives,
    request: { objective: 'chat' },
    expect: { status: 'routed', rule: 'last-resort', pods: ['b0', 'b1', 'a0'], reasons: ['last-resort', 'last-resort', 'last-resort'] },
  },
  {
    name: 'overload everywhere, sheddable: 429 when the lowest expected wait exceeds shedAboveMs',
    pods: equal(12),
    config: objectives,
    request: { objective: 'batch' },
    expect: { status: 429, rule: 'shed' },
  },
  {
    name: 'overload everywhere, not sheddable: routed to the cheapest',
    pods: equal(12),
    config: objectives,
    expect: { status: 'routed', rule: 'local' },
  },
  {
    name: 'staleness alone never sheds: an idle zone whose samples stopped',
    pods: threeZones().map((p) => ({ ...p, metricsAge: 20_000 })),
    config: objectives,
    request: { objective: 'batch' },
    expect: { status: 'routed', rule: 'local' },
  },
  {
    name: 'sheddable while the best wait is under the limit: routed',
    pods: busy(threeZones(), ['a'], 5),
    config: objectives,
    request: { objective: 'batch' },
    expect: { status: 'routed', rule: 'spill' },
  },
  {
    name: 'measured service rates replace the defaults: a fast drain makes a queue cheap',
    pods: busy(threeZones(), ['a'], 1).map((p) =>
      p.zone === 'a' ? { ...p, rates: { windowMs: 2000, promptTokensPerS: 5000, generationTokensPerS: 4000, requestsPerS: 1000 } } : p,
    ),
    expect: { status: 'routed', rule: 'local', reasons: ['local-best', 'local', 'cross-zone-fallback'] },
  },
  {
    name: 'LoRA in milliseconds: the pod running the adapter wins between equals, a free slot beats a full one',
    pods: [
      { pod: 'l0', zone: 'a', address: '10.0.0.1:8000', lora: { running: ['x', 'y'], waiting: [], max: 2 } },
      { pod: 'l1', zone: 'a', address: '10.0.0.2:8000', lora: { running: ['sql-lora'], waiting: [], max: 2 } },
      { pod: 'l2', zone: 'a', address: '10.0.0.3:8000', lora: { running: ['other'], waiting: [], max: 2 } },
    ],
    request: { model: 'sql-lora' },
    expect: { status: 'routed', rule: 'local', pods: ['l1', 'l2', 'l0'] },
  },
  {
    name: 'a base-model request costs no adapter load on servers that list LoRA adapters',
    pods: [
      { pod: 'l0', zone: 'a', address: '10.0.0.1:8000', lora: { running: ['sql-lora'], waiting: [], max: 2 } },
      { pod: 'l1', zone: 'a', address: '10.0.0.2:8000', waiting: 1, lora: { running: ['chat-lora'], waiting: [], max: 2 } },
    ],
    request: { model: 'llama' },
    expect: { status: 'routed', rule: 'local', pods: ['l0', 'l1'] },
  },
  {
    name: 'two pods with one address (IP reuse) are listed once',
    pods: [
      { pod: 'old', zone: 'a', address: '10.0.0.1:8000', waiting: 0 },
      { pod: 'new', zone: 'a', address: '10.0.0.1:8000', waiting: 0 },
      { pod: 'a1', zone: 'a', address: '10.0.0.2:8000', waiting: 3 },
      { pod: 'b0', zone: 'b', address: '10.0.1.1:8000', waiting: 0 },
    ],
    expect: { status: 'routed', rule: 'local' },
  },
  {
    name: 'crossZoneFallbacks 0: the cheapest, whichever zone',
    pods: threeZones(),
    config: { crossZoneFallbacks: 0 },
    expect: { status: 'routed', rule: 'local', pods: ['a0', 'b0', 'c0'] },
  },
  {
    name: 'crossZoneFallbacks 0 with a cheap local zone: all local',
    pods: threeZones({ a1: { waiting: 0 }, a2: { waiting: 0 } }),
    config: { crossZoneFallbacks: 0 },
    expect: { status: 'routed', rule: 'local', reasons: ['local-best', 'local', 'local'] },
  },
  {
    name: 'crossZoneFallbacks 1 with a cheap local zone: one remote entry all the same',
    pods: threeZones({ a1: { waiting: 0 }, a2: { waiting: 0 } }),
    expect: { status: 'routed', rule: 'local', reasons: ['local-best', 'local', 'cross-zone-fallback'] },
  },
  {
    name: 'crossZoneFallbacks larger than the list never takes the primary slot',
    pods: threeZones({ a1: { waiting: 0 }, a2: { waiting: 0 } }),
    config: { crossZoneFallbacks: 9 },
    expect: { status: 'routed', rule: 'local', reasons: ['local-best', 'cross-zone-fallback', 'cross-zone-fallback'] },
  },
  {
    name: 'maxEndpoints 1 while the zone is hot: the remote primary only',
    pods: busy(threeZones(), ['a'], 5),
    config: { maxEndpoints: 1 },
    expect: { status: 'routed', rule: 'spill', pods: ['b0'] },
  },
  {
    name: 'round trips per zone pair override the region defaults',
    pods: busy(threeZones(), ['a'], 5),
    config: { network: { rttMs: { c: { a: 0 } } } },
    expect: { status: 'routed', rule: 'spill', pods: ['c0', 'b0', 'a0'] },
  },
  {
    name: 'empty strict subset: 503',
    pods: threeZones(),
    request: { subset: [] },
    expect: { status: 503, rule: 'empty-subset' },
  },
  {
    name: 'no ready pod: 503',
    pods: threeZones().map((p) => ({ ...p, ready: false })),
    expect: { status: 503, rule: 'no-ready-endpoints' },
  },
];

describe('cost policy: picking v2 rules', () => {
  for (const row of rows) {
    it(row.name, () => {
      const fleet = buildFleet(row.pods);
      const scheduler = new Scheduler({ fleet, pool: POOL, zone: 'a', region: 'r1', config: row.config });
      const decision = scheduler.pick({ model: 'llama', ...row.request }, T0);
      const want = row.expect;
      expect(decision.status).toBe(want.status);
      expect(decision.rule).toBe(want.rule);
      expect(decision.policy).toBe('cost');
      if (want.pods) expect(decision.entries.map((e) => e.endpoint.pod)).toEqual(want.pods);
      if (want.reasons) expect(decision.entries.map((e) => e.reason)).toEqual(want.reasons);
      if (want.counts) expect(decision.counts).toMatchObject(want.counts);
      if (want.penaltiesIgnored !== undefined) expect(decision.penaltiesIgnored).toBe(want.penaltiesIgnored);
      // An adapter load is only ever priced for a model some candidate holds as an adapter.
      const model = row.request?.model ?? 'llama';
      const held = row.pods.some((p) => p.lora?.running.includes(model) || p.lora?.waiting.includes(model));
      if (!held) for (const e of decision.entries) expect((e.cost as EntryCost).loraMs).toBe(0);
      const addresses = decision.entries.map((e) => e.address);
      expect(new Set(addresses).size).toBe(addresses.length);
      expect(decision.destination).toBe(addresses.join(','));
    });
  }
});

describe('cost policy: prefix affinity in milliseconds', () => {
  const system = prompt(16_000, 's'); // ~4,000 tokens at 4 characters a token
  it('sends a repeated long prompt back to its holder, even across zones when the saving beats the round trip', () => {
    const pods = threeZones({ a1: { waiting: 0 }, a2: { waiting: 0 } });
    const fleet = buildFleet(pods);
    // zone b's EPP served this prompt on b0; zone a's EPP only knows what it sent itself, so teach
    // zone a's index by sending the prompt there once while zone a is hot.
    const hot = buildFleet(busy(pods, ['a'], 5));
    const scheduler = new Scheduler({ fleet: hot, pool: POOL, zone: 'a', region: 'r1' });
    const first = scheduler.pick({ model: 'llama', prompt: system + 'q1' }, T0);
    expect(first.entries[0]?.endpoint.pod).toBe('b0');
    scheduler.commit(first, T0);
    // Now zone a is idle again (a new sample), but b0 holds 4,000 cached tokens: ~400 ms of prefill.
    for (const p of pods) sample(hot, p, T0 + 50);
    const again = scheduler.pick({ model: 'llama', prompt: system + 'q2' }, T0 + 60);
    expect(again.entries[0]?.endpoint.pod).toBe('b0');
    const cost = again.entries[0]?.cost as EntryCost;
    expect(cost.cachedTokens).toBeGreaterThan(3900);
    expect(cost.rttMs).toBe(1);
    expect(cost.biasMs).toBe(8);
    // Without a prefix the local zone wins.
    const other = scheduler.pick({ model: 'llama', prompt: prompt(16_000, 'o') }, T0 + 60);
    expect(other.entries[0]?.zone).toBe('a');
    void fleet;
  });
});

describe('cost policy: the decision explains itself', () => {
  it("records every listed endpoint's cost components", () => {
    const fleet = buildFleet(busy(threeZones(), ['a'], 5));
    const scheduler = new Scheduler({ fleet, pool: POOL, zone: 'a', region: 'r1' });
    const d = scheduler.pick({ model: 'llama', prompt: prompt(4000) }, T0);
    for (const entry of d.entries) {
      const cost = entry.cost as EntryCost;
      const sum = cost.waitMs + cost.prefillMs + cost.loraMs + cost.rttMs + cost.biasMs + cost.displacementMs + cost.uncertaintyMs;
      expect(Math.abs(sum - cost.totalMs)).toBeLessThan(0.05);
      // 1,000 tokens at 20,000 tokens/s, plus their attention (1,000² · 0.05 / (2 · 23,000) ≈ 1.09 ms
      // at the default rates.attentionTokens), in one step (at the default 7 ms, slowed by KV use 0.1).
      expect(cost.prefillMs).toBeCloseTo(50 + (1000 ** 2 * 0.05) / (2 * 23_000) + cost.stepMs, 1);
      expect(cost.stepMs).toBeCloseTo(7 * (1 + 2.75 * 0.1), 1);
      expect(cost.prefillMsPerToken).toBeCloseTo(0.05, 4);
    }
    const local = d.entries.find((e) => e.zone === 'a')?.cost as EntryCost;
    // Five waiting requests drain at 10 requests/s; then half a step to be admitted.
    expect(local.waitMs).toBeCloseTo(500 + local.stepMs / 2, 1);
    expect(local.rttMs).toBe(0);
    expect(local.biasMs).toBe(0);
  });
});

describe('cost policy: what a queue is', () => {
  it('requests caught between two steps are not a backlog: they wait one step, not a service time', () => {
    // Every local pod shows one request waiting in its latest sample only; a step takes 2 ms.
    const rates = { windowMs: 2000, promptTokensPerS: 5000, generationTokensPerS: 4000, requestsPerS: 20, itlMs: 2 };
    const transient = threeZones().map((p) => (p.zone === 'a' ? { ...p, waiting: 1, backlogged: false, rates } : p));
    const d = new Scheduler({ fleet: buildFleet(transient), pool: POOL, zone: 'a', region: 'r1' }).pick({ model: 'llama' }, T0);
    expect(d.rule).toBe('local');
    const transientCost = d.entries[0]?.cost as EntryCost;
    // One step for the waiting request, half a step to be admitted; the step is measured rather than
    // the configured 7 ms: 2 ms between tokens at KV use 0.1 and the window's 8 running (4,000 decode
    // tokens/s × 2 ms), less the quarter of the window its 5,000 prompt tokens/s took at 20,000/s.
    // Zone a's three pods' 24,000 decode tokens are trusted fully.
    expect(transientCost.waitMs).toBeCloseTo(1.5 * transientCost.stepMs, 1);
    expect(transientCost.stepTrust).toBe(1);
    const raw = 2 / (1 + (1.5 * 8) / 256 + 0.275) / 7;
    expect(transientCost.stepMs).toBeCloseTo((raw / (1 + 0.25 * raw)) * 7 * 1.275, 1);
    // The same queue over two samples is a backlog: it drains at 20 requests/s, 50 ms each.
    const backlog = threeZones().map((p) => (p.zone === 'a' ? { ...p, waiting: 1, rates } : p));
    const spilled = new Scheduler({ fleet: buildFleet(backlog), pool: POOL, zone: 'a', region: 'r1' }).pick({ model: 'llama' }, T0);
    expect(spilled.rule).toBe('spill');
    const backlogCost = spilled.entries.find((e) => e.zone === 'a')?.cost as EntryCost;
    expect(backlogCost.waitMs).toBeCloseTo(50 + backlogCost.stepMs / 2, 1);
  });

  it('a full batch makes the next request wait even when the latest sample shows no queue', () => {
    const pods = threeZones({ a0: { noMetrics: true }, a1: { ready: false }, a2: { ready: false } });
    const fleet = buildFleet(pods);
    const a0 = pods[0] as PodSpec;
    // Backlogged at 8 running: the batch holds 8.
    sample(fleet, { ...a0, waiting: 3, running: 8 }, T0 - 300);
    sample(fleet, { ...a0, waiting: 2, running: 8 }, T0 - 200);
    sample(fleet, { ...a0, waiting: 0, running: 7 }, T0 - 100);
    const scheduler = new Scheduler({ fleet, pool: POOL, zone: 'a', region: 'r1', config: { crossZoneFallbacks: 0 } });
    // 7 running: room for one.
    const first = scheduler.pick({ model: 'llama' }, T0);
    expect(first.entries[0]?.endpoint.pod).toBe('a0');
    scheduler.commit(first, T0);
    // Now 8: the next one waits for a completion (100 ms at the default rate): zone b is cheaper.
    const second = scheduler.pick({ model: 'llama' }, T0 + 1);
    expect(second.rule).toBe('spill');
    expect((second.entries.find((e) => e.zone === 'a')?.cost as EntryCost).waitMs).toBeGreaterThanOrEqual(100);
    // The request finishes: room again.
    scheduler.release(first);
    expect(scheduler.pick({ model: 'llama' }, T0 + 2).rule).toBe('local');
  });

  it('picks made just before weigh on the next pick, less as they age', () => {
    const pods = [
      { pod: 'a0', zone: 'a', address: '10.0.0.1:8000' },
      { pod: 'a1', zone: 'a', address: '10.0.0.2:8000' },
    ];
    const fleet = buildFleet(pods);
    const scheduler = new Scheduler({ fleet, pool: POOL, zone: 'a', region: 'r1', seed: 3 });
    const d = scheduler.pick({ model: 'llama' }, T0);
    scheduler.commit(d, T0);
    const other = pods.find((p) => p.pod !== d.entries[0]?.endpoint.pod)?.pod;
    // Right after, the other pod is cheaper: the pick's prefill is ahead of the next request there.
    // Without a prompt it counts as a typical one (500 tokens at 20,000/s = 25 ms, plus 500² · 0.05 /
    // (2 · 23,000) ≈ 0.27 ms of attention, plus the one step it is prefilled in), 1 ms of it done.
    expect(scheduler.pick({ model: 'llama' }, T0 + 1).entries[0]?.endpoint.pod).toBe(other);
    const picked = scheduler.pick({ model: 'llama' }, T0 + 1).entries.find((e) => e.endpoint.pod === d.entries[0]?.endpoint.pod);
    const pickedCost = picked?.cost as EntryCost;
    const aheadMs = 25 + (500 ** 2 * 0.05) / (2 * 23_000) + pickedCost.stepMs - 1;
    expect(pickedCost.aheadMs).toBeCloseTo(aheadMs, 1);
    expect(pickedCost.aheadTokens).toBe(Math.round(aheadMs / 0.05));
    expect(pickedCost.waitMs).toBeCloseTo(aheadMs + pickedCost.stepMs / 2, 1);
    // Once that prefill is done, only the pick's place in the batch remains (a slightly slower step).
    const later = scheduler.pick({ model: 'llama' }, T0 + 60).entries.map((e) => e.cost as EntryCost);
    expect(later.map((c) => c.aheadMs)).toEqual([0, 0]);
    expect(Math.abs((later[0]?.waitMs ?? 0) - (later[1]?.waitMs ?? 0))).toBeLessThan(0.1);
  });
});

describe('cost policy: prefill attention (rates.attentionTokens)', () => {
  const pods = [
    { pod: 'a0', zone: 'a', address: '10.0.0.1:8000' },
    { pod: 'a1', zone: 'a', address: '10.0.0.2:8000' },
  ];
  const own = (attentionTokens: number, text: string): EntryCost => {
    const scheduler = new Scheduler({
      fleet: buildFleet(pods),
      pool: POOL,
      zone: 'a',
      region: 'r1',
      config: { rates: { default: { attentionTokens } } },
    });
    return scheduler.pick({ model: 'llama', prompt: text }, T0).entries[0]?.cost as EntryCost;
  };

  it("prices a long prompt's attention on top of the linear rate, and nothing with attentionTokens 0", () => {
    const document = prompt(48_000, 'd'); // 12,000 tokens at 4 characters per token
    const linear = own(0, document);
    const quadratic = own(24_000, document);
    // 12,000² · 0.05 / (2 · 24,000) = 150 ms more than 12,000 tokens at 0.05 ms each.
    expect(quadratic.prefillMs - linear.prefillMs).toBeCloseTo(150, 0);
    // A chat message's attention is a rounding error: 200² · 0.05 / 48,000 ≈ 0.04 ms.
    expect(own(24_000, prompt(800, 'c')).prefillMs - own(0, prompt(800, 'c')).prefillMs).toBeLessThan(0.1);
  });

  it('makes an endpoint that just took a document dearer for the next request by the document’s attention', () => {
    const ahead = (attentionTokens: number): number => {
      const scheduler = new Scheduler({
        fleet: buildFleet(pods),
        pool: POOL,
        zone: 'a',
        region: 'r1',
        seed: 3,
        config: { rates: { default: { attentionTokens } } },
      });
      const d = scheduler.pick({ model: 'llama', prompt: prompt(48_000, 'd') }, T0);
      scheduler.commit(d, T0);
      const next = scheduler.pick({ model: 'llama', prompt: prompt(800, 'c') }, T0 + 1);
      expect(next.entries[0]?.endpoint.pod).not.toBe(d.entries[0]?.endpoint.pod);
      const cost = next.entries.find((e) => e.endpoint.pod === d.entries[0]?.endpoint.pod)?.cost as EntryCost;
      // Its two steps (12,000 tokens at 8,191 a step beside the document's own decode) come off.
      return cost.aheadMs - 2 * cost.stepMs;
    };
    // 600 ms of linear work (1 ms of it done), plus 150 ms of attention at attentionTokens 24,000.
    expect(ahead(0)).toBeCloseTo(599, 0);
    expect(ahead(24_000)).toBeCloseTo(749, 0);
  });

  it('rejects a negative attentionTokens in the config', () => {
    expect(
      () =>
        new Scheduler({
          fleet: buildFleet(pods),
          pool: POOL,
          zone: 'a',
          region: 'r1',
          config: { rates: { default: { attentionTokens: -1 } } },
        }),
    ).toThrow();
  });
});

describe('cost policy: avoidable prefill', () => {
  const system = prompt(16_000, 's'); // ~4,000 tokens
  it('keeps a long prefix on its busy holder when recomputing it would stall another busy endpoint', () => {
    const pods: PodSpec[] = [
      { pod: 'h', zone: 'a', address: '10.0.0.1:8000', running: 30 },
      { pod: 'n', zone: 'a', address: '10.0.0.2:8000', running: 30 },
    ];
    const fleet = buildFleet(pods);
    const scheduler = new Scheduler({
      fleet,
      pool: POOL,
      zone: 'a',
      region: 'r1',
      config: { crossZoneFallbacks: 0, subsetMode: 'strict' },
    });
    const subset = ['10.0.0.1:8000'];
    const seed = scheduler.pick({ model: 'llama', prompt: system + 'q0', subset }, T0);
    scheduler.commit(seed, T0);
    scheduler.release(seed);
    // The holder now has a backlog of 2 (200 ms); the other pod none, but 30 running.
    sample(fleet, { ...(pods[0] as PodSpec), waiting: 2 }, T0 + 10);
    sample(fleet, { ...(pods[0] as PodSpec), waiting: 2 }, T0 + 20);
    const d = scheduler.pick({ model: 'llama', prompt: system + 'q1' }, T0 + 30);
    expect(d.entries[0]?.endpoint.pod).toBe('h');
    const miss = d.entries.find((e) => e.endpoint.pod === 'n')?.cost as EntryCost;
    // 4,000 avoidable tokens: 200 ms, plus 0.3 × 30 running × 200 ms.
    expect(miss.prefillMs).toBeGreaterThan(1900);
    // An idle endpoint may take the miss: nothing of its own is stalled by it.
    sample(fleet, { ...(pods[1] as PodSpec), running: 0 }, T0 + 40);
    const idle = scheduler.pick({ model: 'llama', prompt: system + 'q2' }, T0 + 50);
    expect(idle.entries[0]?.endpoint.pod).toBe('n');
  });

  it('costs nothing extra for tokens no candidate has cached', () => {
    const pods: PodSpec[] = [
      { pod: 'x', zone: 'a', address: '10.0.0.1:8000', running: 40 },
      { pod: 'y', zone: 'a', address: '10.0.0.2:8000', running: 0 },
    ];
    const d = new Scheduler({ fleet: buildFleet(pods), pool: POOL, zone: 'a' }).pick({ model: 'llama', prompt: prompt(4000) }, T0);
    // The same prompt work on both (the busy one's step, in which it runs, is slower: batch fill, not avoidable prefill).
    const work = d.entries.map((e) => (e.cost as EntryCost).prefillMs - (e.cost as EntryCost).stepMs);
    expect(work[0]).toBeCloseTo(work[1] as number, 1);
  });
});

describe('cost policy: displacement', () => {
  // Zone a is backlogged; zones b and c are one same-region hop away. b's pods are nearly full
  // (230 of 256 slots each), c's half full but each with a request waiting for the next step.
  const pods: PodSpec[] = [
    { pod: 'a0', zone: 'a', address: '10.0.0.1:8000', waiting: 8 },
    { pod: 'b0', zone: 'b', address: '10.0.1.1:8000', running: 230 },
    { pod: 'b1', zone: 'b', address: '10.0.1.2:8000', running: 230 },
    { pod: 'c0', zone: 'c', address: '10.0.2.1:8000', running: 128, waiting: 1, backlogged: false },
    { pod: 'c1', zone: 'c', address: '10.0.2.2:8000', running: 128, waiting: 1, backlogged: false },
  ];
  const network = { rttMs: { a: { b: 1, c: 1 }, b: { c: 1 } } };

  it("sends spill where there is room after that zone's own demand, not into the zone it would push out", () => {
    const d = new Scheduler({ fleet: buildFleet(pods), pool: POOL, zone: 'a', config: { network } }).pick({ model: 'llama' }, T0);
    expect(d.rule).toBe('spill');
    expect(d.entries[0]?.zone).toBe('c');
    const b = d.entries.find((e) => e.zone === 'b')?.cost as EntryCost | undefined;
    const c = d.entries.find((e) => e.zone === 'c')?.cost as EntryCost;
    expect(c.zoneUse).toBeCloseTo((2 * 129) / 512, 2);
    expect(c.displacementMs).toBeCloseTo(8 * c.stepMs * ((2 * 129) / 512) ** 2, 1);
    if (b !== undefined) expect(b.displacementMs).toBeGreaterThan(c.displacementMs);
    // Without displacement the fuller zone is cheaper for this request alone (no queue there).
    const bare = new Scheduler({ fleet: buildFleet(pods), pool: POOL, zone: 'a', config: { network, displacement: { weight: 0 } } }).pick(
      { model: 'llama' },
      T0,
    );
    expect(bare.entries[0]?.zone).toBe('b');
    expect((bare.entries[0]?.cost as EntryCost).displacementMs).toBe(0);
  });

  it('costs nothing at home', () => {
    const d = new Scheduler({ fleet: buildFleet(pods), pool: POOL, zone: 'b', config: { network } }).pick({ model: 'llama' }, T0);
    const home = d.entries.find((e) => e.zone === 'b')?.cost as EntryCost;
    expect(home).toMatchObject({ displacementMs: 0, zoneUse: 0 });
  });
});

describe('cost policy: the bias fades as the zone is fuller than the remote one', () => {
  // Zone a's pods fill `aRunning` of their 256 slots, zone b's 64 (a quarter): the gap is a's use − 0.25.
  const pods = (aRunning: number): PodSpec[] => [
    { pod: 'a0', zone: 'a', address: '10.0.0.1:8000', running: aRunning },
    { pod: 'a1', zone: 'a', address: '10.0.0.2:8000', running: aRunning },
    { pod: 'b0', zone: 'b', address: '10.0.1.1:8000', running: 64 },
    { pod: 'b1', zone: 'b', address: '10.0.1.2:8000', running: 64 },
  ];
  const fade = { zoneBiasMs: 8, zoneBiasFade: { from: 0.125, width: 0.25 } };
  const biasOfB = (aRunning: number, config: SchedulerConfigInput): number => {
    const d = new Scheduler({ fleet: buildFleet(pods(aRunning)), pool: POOL, zone: 'a', config }).pick({ model: 'llama' }, T0);
    const b = d.entries.find((e) => e.zone === 'b')?.cost as EntryCost;
    return b.biasMs;
  };

  it('is whole up to `from`, falls linearly over `width`, and is gone past them', () => {
    // Gaps: 0 (equal), 0.125 (at from), 0.25 (half way), 0.375 (at from + width), 0.5 (beyond).
    expect(biasOfB(64, fade)).toBe(8);
    expect(biasOfB(64 + 32, fade)).toBeCloseTo(8, 5);
    expect(biasOfB(64 + 64, fade)).toBeCloseTo(4, 5);
    expect(biasOfB(64 + 96, fade)).toBeCloseTo(0, 5);
    expect(biasOfB(192, fade)).toBe(0);
  });

  it('never grows past zoneBiasMs when the remote zone is the fuller one', () => {
    expect(biasOfB(0, fade)).toBe(8);
  });

  it('is fixed with width 0 (the bias of picking v3 before the fade)', () => {
    expect(biasOfB(192, { zoneBiasMs: 8, zoneBiasFade: { from: 0, width: 0 } })).toBe(8);
  });
});
