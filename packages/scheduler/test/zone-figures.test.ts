import { describe, expect, it } from 'vitest';
import { parseSchedulerConfig } from '../src/index.js';
import { measuredSpeed, stepSlowdown, zoneFiguresOf } from '../src/zone-figures.js';
import { buildFleet, POOL, type PodSpec } from './fleet-fixture.js';

const config = parseSchedulerConfig({});
const rates = config.rates.default;
const batch = config.batch;

/** What a pod stepping at `speed` × the configured step would report over a 2 s window. */
function window(speed: number, opts: { running: number; kv: number; promptTokensPerS: number }) {
  // Its decode step at that fill, stretched by the share of its time its prefills take.
  const decodeStep = rates.stepMs * speed * stepSlowdown(batch, opts.running, opts.kv);
  const prefillShare = (opts.promptTokensPerS / rates.prefillTokensPerS) * speed;
  const itlMs = decodeStep / (1 - prefillShare);
  return {
    windowMs: 2000,
    promptTokensPerS: opts.promptTokensPerS,
    generationTokensPerS: (opts.running * 1000) / itlMs,
    requestsPerS: 5,
    itlMs,
  };
}

describe('measured speed', () => {
  it("reads a pod's speed back from its inter-token time, whatever its fill and its prefills", () => {
    for (const speed of [0.5, 1, 2])
      for (const running of [0, 8, 100])
        for (const promptTokensPerS of [0, 2000, 8000]) {
          const w = window(speed, { running, kv: 0.3, promptTokensPerS });
          if (running === 0) continue; // no decode tokens: nothing to read
          expect(measuredSpeed(w, 256, 0.3, batch, rates)).toBeCloseTo(speed, 6);
        }
  });

  it('a pod busy prefilling documents is not taken for a slow one', () => {
    // 75 % of its time prefilling: its inter-token time is four times its decode step.
    const w = window(1, { running: 20, kv: 0.5, promptTokensPerS: 15_000 });
    expect(w.itlMs / (rates.stepMs * stepSlowdown(batch, 20, 0.5))).toBeCloseTo(4, 6);
    expect(measuredSpeed(w, 256, 0.5, batch, rates)).toBeCloseTo(1, 6);
  });
});

describe("a zone's figures", () => {
  const pods = (zone: string, n: number, spec: Partial<PodSpec>): PodSpec[] =>
    Array.from({ length: n }, (_, i) => ({ pod: `${zone}${i}`, zone, address: `10.9.${zone.charCodeAt(0)}.${i + 1}:8000`, ...spec }));

  it('use is what its routable, sampled pods hold over their slots; speed the token-weighted mean of theirs', () => {
    const slow = window(2, { running: 40, kv: 0.2, promptTokensPerS: 1000 });
    const fleet = buildFleet([...pods('s', 2, { running: 40, waiting: 24, kv: 0.2, rates: slow }), ...pods('e', 1, { running: 0 })]);
    const out = { use: 0, speed: 0, trust: 0 };
    const pool = fleet.pool(POOL)!;
    zoneFiguresOf(pool, 's', batch, rates, out);
    // Each was seen with a queue behind 40 running (the fixture's two samples): its batch holds 40,
    // and 64 requests are there, so the zone is 160 % full.
    expect(out.use).toBeCloseTo(128 / 80, 6);
    expect(out.speed).toBeCloseTo(2, 6);
    // 2 pods × 40 running × 2 s ÷ their inter-token time: decode tokens, against stepTrustTokens.
    expect(out.trust).toBeCloseTo(Math.min(1, (2 * slow.generationTokensPerS * 2) / batch.stepTrustTokens), 6);
    // No reading: the configured speed, not trusted.
    zoneFiguresOf(pool, 'e', batch, rates, out);
    expect(out).toEqual({ use: 0, speed: 1, trust: 0 });
    // A zone the pool has no pod in.
    zoneFiguresOf(pool, 'nowhere', batch, rates, out);
    expect(out).toEqual({ use: 0, speed: 1, trust: 0 });
  });

  it('a pod without a sample, or not ready, counts for nothing', () => {
    const fleet = buildFleet([
      ...pods('z', 1, { running: 100 }),
      ...pods('y', 1, { noMetrics: true }),
      ...pods('x', 1, { running: 50, ready: false }),
    ]);
    const out = { use: 0, speed: 0, trust: 0 };
    zoneFiguresOf(fleet.pool(POOL)!, 'y', batch, rates, out);
    expect(out.use).toBe(0);
    zoneFiguresOf(fleet.pool(POOL)!, 'x', batch, rates, out);
    expect(out.use).toBe(0);
  });
});
