import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { ExpositionError, FamilyFilter, parseExposition } from '../src/exposition.js';
import { detectEngine, mapExposition } from '../src/engines.js';
import fc from 'fast-check';
import { BudgetError, DEFAULT_SCRAPE_LIMITS } from '../src/budget.js';
import { ExtractError, ScrapeReader, extractSample, type Extracted } from '../src/scrape.js';

const fixture = (name: string): string => readFileSync(join(import.meta.dirname, 'fixtures', name), 'utf8');
const withoutCounters = ({ counters: _c, ...rest }: Extracted): Omit<Extracted, 'counters'> => rest;

describe('engine mappings of real-format expositions', () => {
  it('vLLM v0.10: kv_cache_usage_perc, the newest LoRA series, cache config labels', () => {
    const text = fixture('vllm-v0.10.prom');
    expect(detectEngine(text)).toBe('vllm');
    expect(withoutCounters(extractSample(text, undefined))).toEqual({
      engine: 'vllm',
      sample: {
        waitingRequests: 2,
        runningRequests: 5,
        kvCacheUsage: 0.4375,
        // The series valued 1.7907001e9 is newer than 1.7907e9; names trimmed, empties skipped.
        lora: { running: ['sql-lora', 'chat-lora'], waiting: ['tool-lora'], max: 2 },
        cache: { blockSize: 16, numBlocks: 29000 },
      },
    });
  });

  it('the newest vLLM: kv_cache_usage_perc only, two engines summed and averaged, cache config per engine, LoRA without a model label', () => {
    const text = fixture('vllm-current.prom');
    expect(detectEngine(text)).toBe('vllm');
    expect(withoutCounters(extractSample(text, undefined))).toEqual({
      engine: 'vllm',
      sample: {
        waitingRequests: 1,
        runningRequests: 10,
        kvCacheUsage: 0.375,
        lora: { running: ['sql-lora'], waiting: [], max: 2 },
        cache: { blockSize: 16, numBlocks: 29000 },
      },
    });
  });

  it('vLLM 0.8-0.9 (the first v1 releases): gpu_cache_usage_perc', () => {
    expect(extractSample(fixture('vllm-v0.9-v1.prom'), 'vllm').sample).toEqual({
      waitingRequests: 0,
      runningRequests: 3,
      kvCacheUsage: 0.125,
    });
  });

  it('vLLM v0.6: the old gpu_cache_usage_perc name, no adapters running', () => {
    expect(extractSample(fixture('vllm-v0.6.prom'), 'vllm').sample).toEqual({
      waitingRequests: 7,
      runningRequests: 12,
      kvCacheUsage: 0.91,
      lora: { running: [], waiting: [], max: 4 },
      cache: { blockSize: 32, numBlocks: 7120 },
    });
  });

  it('vLLM with two data-parallel ranks: counts summed, KV use averaged', () => {
    const { sample } = extractSample(fixture('vllm-dp2.prom'), 'vllm');
    expect(sample.waitingRequests).toBe(1);
    expect(sample.runningRequests).toBe(7);
    expect(sample.kvCacheUsage).toBeCloseTo(0.4, 10);
    expect(sample.lora).toBeUndefined();
    expect(sample.cache).toBeUndefined();
  });

  it('prefers kv_cache_usage_perc over the deprecated name when both differ', () => {
    const text = fixture('vllm-v0.10.prom').replace(/(vllm:gpu_cache_usage_perc\{[^}]*\}) 0.4375/, '$1 0.99');
    expect(extractSample(text, 'vllm').sample.kvCacheUsage).toBe(0.4375);
  });

  it('SGLang', () => {
    const text = fixture('sglang.prom');
    expect(detectEngine(text)).toBe('sglang');
    expect(withoutCounters(extractSample(text, undefined))).toEqual({
      engine: 'sglang',
      sample: { waitingRequests: 3, runningRequests: 28, kvCacheUsage: 0.28, cache: { blockSize: 1, numBlocks: 30000 } },
    });
  });

  it('SGLang today: per-rank labels, no cache config series', () => {
    const text = fixture('sglang-current.prom');
    expect(detectEngine(text)).toBe('sglang');
    expect(withoutCounters(extractSample(text, undefined))).toEqual({
      engine: 'sglang',
      sample: { waitingRequests: 6, runningRequests: 41, kvCacheUsage: 0.43 },
    });
  });

  it('TensorRT-LLM (trtllm-serve)', () => {
    const text = fixture('trtllm.prom');
    expect(detectEngine(text)).toBe('trtllm');
    expect(withoutCounters(extractSample(text, undefined))).toEqual({
      engine: 'trtllm',
      sample: { waitingRequests: 4, runningRequests: 9, kvCacheUsage: 0.625, cache: { blockSize: 32, numBlocks: 8192 } },
    });
  });

  it('Triton TensorRT-LLM backend: request_type and kv_cache_block_type series', () => {
    const text = fixture('triton.prom');
    expect(detectEngine(text)).toBe('triton');
    expect(withoutCounters(extractSample(text, undefined))).toEqual({
      engine: 'triton',
      sample: { waitingRequests: 2, runningRequests: 6, kvCacheUsage: 0.25, cache: { blockSize: 64, numBlocks: 6239 } },
    });
  });

  it('leaves out cache info an engine has not computed yet instead of rejecting the sample', () => {
    const text = fixture('vllm-v0.10.prom').replace('num_gpu_blocks="29000"', 'num_gpu_blocks="None"');
    const { sample } = extractSample(text, 'vllm');
    expect(sample.cache).toBeUndefined();
    expect(sample.waitingRequests).toBe(2);
  });

  it('reads an exposition without a trailing newline completely', () => {
    const text = fixture('vllm-dp2.prom').trimEnd();
    expect(extractSample(text, 'vllm').sample.kvCacheUsage).toBeCloseTo(0.4, 10);
  });
});

