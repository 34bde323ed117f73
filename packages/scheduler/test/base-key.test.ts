import { describe, expect, it } from 'vitest';
import { Charge } from '@spillway/fleet';
import { CostPolicy } from '../src/cost.js';
import { parseSchedulerConfig } from '../src/config.js';
import { ZoneNetwork, type Tier } from '../src/network.js';
import type { PricingContext } from '../src/pricing.js';
import { buildFleet, POOL, sample, T0, type PodSpec } from './fleet-fixture.js';

/**
 * The remote shortlist's base keys are memoised per endpoint, with the prefill backlog and
 * displacement added afresh: every key the memo gives must be the key a fresh pricing gives, as
 * the backlog drains, the zone fills and samples arrive.
 */
describe('the base-key memo', () => {
  it.each([
    ['a fixed bias', {}],
    ['a bias that fades as the home zone fills', { zoneBiasFade: { from: 0.05, width: 0.3 } }],
  ])('gives what a fresh pricing gives, while time passes, the zones fill and samples arrive (%s)', (_name, extra) => {
    // refreshMs 0: both policies read the zones' figures afresh on every pick (no refresh period between them).
    const config = parseSchedulerConfig({ remote: { refreshMs: 0 }, ...extra });
    const rates = { windowMs: 2000, promptTokensPerS: 3000, generationTokensPerS: 4000, requestsPerS: 10, itlMs: 20 };
    const pods: PodSpec[] = [
      { pod: 'a0', zone: 'a', address: '10.0.0.1:8000', running: 10 },
      ...[0, 1, 2, 3].map((i): PodSpec => ({ pod: `b${i}`, zone: 'b', address: `10.0.1.${i + 1}:8000`, running: 150 + i * 20, rates })),
    ];
    const fleet = buildFleet(pods);
    const pool = fleet.pool(POOL)!;
    const network = new ZoneNetwork('a', undefined, config.network);
    const memoised = new CostPolicy(config, network, fleet.staleAfterMs);
    const ctx = (now: number, seq: number): PricingContext => ({
      now,
      pickSeq: seq,
      pool,
      topologyVersion: fleet.topologyVersion,
      model: 'm',
      modelIsAdapter: false,
      promptTokens: 0,
      bestCachedTokens: 0,
      prefixBlocks: 0,
      blockTokens: 16,
      prefixMatch: () => 0,
      cachedTokens: () => 0,
      cacheSource: () => 'approximate',
      prefillAhead: (endpoint, rate, out) => fleet.prefillAhead(endpoint, now, config.backlog, rate, out),
      includeExcluded: false,
      isExcluded: () => false,
    });
    const b = [0, 1, 2, 3].map((i) => fleet.get(POOL, 'b', `b${i}`)!);
    const tier = network.tierOf(pool, 'b', fleet.topologyVersion) as Tier;
    // A peer's request with 2,000 tokens of prefill on b0, charged before its latest sample.
    const charge = new Charge();
    charge.prefillTokens = 2000;
    fleet.charge(charge, b[0]!, T0 - 5);
    let seq = 0;
    for (let step = 0; step < 40; step++) {
      const now = T0 + step * 7;
      // Now and then a new sample of one pod (the zone's use and speed move), from time to time a fuller one.
      if (step % 5 === 4) sample(fleet, { ...(pods[1 + (step % 4)] as PodSpec), running: 150 + step * 2, rates }, now);
      // The home zone fills past the remote one (the bias fades, when it does, as it does).
      if (step % 3 === 2) sample(fleet, { ...(pods[0] as PodSpec), running: 10 + step * 6 }, now);
      const c = ctx(now, ++seq);
      for (const endpoint of b) {
        const fresh = new CostPolicy(config, network, fleet.staleAfterMs).baseKey(c, endpoint, tier);
        expect(memoised.baseKey(c, endpoint, tier)).toBeCloseTo(fresh, 6);
      }
    }
  });
});
