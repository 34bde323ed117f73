import fc from 'fast-check';
import { Histogram, Registry } from 'prom-client';
import { describe, expect, it } from 'vitest';
import { PendingHistogram } from '../src/telemetry/pending-histogram.js';

const BUCKETS = [0.001, 0.01, 0.1, 1, 10];

function pair(collect?: () => void) {
  const registry = new Registry();
  const make = (name: string) =>
    new Histogram({
      name,
      help: name,
      labelNames: ['model_name'] as const,
      buckets: BUCKETS,
      registers: [registry],
      ...(collect ? { collect } : {}),
    });
  return { direct: make('direct_seconds'), batched: make('batched_seconds') };
}

/**
 * The exposition of one histogram, with its name taken out so two can be compared. The sum is
 * rounded: batched values are summed in another order, which can change the last bits.
 */
async function exposition(histogram: Histogram<string>): Promise<unknown> {
  const data = await histogram.get();
  return data.values.map((v) => {
    const metricName = v.metricName?.replace(/^(direct|batched)_seconds/, 'h');
    return { ...v, metricName, value: metricName === 'h_sum' ? Number(v.value.toPrecision(12)) : v.value };
  });
}

describe('PendingHistogram', () => {
  it('reads as observing each value with prom-client would (same buckets and count, the same sum up to rounding), across flushes', async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.array(
          fc.array(fc.oneof(fc.double({ min: -5, max: 50, noNaN: true }), fc.constantFrom(...BUCKETS), fc.constant(0)), { maxLength: 40 }),
          { maxLength: 4 },
        ),
        async (rounds) => {
          const { direct, batched } = pair();
          const pending = new PendingHistogram(batched, { model_name: 'llama' });
          for (const values of rounds) {
            for (const v of values) {
              direct.observe({ model_name: 'llama' }, v);
              pending.observe(v);
            }
            pending.flush();
            expect(await exposition(batched)).toEqual(await exposition(direct));
          }
        },
      ),
      { numRuns: 100 },
    );
  });

  it('adds to a series prom-client already holds for the same labels, and flushes when the metric is read', async () => {
    const flushes: (() => void)[] = [];
    const { direct, batched } = pair(() => flushes.forEach((f) => f()));
    const pending = new PendingHistogram(batched, { model_name: 'a' });
    flushes.push(() => pending.flush());
    for (const h of [direct, batched]) h.observe({ model_name: 'a' }, 0.5);
    direct.observe({ model_name: 'a' }, 0.05);
    pending.observe(0.05);
    // No explicit flush: reading the metric runs its collect.
    expect(await exposition(batched)).toEqual(await exposition(direct));
  });

  it('refuses a non-finite value as prom-client does', () => {
    const { batched } = pair();
    const pending = new PendingHistogram(batched, { model_name: 'a' });
    expect(() => pending.observe(Number.NaN)).toThrow(TypeError);
    expect(() => batched.observe({ model_name: 'a' }, Number.NaN)).toThrow(TypeError);
  });

  it('falls back to prom-client observe when the internals are not what it expects', async () => {
    const { direct, batched } = pair();
    // A histogram without the expected internals (as after a library change).
    const masked = Object.create(batched, { zero: { value: undefined } }) as Histogram<string>;
    const pending = new PendingHistogram(masked, { model_name: 'a' });
    for (const v of [0.002, 3, 100]) {
      pending.observe(v);
      direct.observe({ model_name: 'a' }, v);
    }
    pending.flush();
    expect(await exposition(batched)).toEqual(await exposition(direct));
  });
});