describe('counters for service rates, read from real-format expositions', () => {
  const counters = (name: string) => extractSample(fixture(name), undefined).counters;

  it('vLLM v0.10: tokens, requests summed over finished_reason, TTFT, queue and ITL histograms, prefix tokens', () => {
    expect(counters('vllm-v0.10.prom')).toEqual({
      counters: {
        promptTokens: 340_000,
        generationTokens: 8_125,
        requests: 120,
        ttft: { sumMs: 12_500, count: 125 },
        queue: { sumMs: 2_500, count: 125 },
        itl: { sumMs: 98_100, count: 8_000 },
        prefixHits: 120_000,
        prefixQueries: 340_000,
      },
      invalid: [],
    });
  });

  it('the newest vLLM: prefix_cache_* counters, inter_token_latency and request_prefill_time over both engines (the per-request TPOT histogram is not ITL)', () => {
    expect(counters('vllm-current.prom')).toEqual({
      counters: {
        promptTokens: 300_000,
        generationTokens: 8_000,
        requests: 100,
        ttft: { sumMs: 10_000, count: 100 },
        queue: { sumMs: 1_000, count: 100 },
        itl: { sumMs: 160_000, count: 7_900 },
        prefill: { sumMs: 9_000, count: 100 },
        prefixHits: 120_000,
        prefixQueries: 300_000,
      },
      invalid: [],
    });
  });

  it('vLLM 0.8-0.9: the prefix counters under their gpu_prefix_cache_* names, ITL under its old name', () => {
    expect(counters('vllm-v0.9-v1.prom').counters).toEqual({
      promptTokens: 64_000,
      generationTokens: 2_000,
      itl: { sumMs: 40_000, count: 1_980 },
      prefixHits: 16_000,
      prefixQueries: 64_000,
    });
  });

  it('the newest TensorRT-LLM: prefix reuse in prompt tokens rather than KV blocks', () => {
    const { sample, counters: reading } = extractSample(fixture('trtllm-current.prom'), undefined);
    expect(sample).toEqual({ waitingRequests: 2, runningRequests: 5, kvCacheUsage: 0.75, cache: { blockSize: 32, numBlocks: 4096 } });
    expect(reading.counters).toMatchObject({ promptTokens: 80_000, generationTokens: 9_000, prefixHits: 20_000, prefixQueries: 80_000 });
    // Its prefill-time histogram (newer releases), in seconds like vLLM's.
    expect(reading.counters.prefill).toEqual({ sumMs: 12_000, count: 40 });
  });

  it('prefill time only where the engine exports it: not from vLLM before it, nor from SGLang or Triton', () => {
    for (const name of [
      'vllm-v0.10.prom',
      'vllm-v0.9-v1.prom',
      'vllm-v0.6.prom',
      'sglang.prom',
      'sglang-current.prom',
      'triton.prom',
      'trtllm.prom',
    ]) {
      expect(counters(name).counters, name).not.toHaveProperty('prefill');
    }
  });

  it('vLLM v0.6: the old per-output-token histogram name; no queue or prefix counters', () => {
    const { counters: c } = counters('vllm-v0.6.prom');
    expect(c).toEqual({ promptTokens: 52_000, generationTokens: 21_000, requests: 101, itl: { sumMs: 420_000, count: 20_899 } });
  });

  it('vLLM without counters (an exposition of gauges only): nothing to rate', () => {
    expect(counters('vllm-dp2.prom')).toEqual({ counters: {}, invalid: [] });
  });

  it('SGLang: num_requests_total, cached tokens over prompt tokens, queue_time_seconds', () => {
    expect(counters('sglang.prom').counters).toEqual({
      promptTokens: 8_128_902,
      generationTokens: 7_557_572,
      requests: 11_228,
      ttft: { sumMs: 2.3518979474117756e9, count: 11_008 },
      queue: { sumMs: 5_614_000, count: 11_228 },
      itl: { sumMs: 866964.5791549598 * 1000, count: 7_400_757 },
      prefixHits: 61_000,
      prefixQueries: 8_128_902,
    });
  });

  it('SGLang today: only the device tier of cached_tokens_total is a prefix hit (host and storage hits are loads)', () => {
    expect(counters('sglang-current.prom')).toEqual({
      counters: {
        promptTokens: 1_200_000,
        generationTokens: 310_000,
        requests: 640,
        ttft: { sumMs: 192_000, count: 640 },
        queue: { sumMs: 41_600, count: 640 },
        itl: { sumMs: 4_950_000, count: 309_360 },
        prefixHits: 540_000,
        prefixQueries: 1_200_000,
      },
      invalid: [],
    });
  });

  it('SGLang with cache_source: before its first device hit there is no hit rate, whatever the other tiers served', () => {
    const text = fixture('sglang-current.prom').replace(/^sglang:cached_tokens_total\{cache_source="device".*\n/m, '');
    const c = extractSample(text, 'sglang').counters.counters;
    expect(c.prefixHits).toBeUndefined();
    expect(c.prefixQueries).toBeUndefined();
    expect(c.promptTokens).toBe(1_200_000);
  });

  it('a label matcher for "" matches the series without the label, as in PromQL', () => {
    const text = fixture('sglang.prom').replace(
      /^(sglang:cached_tokens_total)\{model_name="([^"]*)"\} 61000.0$/m,
      '$1{model_name="$2"} 61000.0\n$1{cache_source="host",model_name="$2"} 9000.0',
    );
    // One unlabelled series (an older release) beside a labelled one: the unlabelled is the device's.
    expect(extractSample(text, 'sglang').counters.counters.prefixHits).toBe(61_000);
  });

  it('TensorRT-LLM: request_success_total, per-output-token histogram, reused and missed KV blocks', () => {
    expect(counters('trtllm.prom').counters).toEqual({
      promptTokens: 210_000,
      generationTokens: 52_000,
      requests: 412,
      ttft: { sumMs: 19_200, count: 412 },
      queue: { sumMs: 8_240, count: 412 },
      itl: { sumMs: 6_180, count: 412 },
      prefixHits: 1_500,
      prefixQueries: 6_000,
    });
  });

  it('Triton: tokens and requests from the TensorRT-LLM backend token-length histograms, nothing else', () => {
    expect(counters('triton.prom').counters).toEqual({ promptTokens: 109_568, generationTokens: 27_392, requests: 214 });
  });

  it('a NaN, infinite or negative counter is left out and reported, and the gauges still map', () => {
    const text = fixture('vllm-v0.10.prom')
      .replace(/(vllm:generation_tokens_total\{[^}]*\}) 8125.0/, '$1 NaN')
      .replace(/(vllm:request_queue_time_seconds_count\{[^}]*\}) 125.0/, '$1 -1')
      .replace(/(vllm:prefix_cache_hits_total\{[^}]*\}) 1.2e\+05/, '$1 +Inf');
    const { sample, counters: reading } = extractSample(text, 'vllm');
    expect(sample.waitingRequests).toBe(2);
    expect(reading.counters.generationTokens).toBeUndefined();
    expect(reading.counters.queue).toBeUndefined();
    expect(reading.counters.prefixHits).toBeUndefined();
    expect(reading.counters.promptTokens).toBe(340_000);
    expect(reading.invalid).toEqual([
      'vllm:generation_tokens_total',
      'vllm:request_queue_time_seconds_count',
      'vllm:prefix_cache_hits_total',
    ]);
  });
});

