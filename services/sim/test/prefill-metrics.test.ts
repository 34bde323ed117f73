import { afterEach, describe, expect, it } from 'vitest';
import { startSim } from '../src/index.js';
import type { SimServer, StartSimOptions } from '../src/index.js';
import { post, scrape } from './helpers.js';

const MODEL = 'm';
const sims: SimServer[] = [];
async function sim(options: StartSimOptions): Promise<SimServer> {
  const s = await startSim({ port: 0, model: MODEL, preset: 'test', engineMetrics: 'vllm', logLevel: 'silent', ...options });
  sims.push(s);
  return s;
}
afterEach(async () => {
  await Promise.all(sims.splice(0).map((s) => s.close()));
});

/** The summed `_sum` and `_count` of a histogram in the raw exposition (the parser in helpers drops them when labelled). */
function moments(text: string, name: string): { sum: number; count: number } {
  const total = (suffix: string): number => {
    const lines = text.split('\n').filter((l) => l.startsWith(`${name}_${suffix}{`) || l.startsWith(`${name}_${suffix} `));
    if (lines.length === 0) throw new Error(`no ${name}_${suffix}`);
    return lines.reduce((sum, l) => sum + Number(l.slice(l.lastIndexOf(' ') + 1)), 0);
  };
  return { sum: total('sum'), count: total('count') };
}

/** A histogram's bucket bounds, in order (`le` as numbers; the parser keys them by their text). */
const bounds = (buckets: Record<string, string> | undefined): number[] =>
  Object.keys(buckets ?? {})
    .map((le) => (le === '+Inf' ? Number.POSITIVE_INFINITY : Number(le)))
    .sort((a, b) => a - b);

const complete = (url: string, prompt: string, maxTokens: number) =>
  post(`${url}/v1/completions`, { model: MODEL, prompt, max_tokens: maxTokens }).then((r) => r.json());

describe('spillway-sim: prefill time per request in /metrics', () => {
  it('vLLM: request_prefill_time_seconds with vLLM’s buckets, one observation per request, the engine’s own sums', async () => {
    // One request at a time on each of two ranks: the later ones queue, so prefill time is not TTFT.
    const s = await sim({ timeScale: 2, maxNumSeqs: 1, dataParallelSize: 2, engineMode: 'closed-form' });
    await Promise.all([1, 2, 3, 4, 5, 6].map((i) => complete(s.url, `request ${i} `.repeat(40), 10)));
    const text = await (await fetch(`${s.url}/metrics`)).text();
    expect(text).toContain('# TYPE vllm:request_prefill_time_seconds histogram');
    expect(text).toContain('# HELP vllm:request_prefill_time_seconds Histogram of time spent in PREFILL phase for request.');
    const m = await scrape(s.url);
    const family = m.families.get('vllm:request_prefill_time_seconds');
    expect(family?.type).toBe('HISTOGRAM');
    // One series per data-parallel rank, labelled as vLLM labels them.
    for (const rank of ['0', '1'])
      expect(text).toMatch(new RegExp(`^vllm:request_prefill_time_seconds_count\\{[^}]*engine="${rank}"`, 'm'));
    // vLLM's request_latency_buckets (vllm/v1/metrics/loggers.py), as for its e2e, queue and decode histograms.
    expect(bounds(family?.metrics[0]?.buckets)).toEqual([
      0.3,
      0.5,
      0.8,
      1,
      1.5,
      2,
      2.5,
      5,
      10,
      15,
      20,
      30,
      40,
      50,
      60,
      120,
      240,
      480,
      960,
      1920,
      7680,
      Number.POSITIVE_INFINITY,
    ]);

    const stats = s.engines.map((e) => e.stats());
    const prefill = moments(text, 'vllm:request_prefill_time_seconds');
    expect(prefill.count).toBe(6);
    expect(prefill.count).toBe(stats.reduce((n, st) => n + st.prefillCount, 0));
    expect(prefill.sum * 1000).toBeCloseTo(
      stats.reduce((ms, st) => ms + st.prefillSumMs, 0),
      6,
    );
    // In model time: the test preset's prefill of ~100 tokens takes ~20 ms, never less than its 10 ms overhead.
    expect(prefill.sum / prefill.count).toBeGreaterThan(0.01);
    expect(prefill.sum / prefill.count).toBeLessThan(0.3);
    // TTFT = queue + prefill, and requests did queue.
    const ttft = moments(text, 'vllm:time_to_first_token_seconds');
    const queue = moments(text, 'vllm:request_queue_time_seconds');
    expect(queue.sum).toBeGreaterThan(0);
    expect(ttft.sum).toBeCloseTo(queue.sum + prefill.sum, 9);
  });

  it('TensorRT-LLM names: trtllm_request_prefill_time_seconds with its buckets; SGLang exports none', async () => {
    const t = await sim({ timeScale: 200, engineMetrics: 'trtllm' });
    await complete(t.url, 'q'.repeat(400), 2);
    const trt = await scrape(t.url);
    const family = trt.families.get('trtllm_request_prefill_time_seconds');
    expect(bounds(family?.metrics[0]?.buckets)).toEqual([
      0.001,
      0.005,
      0.01,
      0.025,
      0.05,
      0.1,
      0.25,
      0.5,
      1,
      2.5,
      5,
      10,
      20,
      40,
      80,
      160,
      640,
      2560,
      Number.POSITIVE_INFINITY,
    ]);
    expect(trt.value('trtllm_request_prefill_time_seconds')).toBe(1);
    expect(trt.families.has('vllm:request_prefill_time_seconds')).toBe(false);

    const g = await sim({ timeScale: 200, engineMetrics: 'sglang' });
    await complete(g.url, 'q'.repeat(400), 2);
    const sg = await scrape(g.url);
    expect([...sg.families.keys()].filter((k) => k.includes('prefill_time'))).toEqual([]);
  });
});
