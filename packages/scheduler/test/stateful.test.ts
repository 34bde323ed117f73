import { describe, expect, it } from 'vitest';
import { parseSchedulerConfig, Scheduler, seededRng, type Decision } from '../src/index.js';
import { buildFleet, POOL, saturate, sample, T0, threeZones, type PodSpec } from './fleet-fixture.js';

const fourEqual: PodSpec[] = [0, 1, 2, 3].map((i) => ({ pod: `e${i}`, zone: 'a', address: `10.0.0.${i + 1}:8000` }));
const prompt = (topic: string): string => `System: you are a helpful assistant. `.repeat(20) + `User: tell me about ${topic}. `.repeat(10);

describe('prefix-cache affinity', () => {
  it('sends a repeated prompt back to the endpoint that served it', () => {
    const fleet = buildFleet(fourEqual);
    const scheduler = new Scheduler({ fleet, pool: POOL, zone: 'a', seed: 7, config: { maxEndpoints: 1 } });
    const first = scheduler.pick({ model: 'llama', prompt: prompt('rivers') }, T0);
    expect(first.prefixBlocks).toBeGreaterThan(10);
    expect(first.prefixMatched).toBe(0);
    scheduler.commit(first, T0);
    scheduler.release(first);
    for (let i = 0; i < 10; i++) {
      const again = scheduler.pick({ model: 'llama', prompt: prompt('rivers') }, T0 + i);
      expect(again.entries[0]?.endpoint).toBe(first.entries[0]?.endpoint);
      expect(again.prefixMatched).toBe(again.prefixBlocks);
      scheduler.commit(again, T0 + i);
      scheduler.release(again);
    }
    expect(scheduler.prefixIndexBlocks).toBe(first.prefixBlocks);
  });

  it('gives partial credit for a shared prefix, none for another model', () => {
    const fleet = buildFleet(fourEqual);
    const scheduler = new Scheduler({ fleet, pool: POOL, zone: 'a', seed: 3 });
    const first = scheduler.pick({ model: 'llama', prompt: prompt('rivers') }, T0);
    scheduler.commit(first, T0);
    scheduler.release(first);
    const sibling = scheduler.pick({ model: 'llama', prompt: prompt('mountains') }, T0);
    expect(sibling.entries[0]?.endpoint).toBe(first.entries[0]?.endpoint);
    expect(sibling.prefixMatched).toBeGreaterThan(0);
    expect(sibling.prefixMatched).toBeLessThan(sibling.prefixBlocks);
    const otherModel = scheduler.pick({ model: 'mistral', prompt: prompt('rivers') }, T0);
    expect(otherModel.prefixMatched).toBe(0);
  });

  it('loses to load: a saturated holder of the prefix is not the primary', () => {
    const fleet = buildFleet(fourEqual);
    const scheduler = new Scheduler({ fleet, pool: POOL, zone: 'a', seed: 3 });
    const first = scheduler.pick({ model: 'llama', prompt: prompt('rivers') }, T0);
    scheduler.commit(first, T0);
    const holder = first.entries[0]?.endpoint as (typeof first.entries)[0]['endpoint'];
    sample(fleet, { ...(fourEqual.find((p) => p.pod === holder.pod) as PodSpec), waiting: 9 }, T0 + 10);
    const next = scheduler.pick({ model: 'llama', prompt: prompt('rivers') }, T0 + 10);
    expect(next.entries[0]?.endpoint).not.toBe(holder);
  });

  it('without prompt or below one block, no hashing happens', () => {
    const fleet = buildFleet(fourEqual);
    const scheduler = new Scheduler({ fleet, pool: POOL, zone: 'a' });
    expect(scheduler.pick({ model: 'llama' }, T0).prefixBlocks).toBe(0);
    expect(scheduler.pick({ model: 'llama', prompt: 'short' }, T0).prefixBlocks).toBe(0);
  });
});