describe('malformed expositions are rejected', () => {
  const vllm = fixture('vllm-v0.10.prom');
  const cases: [string, string, 'parse' | 'invalid' | 'unknown-engine'][] = [
    ['a value that is not a number', vllm.replace(/(vllm:num_requests_waiting\{[^}]*\}) 2.0/, '$1 two'), 'parse'],
    ['a sample line with no value', vllm.replace(/(vllm:num_requests_running\{[^}]*\}) 5.0/, '$1'), 'parse'],
    ['an unterminated label set', vllm.replace(/vllm:num_requests_running\{[^\n]*/, 'vllm:num_requests_running{engine="0" 5'), 'parse'],
    [
      'a TYPE line with extra tokens',
      vllm.replace('# TYPE vllm:num_requests_waiting gauge', '# TYPE vllm:num_requests_waiting gauge extra'),
      'parse',
    ],
    ['the waiting gauge missing', vllm.replace(/vllm:num_requests_waiting\{[^\n]*\n/, ''), 'invalid'],
    ['no KV gauge under either name', vllm.replace(/vllm:(kv|gpu)_cache_usage_perc\{[^\n]*\n/g, ''), 'invalid'],
    ['KV use above 1', vllm.replace(/(vllm:kv_cache_usage_perc\{[^}]*\}) 0.4375/, '$1 1.5'), 'invalid'],
    ['KV use NaN', vllm.replace(/(vllm:kv_cache_usage_perc\{[^}]*\}) 0.4375/, '$1 NaN'), 'invalid'],
    ['a negative queue', vllm.replace(/(vllm:num_requests_waiting\{[^}]*\}) 2.0/, '$1 -3'), 'invalid'],
    ['an infinite running count', vllm.replace(/(vllm:num_requests_running\{[^}]*\}) 5.0/, '$1 +Inf'), 'invalid'],
    [
      'a non-integer max_lora',
      vllm.replace('max_lora="2",running_lora_adapters="sql-lora,chat-lora"', 'max_lora="two",running_lora_adapters="sql-lora,chat-lora"'),
      'invalid',
    ],
    ['an HTML error page', '<html><body>502 Bad Gateway</body></html>', 'unknown-engine'],
    ['an empty body', '', 'unknown-engine'],
  ];
  for (const [what, text, reason] of cases) {
    it(`${what} → ${reason}`, () => {
      let caught: unknown;
      try {
        extractSample(text, undefined);
      } catch (error) {
        caught = error;
      }
      expect(caught).toBeInstanceOf(ExtractError);
      expect((caught as ExtractError).reason).toBe(reason);
    });
  }

  it('an engine named explicitly whose metrics are absent is invalid, not guessed', () => {
    expect(() => extractSample(fixture('sglang.prom'), 'vllm')).toThrow(/missing vllm:num_requests_waiting/);
  });

  it('the parser wrapper rejects garbage values the library lets through', () => {
    expect(() => parseExposition('foo{a="b"} 1x\n')).toThrow(ExpositionError);
    expect(parseExposition('foo 1e3 1700000000000\n').get('foo')).toEqual([{ labels: {}, value: 1000, timestampMs: 1700000000000 }]);
  });

  it('mapExposition reports the missing series by name', () => {
    expect(() => mapExposition('triton', parseExposition('nv_trt_llm_request_metrics{request_type="waiting"} 1\n'))).toThrow(
      /nv_trt_llm_request_metrics\{request_type="scheduled"\}/,
    );
  });
});

