import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import fc from 'fast-check';
import { RateWindow, serviceRatesSchema, type Counters } from '@spillway/events';
import { describe, expect, it } from 'vitest';
import { extractSample } from '../src/scrape.js';

const fixture = (name: string): string => readFileSync(join(import.meta.dirname, 'fixtures', name), 'utf8');

/** Adds `delta` to the first sample of `name` in an exposition (as a server's counter grows). */
function bump(text: string, name: string, delta: number): string {
  const line = new RegExp(`^(${name.replace(/[:+]/g, '\\$&')}(?:\\{[^}]*\\})?) (\\S+)$`, 'm');
  const match = line.exec(text);
  if (!match) throw new Error(`no ${name} in the fixture`);
  return text.replace(line, `$1 ${Number(match[2]) + delta}`);
}

const countersOf = (text: string, engine?: 'vllm' | 'sglang' | 'trtllm' | 'triton'): Counters =>
  extractSample(text, engine).counters.counters;

describe('service rates from two scrapes of real-format expositions', () => {
  it('vLLM: throughputs per second, histogram means of the window, prefix hit rate of the window', () => {
    const before = fixture('vllm-v0.10.prom');
    let after = before;
    for (const [name, delta] of [
      ['vllm:prompt_tokens_total', 10_000],
      ['vllm:generation_tokens_total', 4_000],
      ['vllm:request_success_total', 15],
      ['vllm:request_success_total', 0],
      ['vllm:time_to_first_token_seconds_sum', 3],
      ['vllm:time_to_first_token_seconds_count', 20],
      ['vllm:request_queue_time_seconds_sum', 0.8],
      ['vllm:request_queue_time_seconds_count', 20],
      ['vllm:inter_token_latency_seconds_sum', 56],
      ['vllm:inter_token_latency_seconds_count', 4_000],
      ['vllm:prefix_cache_hits_total', 6_000],
      ['vllm:prefix_cache_queries_total', 10_000],
    ] as const) {
      after = bump(after, name, delta);
    }
    const window = new RateWindow(2_000);
    expect(window.update(1_000, countersOf(before))).toEqual({});
    const { rates } = window.update(3_000, countersOf(after));
    expect(rates?.windowMs).toBe(2_000);
    expect(rates?.promptTokensPerS).toBeCloseTo(5_000, 6);
    expect(rates?.generationTokensPerS).toBeCloseTo(2_000, 6);
    expect(rates?.requestsPerS).toBeCloseTo(7.5, 6);
    expect(rates?.ttftMs).toBeCloseTo(150, 6);
    expect(rates?.queueMs).toBeCloseTo(40, 6);
    expect(rates?.itlMs).toBeCloseTo(14, 6);
    expect(rates?.prefixHitRate).toBeCloseTo(0.6, 6);
  });

  it('the newest vLLM: prefill time and uncached prompt tokens per second of it, from request_prefill_time_seconds', () => {
    const before = fixture('vllm-current.prom');
    let after = before;
    for (const [name, delta] of [
      ['vllm:prompt_tokens_total', 10_000],
      ['vllm:generation_tokens_total', 4_000],
      ['vllm:request_success_total', 20],
      ['vllm:time_to_first_token_seconds_sum', 2],
      ['vllm:time_to_first_token_seconds_count', 20],
      ['vllm:request_queue_time_seconds_sum', 0.4],
      ['vllm:request_queue_time_seconds_count', 20],
      ['vllm:request_prefill_time_seconds_sum', 1.6],
      ['vllm:request_prefill_time_seconds_count', 20],
      ['vllm:prefix_cache_hits_total', 6_000],
      ['vllm:prefix_cache_queries_total', 10_000],
    ] as const) {
      after = bump(after, name, delta);
    }
    const window = new RateWindow(2_000);
    window.update(1_000, countersOf(before));
    const { rates } = window.update(3_000, countersOf(after));
    expect(rates?.ttftMs).toBeCloseTo(100, 6);
    expect(rates?.queueMs).toBeCloseTo(20, 6);
    expect(rates?.prefillMs).toBeCloseTo(80, 6);
    // 10,000 prompt tokens, 60 % of them cached: 4,000 prefilled in 1.6 s of prefill time.
    expect(rates?.prefillTokensPerS).toBeCloseTo(2_500, 6);
    // The one series (engine 1) that did not move changes nothing.
    expect(rates?.windowMs).toBe(2_000);
  });

  it('a malformed prefill histogram (NaN, a sum going down) loses nothing else', () => {
    const base = fixture('vllm-current.prom');
    const grown = (text: string): string => {
      let t = text;
      for (const [name, delta] of [
        ['vllm:prompt_tokens_total', 10_000],
        ['vllm:generation_tokens_total', 4_000],
        ['vllm:request_success_total', 20],
        ['vllm:time_to_first_token_seconds_sum', 2],
        ['vllm:time_to_first_token_seconds_count', 20],
        ['vllm:inter_token_latency_seconds_sum', 56],
        ['vllm:inter_token_latency_seconds_count', 4_000],
        ['vllm:prefix_cache_hits_total', 6_000],
        ['vllm:prefix_cache_queries_total', 10_000],
        ['vllm:request_prefill_time_seconds_count', 20],
      ] as const) {
        t = bump(t, name, delta);
      }
      return t;
    };
    const healthy = bump(grown(base), 'vllm:request_prefill_time_seconds_sum', 1.6);
    const rated = (after: string) => {
      const window = new RateWindow(2_000);
      window.update(1_000, countersOf(base));
      const reading = extractSample(after, undefined);
      return { update: window.update(3_000, reading.counters.counters), invalid: reading.counters.invalid, sample: reading.sample };
    };
    const good = rated(healthy);
    expect(good.update.rates?.prefillMs).toBeCloseTo(80, 6);
    const { prefillMs: _m, prefillTokensPerS: _p, ...withoutPrefill } = good.update.rates ?? {};
    expect(Object.keys(withoutPrefill)).toEqual(
      expect.arrayContaining(['promptTokensPerS', 'requestsPerS', 'ttftMs', 'itlMs', 'prefixHitRate']),
    );

    const nan = rated(healthy.replace(/^(vllm:request_prefill_time_seconds_sum\{engine="0"[^}]*\}) \S+$/m, '$1 NaN'));
    expect(nan.invalid).toEqual(['vllm:request_prefill_time_seconds_sum']);
    expect(nan.sample).toEqual(good.sample);
    expect(nan.update).toEqual({ rates: withoutPrefill });

    // 20 more prefills but 1 s less prefill time: a negative observation, not a restart.
    const down = rated(bump(grown(base), 'vllm:request_prefill_time_seconds_sum', -1));
    expect(down.invalid).toEqual([]);
    expect(down.update).toEqual({ rates: withoutPrefill });
  });

  it('SGLang: requests from num_requests_total, hit rate = cached / prompt tokens', () => {
    const before = fixture('sglang.prom');
    let after = bump(before, 'sglang:prompt_tokens_total', 4_000);
    after = bump(after, 'sglang:generation_tokens_total', 1_000);
    after = bump(after, 'sglang:num_requests_total', 4);
    after = bump(after, 'sglang:cached_tokens_total', 1_000);
    const window = new RateWindow(2_000);
    window.update(0, countersOf(before));
    const { rates } = window.update(2_000, countersOf(after));
    expect(rates).toMatchObject({
      windowMs: 2_000,
      promptTokensPerS: 2_000,
      generationTokensPerS: 500,
      requestsPerS: 2,
      prefixHitRate: 0.25,
    });
    // No first token, queue exit or decode step in the window: no means rather than made-up ones.
    expect(rates).not.toHaveProperty('ttftMs');
    expect(rates).not.toHaveProperty('queueMs');
    expect(rates).not.toHaveProperty('itlMs');
  });

  it('TensorRT-LLM: prefix hit rate = reused / (reused + missed) blocks', () => {
    const before = fixture('trtllm.prom');
    let after = bump(before, 'trtllm_prompt_tokens_total', 2_000);
    after = bump(after, 'trtllm_generation_tokens_total', 500);
    after = bump(after, 'trtllm_request_success_total', 5);
    after = bump(after, 'trtllm_kv_cache_reused_blocks_total', 30);
    after = bump(after, 'trtllm_kv_cache_missed_blocks_total', 10);
    after = bump(after, 'trtllm_time_to_first_token_seconds_sum', 1);
    after = bump(after, 'trtllm_time_to_first_token_seconds_count', 5);
    const window = new RateWindow(2_000);
    window.update(0, countersOf(before));
    const { rates } = window.update(1_000, countersOf(after));
    expect(rates).toMatchObject({
      windowMs: 1_000,
      promptTokensPerS: 2_000,
      generationTokensPerS: 500,
      requestsPerS: 5,
      prefixHitRate: 0.75,
    });
    expect(rates?.ttftMs).toBeCloseTo(200, 6);
  });

  it('Triton: throughputs only', () => {
    const before = fixture('triton.prom');
    let after = bump(before, 'nv_llm_input_token_len_sum', 1_024);
    after = bump(after, 'nv_llm_output_token_len_sum', 256);
    after = bump(after, 'nv_llm_output_token_len_count', 2);
    const window = new RateWindow(2_000);
    window.update(0, countersOf(before));
    expect(window.update(2_000, countersOf(after)).rates).toEqual({
      windowMs: 2_000,
      promptTokensPerS: 512,
      generationTokensPerS: 128,
      requestsPerS: 1,
    });
  });

  it('a server that exposes no request or token counter gets no rates', () => {
    const window = new RateWindow(2_000);
    window.update(0, countersOf(fixture('vllm-dp2.prom')));
    expect(window.update(2_000, countersOf(fixture('vllm-dp2.prom')))).toEqual({});
    const noRequests = fixture('vllm-v0.10.prom').replace(/^vllm:request_success_total.*\n/gm, '');
    window.update(3_000, countersOf(noRequests));
    expect(window.update(5_000, countersOf(noRequests))).toEqual({});
  });
});

