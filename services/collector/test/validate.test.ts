import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { metricsEventSchema, type MetricsEvent } from '@spillway/events';
import { extractSample } from '../src/scrape.js';
import { validateMetrics } from '../src/validate.js';

/**
 * The collector checks each metrics event with the schema's compiled accept-check instead of
 * zod's safeParse (validate.ts). On events shaped as the collector builds them — in range and
 * out of it — the check must give zod's verdict and zod's value.
 */
function expectAsZod(candidate: MetricsEvent): boolean {
  const zod = metricsEventSchema.safeParse(candidate);
  const ours = validateMetrics(candidate);
  expect(ours.ok).toBe(zod.success);
  if (ours.ok && zod.success) expect(ours.event).toEqual(zod.data);
  if (!ours.ok && !zod.success) expect(ours.message).toBe(zod.error.issues[0]?.message);
  return zod.success;
}

// Mostly in range (so whole events pass), now and then a value some field refuses.
const odd = fc.constantFrom(-1, 0.5, 1.5, Number.NaN, Number.POSITIVE_INFINITY, Number.MAX_SAFE_INTEGER + 2, 1e300, 2e9, 4e6);
const number = fc.oneof(
  { weight: 60, arbitrary: fc.integer({ min: 1, max: 100_000 }) },
  { weight: 60, arbitrary: fc.double({ min: 0, max: 1, noNaN: true }) },
  { weight: 1, arbitrary: odd },
);
const adapter = fc.oneof(
  { weight: 30, arbitrary: fc.stringMatching(/^[a-z0-9-]{1,12}$/) },
  { weight: 1, arbitrary: fc.constantFrom('', 'x'.repeat(253), 'x'.repeat(254)) },
);
const candidate = fc.record(
  {
    v: fc.constant(1 as const),
    kind: fc.constant('metrics' as const),
    pool: fc.oneof({ weight: 30, arbitrary: fc.constant('pool') }, { weight: 1, arbitrary: fc.constantFrom('', 'p'.repeat(254)) }),
    zone: fc.constant('zone-a'),
    pod: fc.stringMatching(/^[a-z0-9-]{1,20}$/),
    observedAt: fc.oneof({ weight: 30, arbitrary: fc.constant(1_800_000_000_000) }, { weight: 1, arbitrary: odd }),
    waitingRequests: number,
    runningRequests: number,
    kvCacheUsage: number,
    lora: fc.record({ running: fc.array(adapter, { maxLength: 3 }), waiting: fc.array(adapter, { maxLength: 3 }), max: number }),
    cache: fc.record({ blockSize: number, numBlocks: number }),
    rates: fc.record(
      {
        windowMs: fc.oneof({ weight: 30, arbitrary: fc.constant(2_000) }, { weight: 1, arbitrary: number }),
        promptTokensPerS: number,
        generationTokensPerS: number,
        requestsPerS: number,
        ttftMs: number,
        queueMs: number,
        itlMs: number,
        prefixHitRate: number,
        prefillMs: number,
        prefillTokensPerS: number,
      },
      { requiredKeys: ['windowMs', 'promptTokensPerS', 'generationTokensPerS', 'requestsPerS'] },
    ),
  },
  { requiredKeys: ['v', 'kind', 'pool', 'zone', 'pod', 'observedAt', 'waitingRequests', 'runningRequests', 'kvCacheUsage'] },
) as fc.Arbitrary<MetricsEvent>;

describe('the collector validates metrics events as zod does', () => {
  it('on generated events, in range and out of it (same verdict, same value, same message)', () => {
    let accepted = 0;
    fc.assert(
      fc.property(candidate, (event) => {
        if (expectAsZod(event)) accepted++;
      }),
      { numRuns: 5000, seed: 29 },
    );
    // Both verdicts were exercised.
    expect(accepted).toBeGreaterThan(50);
    expect(accepted).toBeLessThan(5000);
  });

  it("on the events of every fixture's exposition, which pass", () => {
    const dir = join(import.meta.dirname, 'fixtures');
    for (const name of ['vllm-v0.10.prom', 'vllm-current.prom', 'vllm-dp2.prom', 'sglang.prom', 'trtllm.prom', 'triton.prom']) {
      const { sample } = extractSample(readFileSync(join(dir, name), 'utf8'), undefined);
      const event: MetricsEvent = { v: 1, kind: 'metrics', pool: 'p', zone: 'z', pod: 'pod-0', observedAt: 1_800_000_000_000, ...sample };
      expect(expectAsZod(event), name).toBe(true);
    }
  });
});