describe('scrape budgets (bad inputs cost bounded memory and CPU)', () => {
  const vllm = fixture('vllm-v0.10.prom');

  it('reading in arbitrary pieces gives the same sample as reading the whole text', () => {
    const whole = extractSample(vllm, undefined);
    fc.assert(
      fc.property(fc.array(fc.integer({ min: 0, max: vllm.length }), { maxLength: 20 }), (cuts) => {
        const bytes = Buffer.from(vllm, 'utf8');
        const points = [...new Set(cuts)].sort((a, b) => a - b);
        const reader = new ScrapeReader(undefined);
        let from = 0;
        for (const at of [...points, bytes.length]) {
          reader.push(bytes.subarray(from, at));
          from = at;
        }
        expect(reader.finish()).toEqual(whole);
      }),
    );
  });

  it('keeps only the wanted families, whatever else the exposition holds', () => {
    const filter = new FamilyFilter(new Set(['a', 'b_total']));
    filter.push('# HELP a help\n# TYPE a gauge\na{x="1"} 1\nc 3\n  b_total 2\r\n# TYPE c gauge\nab 4\na');
    filter.push(' 5');
    expect(filter.finish()).toBe('# TYPE a gauge\na{x="1"} 1\nb_total 2\na 5\n');
  });

  const limits = { ...DEFAULT_SCRAPE_LIMITS, maxLineLength: 100, maxKeptLength: 200, maxKeptLines: 5 };
  const budgetReason = (work: () => unknown): string | undefined => {
    try {
      work();
    } catch (error) {
      return error instanceof BudgetError ? error.reason : `not a budget error: ${String(error)}`;
    }
    return undefined;
  };

  it('a line longer than the limit fails as too-large before its end arrives', () => {
    const filter = new FamilyFilter(new Set(['a']), limits);
    expect(budgetReason(() => filter.push(`junk ${'x'.repeat(200)}`))).toBe('too-large');
  });

  it('too many wanted lines, or too many characters of them, fail as too-large', () => {
    const lines = Array.from({ length: 6 }, (_, i) => `a{i="${i}"} 1\n`).join('');
    expect(budgetReason(() => new FamilyFilter(new Set(['a']), limits).push(lines))).toBe('too-large');
    const long = `a{x="${'y'.repeat(90)}"} 1\n`.repeat(3);
    expect(budgetReason(() => new FamilyFilter(new Set(['a']), limits).push(long))).toBe('too-large');
    // Unwanted lines cost nothing kept.
    expect(budgetReason(() => new FamilyFilter(new Set(['a']), limits).push(`junk 1\n`.repeat(10_000)))).toBeUndefined();
  });

  it('a scrape over its CPU budget fails as too-slow', () => {
    const reader = new ScrapeReader('vllm', { ...DEFAULT_SCRAPE_LIMITS, cpuBudgetMs: 1e-6 });
    expect(
      budgetReason(() => {
        reader.push(Buffer.from(vllm.repeat(20)));
        reader.finish();
      }),
    ).toBe('too-slow');
  });
});