describe('in-flight accounting and passive health', () => {
  it('commit charges the primary, release undoes it once', () => {
    const fleet = buildFleet(fourEqual);
    const scheduler = new Scheduler({ fleet, pool: POOL, zone: 'a' });
    const decision = scheduler.pick({ model: 'llama' }, T0);
    const primary = decision.entries[0]?.endpoint;
    scheduler.commit(decision, T0);
    scheduler.commit(decision, T0);
    expect(primary?.inFlight).toBe(1);
    expect(primary?.unsampledPicks).toBe(1);
    scheduler.release(decision);
    scheduler.release(decision);
    expect(primary?.inFlight).toBe(0);
    expect(primary?.unsampledPicks).toBe(0);
  });

  it('a 503 or 429 decision commits nothing', () => {
    const fleet = buildFleet(fourEqual);
    const scheduler = new Scheduler({ fleet, pool: POOL, zone: 'a' });
    const decision = scheduler.pick({ model: 'llama', subset: [] }, T0);
    scheduler.commit(decision, T0);
    scheduler.release(decision);
    for (const p of fourEqual) expect(fleet.get(POOL, p.zone, p.pod)?.inFlight).toBe(0);
  });

  it('penalises a primary the gateway did not serve, until the penalty expires', () => {
    const pods = threeZones();
    const fleet = buildFleet(pods);
    const scheduler = new Scheduler({ fleet, pool: POOL, zone: 'a', region: 'r1', config: { penaltyMs: 5000 } });
    const decision = scheduler.pick({ model: 'llama' }, T0);
    expect(decision.entries[0]?.endpoint.pod).toBe('a0');
    scheduler.commit(decision, T0);
    expect(scheduler.reportServed(decision, '10.0.0.2:8000', T0 + 5)).toBe('fallback');
    // The request's load moved to the endpoint that served it.
    expect(fleet.get(POOL, 'a', 'a0')?.inFlight).toBe(0);
    expect(fleet.get(POOL, 'a', 'a1')?.inFlight).toBe(1);
    const during = scheduler.pick({ model: 'llama' }, T0 + 4000);
    expect(during.entries.map((e) => e.endpoint.pod)).not.toContain('a0');
    expect(during.counts.penalised).toBe(1);
    expect(scheduler.isPenalised(fleet.get(POOL, 'a', 'a0')!, T0 + 5004)).toBe(true);
    // Metrics must stay fresh for a0 to be the best again.
    sample(fleet, pods[0] as PodSpec, T0 + 5006);
    for (const p of pods.slice(1)) sample(fleet, p, T0 + 5006);
    const after = scheduler.pick({ model: 'llama' }, T0 + 5006);
    expect(after.entries[0]?.endpoint.pod).toBe('a0');
    scheduler.release(decision);
    expect(fleet.get(POOL, 'a', 'a1')?.inFlight).toBe(0);
  });

  it('served equal to the primary, in another spelling, is not a failure', () => {
    const fleet = buildFleet([{ pod: 'v', zone: 'a', address: '[fd00::1]:8000' }]);
    const scheduler = new Scheduler({ fleet, pool: POOL, zone: 'a' });
    const decision = scheduler.pick({ model: 'llama' }, T0);
    expect(scheduler.reportServed(decision, '[fd00:0::1]:8000', T0)).toBe('primary');
    expect(scheduler.pick({ model: 'llama' }, T0).status).toBe('routed');
  });

  it('an unparsable served value penalises nothing', () => {
    const fleet = buildFleet(fourEqual);
    const scheduler = new Scheduler({ fleet, pool: POOL, zone: 'a' });
    const decision = scheduler.pick({ model: 'llama' }, T0);
    expect(scheduler.reportServed(decision, 'not-an-address', T0)).toBe('unparsable');
    expect(scheduler.reportServed(decision, undefined, T0)).toBe('unparsable');
    expect(scheduler.pick({ model: 'llama' }, T0).counts.penalised).toBe(0);
  });

  it('accepts the primary as an address string', () => {
    const fleet = buildFleet(fourEqual);
    const scheduler = new Scheduler({ fleet, pool: POOL, zone: 'a' });
    expect(scheduler.reportServed('10.0.0.1:8000', '10.0.0.2:8000', T0)).toBe('fallback');
    expect(scheduler.isPenalised(fleet.get(POOL, 'a', 'e0')!, T0 + 1)).toBe(true);
    expect(scheduler.reportServed('garbage', '10.0.0.2:8000', T0)).toBe('no-primary');
  });

  it('fails open when penalties alone would leave nothing eligible, unless told not to', () => {
    const fleet = buildFleet(fourEqual);
    const subset = ['10.0.0.1:8000'];
    for (const failOpen of [true, false]) {
      const scheduler = new Scheduler({ fleet, pool: POOL, zone: 'a', config: { penaltyFailOpen: failOpen } });
      scheduler.reportServed('10.0.0.1:8000', '10.0.0.2:8000', T0);
      const decision = scheduler.pick({ model: 'llama', subset }, T0 + 1);
      if (failOpen) {
        expect(decision.status).toBe('routed');
        expect(decision.penaltiesIgnored).toBe(true);
        expect(decision.destination).toBe('10.0.0.1:8000');
      } else {
        expect(decision.status).toBe(503);
        expect(decision.counts.penalised).toBe(1);
      }
    }
  });

  it('penalises remote primaries too (shortlist path)', () => {
    const pods = saturate(threeZones(), ['a']);
    const fleet = buildFleet(pods);
    const scheduler = new Scheduler({ fleet, pool: POOL, zone: 'a', region: 'r1' });
    const first = scheduler.pick({ model: 'llama' }, T0);
    expect(first.entries[0]?.endpoint.pod).toBe('b0');
    scheduler.reportServed(first, '10.0.1.2:8000', T0);
    const next = scheduler.pick({ model: 'llama' }, T0 + 1);
    // b1 waits 100 ms for its one queued request; c0 is idle 30 ms away.
    expect(next.entries.map((e) => e.endpoint.pod)).toEqual(['c0', 'b1', 'a0']);
    expect(next.counts.penalised).toBe(1);
    expect(next.counts.eligible).toBe(6);
  });
});