describe('RateWindow', () => {
  const counters = (n: number, extra: Partial<Counters> = {}): Counters => ({
    promptTokens: 100 * n,
    generationTokens: 10 * n,
    requests: n,
    ttft: { sumMs: 50 * n, count: n },
    ...extra,
  });

  it('slides over about the window: rates follow a change in load within one window', () => {
    const window = new RateWindow(2_000);
    let requests = 0;
    let last;
    // 1 request per 100 ms for 3 s, then 3 per 100 ms.
    for (let t = 0; t <= 6_000; t += 100) {
      last = window.update(t, counters(requests));
      requests += t < 3_000 ? 1 : 3;
      if (t === 2_900) expect(last.rates?.requestsPerS).toBeCloseTo(10, 6);
    }
    expect(last?.rates?.requestsPerS).toBeCloseTo(30, 6);
    expect(last?.rates?.windowMs).toBe(2_000);
  });

  it('reports nothing until the history spans half the window', () => {
    const window = new RateWindow(2_000);
    expect(window.update(0, counters(0))).toEqual({});
    expect(window.update(500, counters(5))).toEqual({});
    expect(window.update(999, counters(10))).toEqual({});
    expect(window.update(1_000, counters(10)).rates?.windowMs).toBe(1_000);
  });

  it('a counter that goes down (a restarted server) drops the history instead of reporting a negative rate', () => {
    const window = new RateWindow(2_000);
    window.update(0, counters(1_000));
    expect(window.update(2_000, counters(1_020)).rates?.requestsPerS).toBeCloseTo(10, 6);
    expect(window.update(2_100, counters(3))).toEqual({ reset: true });
    expect(window.update(2_600, counters(8))).toEqual({});
    expect(window.update(3_100, counters(13)).rates?.requestsPerS).toBeCloseTo(10, 6);
  });

  it('a histogram whose count goes down is a reset too', () => {
    const window = new RateWindow(2_000);
    window.update(0, counters(10));
    expect(window.update(1_000, counters(20, { ttft: { sumMs: 10, count: 1 } })).reset).toBe(true);
  });

  it('a gap longer than the window starts afresh rather than averaging over it', () => {
    const window = new RateWindow(2_000);
    window.update(0, counters(0));
    window.update(1_000, counters(10));
    expect(window.update(60_000, counters(1_000))).toEqual({});
    expect(window.update(61_000, counters(1_010)).rates?.requestsPerS).toBeCloseTo(10, 6);
  });

  it('an absurd jump is out of range and left out, never published', () => {
    const window = new RateWindow(2_000);
    window.update(0, counters(0));
    expect(window.update(1_000, counters(0, { promptTokens: 1e300 }))).toEqual({ outOfRange: true });
  });

  it('a family appearing or disappearing only adds or removes its own field', () => {
    const window = new RateWindow(2_000);
    window.update(0, counters(0));
    const { ttft: _t, ...withoutTtft } = counters(10);
    expect(window.update(1_000, withoutTtft).rates).toEqual({
      windowMs: 1_000,
      promptTokensPerS: 1_000,
      generationTokensPerS: 100,
      requestsPerS: 10,
    });
  });

  it('more prefix hits than lookups is inconsistent: no hit rate', () => {
    const window = new RateWindow(2_000);
    window.update(0, counters(0, { prefixHits: 0, prefixQueries: 0 }));
    expect(window.update(1_000, counters(1, { prefixHits: 50, prefixQueries: 10 })).rates).not.toHaveProperty('prefixHitRate');
  });

  it('whatever the counters do, every rate it returns passes the event schema (property)', () => {
    const moments = fc.option(fc.record({ sumMs: fc.double({ noNaN: false }), count: fc.double() }), { nil: undefined });
    const value = fc.option(fc.oneof(fc.double(), fc.integer({ min: 0, max: 1e9 })), { nil: undefined });
    const snapshot = fc.record({
      promptTokens: value,
      generationTokens: value,
      requests: value,
      ttft: moments,
      queue: moments,
      itl: moments,
      prefill: moments,
      prefixHits: value,
      prefixQueries: value,
    });
    fc.assert(
      fc.property(fc.array(fc.tuple(fc.integer({ min: 0, max: 3_000 }), snapshot), { maxLength: 30 }), (steps) => {
        const window = new RateWindow(2_000);
        let at = 0;
        for (const [dt, raw] of steps) {
          at += dt;
          const snap = Object.fromEntries(Object.entries(raw).filter(([, v]) => v !== undefined)) as Counters;
          const { rates } = window.update(at, snap);
          if (rates !== undefined) expect(serviceRatesSchema.safeParse(rates).success).toBe(true);
        }
      }),
    );
  });
});
