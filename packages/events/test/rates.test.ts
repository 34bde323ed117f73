import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { RateWindow, serviceRatesSchema, type Counters } from '@spillway/events';

/**
 * A server's counters after `n` requests: 500 prompt tokens each, 60 % of them found in the prefix
 * cache, 40 ms of prefill each (so 200 uncached tokens in 40 ms: 5,000 tokens/s of prefill).
 */
function counters(n: number, extra: Partial<Counters> = {}): Counters {
  return {
    promptTokens: 500 * n,
    generationTokens: 50 * n,
    requests: n,
    ttft: { sumMs: 60 * n, count: n },
    queue: { sumMs: 20 * n, count: n },
    prefixHits: 300 * n,
    prefixQueries: 500 * n,
    prefill: { sumMs: 40 * n, count: n },
    ...extra,
  };
}

describe('RateWindow: prefill time and prefill rate', () => {
  it('the mean prefill time and the uncached prompt tokens per second of prefill time over the window', () => {
    const window = new RateWindow(2_000);
    window.update(0, counters(100));
    const { rates } = window.update(2_000, counters(120));
    expect(rates?.prefixHitRate).toBeCloseTo(0.6, 12);
    expect(rates?.prefillMs).toBeCloseTo(40, 9);
    // 20 requests × 500 prompt tokens × (1 − 0.6) = 4,000 uncached tokens in 800 ms of prefill.
    expect(rates?.prefillTokensPerS).toBeCloseTo(5_000, 6);
    expect(serviceRatesSchema.safeParse(rates).success).toBe(true);
  });

  it('without prefix-cache counters every prompt token counts as prefilled', () => {
    const window = new RateWindow(2_000);
    const noHits = (n: number): Counters => {
      const { prefixHits: _h, prefixQueries: _q, ...rest } = counters(n);
      return rest;
    };
    window.update(0, noHits(0));
    const { rates } = window.update(1_000, noHits(10));
    expect(rates).not.toHaveProperty('prefixHitRate');
    expect(rates?.prefillMs).toBeCloseTo(40, 9);
    // 5,000 prompt tokens in 400 ms of prefill.
    expect(rates?.prefillTokensPerS).toBeCloseTo(12_500, 6);
  });

  it('no prefill histogram, or none observed in the window: both fields are left out, the rest is there', () => {
    const { prefill: _p, ...withoutPrefill } = counters(0);
    const cases: [string, Counters, Counters][] = [
      ['not exported', withoutPrefill, { ...withoutPrefill, promptTokens: 5_000, requests: 10 }],
      ['nothing observed', counters(10), counters(20, { prefill: { sumMs: 400, count: 10 } })],
      ['observations of zero time', counters(10), counters(20, { prefill: { sumMs: 400, count: 15 } })],
      ['time without observations', counters(10), counters(20, { prefill: { sumMs: 900, count: 10 } })],
      ['appearing only now', withoutPrefill, counters(10)],
    ];
    for (const [name, before, after] of cases) {
      const window = new RateWindow(2_000);
      window.update(0, before);
      const { rates } = window.update(1_000, after);
      expect(rates, name).toBeDefined();
      expect(rates, name).not.toHaveProperty('prefillMs');
      expect(rates, name).not.toHaveProperty('prefillTokensPerS');
    }
  });

  it('every prompt cached: a prefill time but no prefill rate (0 tokens/s would be a division by zero for readers)', () => {
    const window = new RateWindow(2_000);
    window.update(0, counters(10, { prefixHits: 5_000, prefixQueries: 5_000 }));
    const { rates } = window.update(1_000, counters(20, { prefixHits: 10_000, prefixQueries: 10_000 }));
    expect(rates?.prefixHitRate).toBe(1);
    expect(rates?.prefillMs).toBeCloseTo(40, 9);
    expect(rates).not.toHaveProperty('prefillTokensPerS');
  });

  it('a restarted server (every counter down): the history starts afresh, prefill included, and resumes', () => {
    const window = new RateWindow(2_000);
    window.update(0, counters(1_000));
    expect(window.update(1_000, counters(1_010)).rates?.prefillMs).toBeCloseTo(40, 9);
    expect(window.update(1_100, counters(2))).toEqual({ reset: true });
    expect(window.update(1_600, counters(4))).toEqual({});
    const { rates } = window.update(2_100, counters(12));
    expect(rates?.windowMs).toBe(1_000);
    expect(rates?.prefillMs).toBeCloseTo(40, 9);
    expect(rates?.prefillTokensPerS).toBeCloseTo(5_000, 6);
  });

  it('the prefill histogram alone going down is no restart: only the prefill fields are left out, while the window spans it', () => {
    const window = new RateWindow(2_000);
    for (let t = 0, n = 0; t <= 2_000; t += 100, n++) window.update(t, counters(n));
    // A negative observation (vLLM's prefill time is a difference of timestamps): the sum drops by a day.
    const broken = (n: number): Counters => counters(n, { prefill: { sumMs: 40 * n - 86_400_000, count: n } });
    const at = (t: number) => window.update(t, broken(t / 100));
    const first = at(2_100);
    expect(first.reset).toBeUndefined();
    expect(first.rates?.requestsPerS).toBeCloseTo(10, 6);
    expect(first.rates?.ttftMs).toBeCloseTo(60, 9);
    expect(first.rates).not.toHaveProperty('prefillMs');
    expect(first.rates).not.toHaveProperty('prefillTokensPerS');
    // Still spanned by the window, even once the deltas from a later base are positive again.
    expect(at(3_000).rates).not.toHaveProperty('prefillMs');
    expect(at(4_000).rates).not.toHaveProperty('prefillMs');
    // The window's base is the broken snapshot or later: prefill is back, exact.
    const back = at(4_100);
    expect(back.rates?.windowMs).toBe(2_000);
    expect(back.rates?.prefillMs).toBeCloseTo(40, 6);
    expect(back.rates?.prefillTokensPerS).toBeCloseTo(5_000, 3);
  });

  it('a prefill count going down alone is handled the same way', () => {
    const window = new RateWindow(2_000);
    window.update(0, counters(10));
    const { rates, reset } = window.update(1_000, counters(20, { prefill: { sumMs: 800, count: 5 } }));
    expect(reset).toBeUndefined();
    expect(rates?.requestsPerS).toBeCloseTo(10, 6);
    expect(rates).not.toHaveProperty('prefillMs');
  });

  it('absurd prefill values leave out only the prefill fields, never the other rates', () => {
    // 5,000 uncached tokens in a nanosecond of prefill: 5·10¹⁵ tokens/s, past the schema's 10⁹.
    let window = new RateWindow(2_000);
    window.update(0, counters(0, { prefill: { sumMs: 0, count: 0 } }));
    let update = window.update(1_000, counters(10, { prefill: { sumMs: 1e-6, count: 10 } }));
    expect(update.outOfRange).toBeUndefined();
    expect(update.rates?.requestsPerS).toBeCloseTo(10, 6);
    expect(update.rates?.prefillMs).toBeCloseTo(1e-7, 12);
    expect(update.rates).not.toHaveProperty('prefillTokensPerS');
    // Ten hours of prefill per request.
    window = new RateWindow(2_000);
    window.update(0, counters(0, { prefill: { sumMs: 0, count: 0 } }));
    update = window.update(1_000, counters(10, { prefill: { sumMs: 10 * 36_000_000, count: 10 } }));
    expect(update.outOfRange).toBeUndefined();
    expect(update.rates?.ttftMs).toBeCloseTo(60, 9);
    expect(update.rates).not.toHaveProperty('prefillMs');
    expect(update.rates).not.toHaveProperty('prefillTokensPerS');
  });
});

describe('the window checks its rates with the compiled schema check, as zod would', () => {
  it('every rate it returns is what zod returns for it, absurd jumps among the counters', () => {
    const seen = { rates: 0, outOfRange: 0 };
    fc.assert(
      fc.property(
        fc.array(fc.record({ step: fc.integer({ min: 1, max: 400 }), n: fc.oneof(fc.integer({ min: 0, max: 50 }), fc.constant(1e12)) }), {
          minLength: 2,
          maxLength: 40,
        }),
        (steps) => {
          const window = new RateWindow(2_000);
          let at = 0;
          let n = 0;
          for (const step of steps) {
            at += step.step;
            n += step.n;
            const update = window.update(at, counters(n));
            if (update.outOfRange) seen.outOfRange++;
            if (update.rates !== undefined) {
              seen.rates++;
              const zod = serviceRatesSchema.safeParse(update.rates);
              expect(zod.success).toBe(true);
              if (zod.success) expect(update.rates).toEqual(zod.data);
            }
          }
        },
      ),
      { numRuns: 500, seed: 31 },
    );
    // Both outcomes were exercised.
    expect(seen.rates).toBeGreaterThan(0);
    expect(seen.outOfRange).toBeGreaterThan(0);
  });
});