describe('anti-herding', () => {
  /** 100 picks 1 ms apart between two samples, committed: how many each endpoint got. */
  function hundredPicks(scheduler: Scheduler, promptOf: (i: number) => string, from = T0): Map<string, number> {
    const counts = new Map<string, number>();
    for (let i = 0; i < 100; i++) {
      const decision = scheduler.pick({ model: 'llama', prompt: promptOf(i) }, from + i);
      scheduler.commit(decision, from + i);
      const pod = decision.entries[0]?.endpoint.pod as string;
      counts.set(pod, (counts.get(pod) ?? 0) + 1);
    }
    return counts;
  }

  it('spreads 100 picks between two samples over 4 equal endpoints: each brings its prefill', () => {
    // Each prompt shares a system prompt and adds its own question: its uncached part (~80 tokens,
    // 4 ms) is ahead of the next request wherever it went, faster than 1 ms per ms drains it.
    const fleet = buildFleet(fourEqual);
    const counts = hundredPicks(new Scheduler({ fleet, pool: POOL, zone: 'a', seed: 11 }), (i) => prompt(`question ${i}`));
    expect(counts.size).toBe(4);
    for (const n of counts.values()) expect(n).toBeLessThanOrEqual(40);
  });

  it('a repeated cached prompt stays on its holder until its batch is full, then spreads', () => {
    // Every pod was seen full at 8 running; it is idle now.
    const fleet = buildFleet(fourEqual);
    for (const pod of fourEqual) {
      sample(fleet, { ...pod, waiting: 2, running: 8 }, T0 + 100);
      sample(fleet, { ...pod, waiting: 2, running: 8 }, T0 + 200);
      sample(fleet, { ...pod, waiting: 0, running: 0 }, T0 + 300);
    }
    const scheduler = new Scheduler({ fleet, pool: POOL, zone: 'a', seed: 11 });
    const counts = hundredPicks(scheduler, () => prompt('same prompt every time'), T0 + 300);
    // The holder's 8 slots fill, then every request beyond them would wait for a completion.
    expect(counts.size).toBe(4);
    for (const n of counts.values()) expect(n).toBeLessThanOrEqual(40);
    const busiest = Math.max(...counts.values());
    expect(busiest).toBeGreaterThanOrEqual(8);
  });

  it('spilled picks move on as they fill the shortlist (drained, then rescanned)', () => {
    const remote: PodSpec[] = [0, 1, 2, 3, 4, 5].map((i) => ({ pod: `r${i}`, zone: 'b', address: `10.0.1.${i + 1}:8000` }));
    const pods = [...saturate([{ pod: 'a0', zone: 'a', address: '10.0.0.1:8000' }], ['a']), ...remote];
    const fleet = buildFleet(pods);
    const scheduler = new Scheduler({
      fleet,
      pool: POOL,
      zone: 'a',
      region: 'r1',
      config: { remote: { shortlist: 2, refreshMs: 60_000 } },
    });
    const picksOf = (name: string): number => fleet.get(POOL, 'b', name)?.unsampledPicks ?? 0;
    for (let i = 0; i < 30; i++) {
      const decision = scheduler.pick({ model: 'llama' }, T0 + i * 0.01);
      const primary = decision.entries[0]?.endpoint;
      expect(decision.rule).toBe('spill');
      // Every pick since the sample raises an endpoint's expected wait: the primary is never
      // busier than the least busy remote endpoint, listed or not.
      expect(primary?.unsampledPicks).toBe(Math.min(...remote.map((r) => picksOf(r.pod))));
      scheduler.commit(decision, T0);
    }
    for (const r of remote) expect(picksOf(r.pod)).toBe(5);
  });
});

