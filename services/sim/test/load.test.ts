import { afterEach, describe, expect, it } from 'vitest';
import { startSim } from '../src/index.js';
import type { SimServer, StartSimOptions } from '../src/index.js';
import { eventually, post, scrape } from './helpers.js';

const MODEL = 'm';
const sims: SimServer[] = [];
// These expectations are exact closed-form timings (a prefill costs at least its overhead, admission is immediate).
async function sim(options: StartSimOptions): Promise<SimServer> {
  const s = await startSim({ port: 0, model: MODEL, preset: 'test', engineMode: 'closed-form', logLevel: 'silent', ...options });
  sims.push(s);
  return s;
}
afterEach(async () => {
  await Promise.all(sims.splice(0).map((s) => s.close()));
});

/** Open `n` long streaming requests; resolves once every one has its response headers. */
async function openStreams(url: string, n: number, body: object = {}): Promise<{ responses: Response[]; abort: () => void }> {
  const ctl = new AbortController();
  const responses = await Promise.all(
    Array.from({ length: n }, () =>
      post(
        `${url}/v1/completions`,
        { model: MODEL, prompt: 'p'.repeat(200), max_tokens: 2000, stream: true, ...body },
        { signal: ctl.signal },
      ),
    ),
  );
  expect(responses.map((r) => r.status)).toEqual(responses.map(() => 200));
  return { responses, abort: () => ctl.abort() };
}