describe('determinism', () => {
  const run = (seed: number): string[] => {
    const fleet = buildFleet([...fourEqual, ...threeZones().filter((p) => p.zone !== 'a')]);
    const scheduler = new Scheduler({ fleet, pool: POOL, zone: 'a', region: 'r1', rng: seededRng(seed) });
    const out: string[] = [];
    for (let i = 0; i < 60; i++) {
      const d: Decision = scheduler.pick({ model: 'llama', prompt: prompt(`topic ${i % 7}`) }, T0 + i);
      scheduler.commit(d, T0 + i);
      if (i % 3 === 0) scheduler.release(d);
      out.push(d.destination);
    }
    return out;
  };

  it('replays exactly for a fixed seed', () => {
    expect(run(42)).toEqual(run(42));
  });

  it('depends on the seed (ties are broken by the RNG)', () => {
    expect(run(42)).not.toEqual(run(43));
  });
});

describe('config', () => {
  it('fills the documented defaults', () => {
    const config = parseSchedulerConfig();
    expect(config).toMatchObject({
      maxEndpoints: 3,
      crossZoneFallbacks: 1,
      subsetMode: 'strict',
      policy: 'cost',
      zoneBiasMs: 8,
      shedAboveMs: 1000,
      network: { sameRegionMs: 1, crossRegionMs: 30, rttMs: {} },
      rates: { default: { requestsPerS: 10, prefillTokensPerS: 20_000, promptTokens: 500, loraLoadMs: 50 }, models: {} },
      avoidablePrefill: { batchWeight: 0.3, queueWeight: 1 },
      gaps: { uncertaintyMsPerS: 2, maxUncertaintyMs: 4, readinessSilenceMs: 90_000 },
      full: { kvCacheUsage: 1, waitingRequests: 1000 },
      queueThreshold: 5,
      kvThreshold: 0.8,
      penaltyMs: 5000,
      weights: { queue: 2, kvCache: 2, prefixCache: 3, lora: 1 },
      prefix: { blockTokens: 16, charsPerToken: 4, maxBlocks: 256, lruCapacity: 31_250, autoTune: true },
      objectives: {},
    });
  });

  it.each([
    [{ maxEndpoints: 0 }, 'maxEndpoints'],
    [{ maxEndpoints: 2.5 }, 'maxEndpoints'],
    [{ crossZoneFallbacks: -1 }, 'crossZoneFallbacks'],
    [{ subsetMode: 'loose' }, 'subsetMode'],
    [{ kvThreshold: 0 }, 'kvThreshold'],
    [{ kvThreshold: 1.5 }, 'kvThreshold'],
    [{ weights: { queue: -1 } }, 'weights'],
    [{ weights: { queu: 1 } }, 'weights'],
    [{ objectives: { batch: { priority: 'low' } } }, 'objectives'],
    [{ prefix: { maxBlocks: 0 } }, 'prefix'],
    [{ typo: true }, 'typo'],
    [{ policy: 'fastest' }, 'policy'],
    [{ zoneBiasMs: -1 }, 'zoneBiasMs'],
    [{ shedAboveMs: 'soon' }, 'shedAboveMs'],
    [{ network: { sameRegionMs: -2 } }, 'network'],
    [{ network: { rttMs: { a: { b: 'far' } } } }, 'network'],
    [{ rates: { default: { requestsPerS: 0 } } }, 'rates'],
    [{ rates: { models: { llama: { prefillTokensPerS: -5 } } } }, 'rates'],
    [{ gaps: { readinessSilenceMs: 10 } }, 'gaps'],
    [{ full: { kvCacheUsage: 2 } }, 'full'],
  ])('rejects %j naming %s', (input, field) => {
    expect(() => parseSchedulerConfig(input)).toThrow(field);
  });

  it('a scheduler rejects a bad config at construction', () => {
    expect(() => new Scheduler({ fleet: buildFleet([]), pool: POOL, zone: 'a', config: { maxEndpoints: -3 } })).toThrow();
  });

  it('weight 0 turns a scorer off: LoRA no longer decides', () => {
    const pods: PodSpec[] = [
      { pod: 'l0', zone: 'a', address: '10.0.0.1:8000', waiting: 0, lora: { running: [], waiting: [], max: 0 } },
      { pod: 'l1', zone: 'a', address: '10.0.0.2:8000', waiting: 1, lora: { running: ['sql-lora'], waiting: [], max: 1 } },
    ];
    const fleet = buildFleet(pods);
    const on = new Scheduler({ fleet, pool: POOL, zone: 'a', config: { policy: 'weighted', weights: { lora: 5 } } });
    const off = new Scheduler({ fleet, pool: POOL, zone: 'a', config: { policy: 'weighted', weights: { lora: 0 } } });
    expect(on.pick({ model: 'sql-lora' }, T0).entries[0]?.endpoint.pod).toBe('l1');
    expect(off.pick({ model: 'sql-lora' }, T0).entries[0]?.endpoint.pod).toBe('l0');
  });
});