describe('spillway-sim: metrics follow load', () => {
  it('waiting, running and KV usage rise under load and fall when clients go away', async () => {
    // 2000 tokens at ~5-10 ms each: 10 s of model time or more, 5 s of real time at scale 2;
    // the streams are aborted long before that.
    const s = await sim({ timeScale: 2, maxNumSeqs: 4, numBlocks: 1000, lora: ['sql-lora'] });
    const idle = await scrape(s.url);
    expect(idle.value('vllm:num_requests_running', { model_name: MODEL })).toBe(0);
    expect(idle.value('vllm:kv_cache_usage_perc')).toBe(0);
    expect(idle.labels('vllm:cache_config_info')).toMatchObject({ block_size: '16', num_gpu_blocks: '1000', engine: '0' });

    const base = await openStreams(s.url, 5);
    const lora = await openStreams(s.url, 1, { model: 'sql-lora' });
    const busy = await scrape(s.url);
    expect(busy.value('vllm:num_requests_running')).toBe(4);
    expect(busy.value('vllm:num_requests_waiting')).toBe(2);
    expect(busy.value('vllm:kv_cache_usage_perc')).toBeGreaterThan(0);
    // vLLM's current names only: the deprecated gpu_cache_usage_perc is gone, as in vLLM.
    expect(busy.families.has('vllm:gpu_cache_usage_perc')).toBe(false);
    const info = busy.labels('vllm:lora_requests_info');
    expect(info.max_lora).toBe('2');
    expect(`${info.running_lora_adapters},${info.waiting_lora_adapters}`).toContain('sql-lora');
    expect(busy.value('vllm:lora_requests_info')).toBeGreaterThan(1.7e9);

    // Disconnecting mid-stream frees the batch slots and KV blocks: nothing leaks.
    base.abort();
    lora.abort();
    await eventually(async () => {
      const after = await scrape(s.url);
      expect(after.value('vllm:num_requests_running')).toBe(0);
      expect(after.value('vllm:num_requests_waiting')).toBe(0);
      expect(after.value('vllm:kv_cache_usage_perc')).toBe(0);
    });
    expect(s.engine.stats()).toMatchObject({ cancelled: 6, usedBlocks: 0 });
  });

  it('records TTFT, inter-token latency and successes in model time', async () => {
    const s = await sim({ timeScale: 500 });
    await Promise.all(
      [1, 2, 3].map(() => post(`${s.url}/v1/completions`, { model: MODEL, prompt: 'q'.repeat(400), max_tokens: 4 }).then((r) => r.json())),
    );
    const m = await scrape(s.url);
    expect(m.value('vllm:time_to_first_token_seconds')).toBe(3);
    expect(m.value('vllm:inter_token_latency_seconds')).toBe(9);
    // The per-request mean TPOT (vLLM's request_time_per_output_token_seconds), one per request.
    expect(m.value('vllm:request_time_per_output_token_seconds')).toBe(3);
    expect(m.families.has('vllm:time_per_output_token_seconds')).toBe(false);
    expect(m.value('vllm:e2e_request_latency_seconds')).toBe(3);
    expect(m.value('vllm:request_success_total', { finished_reason: 'length' })).toBe(3);
    expect(m.value('vllm:generation_tokens_total')).toBe(12);
    expect(m.value('vllm:prompt_tokens_total')).toBe(300);
    // Model time, not wall time: the test preset's prefill takes at least 20 ms of model time here,
    // which at time scale 500 would be 0.04 ms of wall time.
    const ttft = m.families.get('vllm:time_to_first_token_seconds')?.metrics[0];
    expect(ttft?.buckets?.['0.01']).toBe('0');
  });

  it('answers 429 when the waiting queue is full', async () => {
    const s = await sim({ timeScale: 2, maxNumSeqs: 1, maxWaiting: 1, numBlocks: 1000 });
    const open = await openStreams(s.url, 2);
    const rejected = await post(`${s.url}/v1/completions`, { model: MODEL, prompt: 'hi', max_tokens: 2 });
    expect(rejected.status).toBe(429);
    expect(await rejected.json()).toMatchObject({ error: { type: 'rate_limit_error', code: 429 } });
    open.abort();
    expect((await scrape(s.url)).value('vllm:num_preemptions_total')).toBe(0);
  });

  it('exposes SGLang names with --engine-metrics sglang', async () => {
    const s = await sim({ timeScale: 2, engineMetrics: 'sglang', maxNumSeqs: 2, numBlocks: 1000 });
    const open = await openStreams(s.url, 3);
    const m = await scrape(s.url);
    expect(m.value('sglang:num_running_reqs', { model_name: MODEL })).toBe(2);
    expect(m.value('sglang:num_queue_reqs')).toBe(1);
    expect(m.value('sglang:token_usage')).toBeGreaterThan(0);
    expect(m.labels('sglang:cache_config_info')).toMatchObject({ page_size: '16', num_pages: '1000' });
    expect([...m.families.keys()].some((k) => k.startsWith('vllm:'))).toBe(false);
    open.abort();
    // The counters behind service rates, under SGLang's names.
    await post(`${s.url}/v1/completions`, { model: MODEL, prompt: 'q'.repeat(400), max_tokens: 4 }).then((r) => r.json());
    const done = await scrape(s.url);
    expect(done.value('sglang:num_requests_total')).toBe(1);
    expect(done.value('sglang:prompt_tokens_total')).toBeGreaterThan(0);
    expect(done.value('sglang:generation_tokens_total')).toBeGreaterThanOrEqual(4);
    expect(done.value('sglang:cached_tokens_total', { cache_source: 'device' })).toBeGreaterThanOrEqual(0);
    expect(done.value('sglang:queue_time_seconds')).toBeGreaterThanOrEqual(1);
    expect(done.value('sglang:inter_token_latency_seconds')).toBeGreaterThanOrEqual(3);
  });

  it('exposes TensorRT-LLM names with --engine-metrics trtllm', async () => {
    const s = await sim({ timeScale: 2, engineMetrics: 'trtllm', numBlocks: 1000 });
    const open = await openStreams(s.url, 1);
    const m = await scrape(s.url);
    expect(m.value('trtllm_num_requests_running')).toBe(1);
    expect(m.value('trtllm_num_requests_waiting')).toBe(0);
    expect(m.value('trtllm_kv_cache_utilization')).toBeGreaterThan(0);
    expect(m.value('trtllm_kv_cache_tokens_per_block')).toBe(16);
    expect(m.value('trtllm_kv_cache_max_blocks')).toBe(1000);
    open.abort();
    await post(`${s.url}/v1/completions`, { model: MODEL, prompt: 'q'.repeat(400), max_tokens: 4 }).then((r) => r.json());
    const done = await scrape(s.url);
    expect(done.value('trtllm_request_success_total', { finished_reason: 'length' })).toBe(1);
    expect(done.value('trtllm_request_queue_time_seconds')).toBeGreaterThanOrEqual(1);
    expect(done.value('trtllm_time_per_output_token_seconds')).toBeGreaterThanOrEqual(3);
    // Prefix reuse in whole KV blocks: the second identical prompt finds the first one's blocks.
    await post(`${s.url}/v1/completions`, { model: MODEL, prompt: 'q'.repeat(400), max_tokens: 4 }).then((r) => r.json());
    const again = await scrape(s.url);
    expect(again.value('trtllm_kv_cache_reused_blocks_total')).toBeGreaterThan(0);
    expect(again.value('trtllm_kv_cache_missed_blocks_total')).toBeGreaterThan(0);
  });
});

describe('spillway-sim: failure injection', () => {
  it('fails a fraction of requests with 500 and can be switched at runtime', async () => {
    const s = await sim({ timeScale: 1000, errorRate: 1, admin: true });
    const failed = await post(`${s.url}/v1/completions`, { model: MODEL, prompt: 'hi', max_tokens: 1 });
    expect(failed.status).toBe(500);
    expect(await failed.json()).toMatchObject({ error: { type: 'server_error', code: 500 } });

    const patched = await post(`${s.url}/admin/fault`, { errorRate: 0.5 });
    expect(await patched.json()).toMatchObject({ errorRate: 0.5, stall: false });
    const statuses = await Promise.all(
      Array.from({ length: 40 }, () =>
        post(`${s.url}/v1/completions`, { model: MODEL, prompt: 'hi', max_tokens: 1 }).then(async (r) => (await r.arrayBuffer(), r.status)),
      ),
    );
    expect(statuses.filter((x) => x === 500).length).toBeGreaterThan(5);
    expect(statuses.filter((x) => x === 200).length).toBeGreaterThan(5);

    await post(`${s.url}/admin/fault`, { errorRate: 0 });
    expect((await post(`${s.url}/v1/completions`, { model: MODEL, prompt: 'hi', max_tokens: 1 })).status).toBe(200);
  });

  it('stalls: completions, /health and /metrics hang until un-stalled', async () => {
    const s = await sim({ timeScale: 1000, stall: true, admin: true });
    const outcome = (p: Promise<Response>): Promise<string> =>
      p.then(
        () => 'answered',
        () => 'dropped',
      );
    const hung = outcome(fetch(`${s.url}/health`));
    const hungCompletion = outcome(post(`${s.url}/v1/completions`, { model: MODEL, prompt: 'hi' }));
    await expect(fetch(`${s.url}/metrics`, { signal: AbortSignal.timeout(300) })).rejects.toThrow(/abort|timeout/i);
    expect(await (await fetch(`${s.url}/admin/fault`)).json()).toMatchObject({ stall: true });
    await post(`${s.url}/admin/fault`, { stall: false });
    expect((await fetch(`${s.url}/health`)).status).toBe(200);
    // Requests accepted while stalled are never answered; closing the server drops them.
    await s.close();
    expect(await hung).toBe('dropped');
    expect(await hungCompletion).toBe('dropped');
  });

  it('starts stalling after --stall-after-ms', async () => {
    const s = await sim({ timeScale: 1000, stallAfterMs: 100, admin: true });
    expect((await fetch(`${s.url}/health`)).status).toBe(200);
    await eventually(async () =>
      expect((await fetch(`${s.url}/admin/fault`).then((r) => r.json())) as object).toMatchObject({ stall: true }),
    );
    await expect(fetch(`${s.url}/health`, { signal: AbortSignal.timeout(200) })).rejects.toThrow();
  });

  it('crash-after-ms kills the server', async () => {
    let crashed = false;
    const s = await sim({ timeScale: 1000, admin: true });
    await post(`${s.url}/admin/fault`, { crashAfterMs: 50 });
    // In-process the default crash closes the server; the binary exits instead (see bin.test.ts).
    await eventually(async () => {
      await expect(fetch(`${s.url}/health`)).rejects.toThrow();
      crashed = true;
    });
    expect(crashed).toBe(true);
  });

  it('serves /admin/fault only with --admin: a 404 otherwise, and nothing changes', async () => {
    const s = await sim({ timeScale: 1000 });
    for (const res of [await fetch(`${s.url}/admin/fault`), await post(`${s.url}/admin/fault`, { stall: true, errorRate: 1 })]) {
      expect(res.status).toBe(404);
      expect(await res.json()).toMatchObject({ error: { code: 404 } });
    }
    expect(s.faults.state()).toMatchObject({ stall: false, errorRate: 0 });
    expect((await post(`${s.url}/v1/completions`, { model: MODEL, prompt: 'hi', max_tokens: 1 })).status).toBe(200);
  });

  it('rejects bad fault patches', async () => {
    const s = await sim({ timeScale: 1000, admin: true });
    for (const bad of [{ errorRate: 2 }, { stall: 'yes' }, { crashAfterMs: -1 }]) {
      const res = await post(`${s.url}/admin/fault`, bad);
      expect(res.status).toBe(400);
      expect(await res.json()).toMatchObject({ error: { code: 400 } });
    }
    expect((await post(`${s.url}/admin/fault`, '{bad')).status).toBe(400);
    expect((await fetch(`${s.url}/admin/fault`, { method: 'DELETE' })).status).toBe(405);
  });
});
