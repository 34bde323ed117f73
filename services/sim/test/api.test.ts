import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startSim } from '../src/index.js';
import type { SimServer } from '../src/index.js';
import { post, scrape, sseData } from './helpers.js';

const MODEL = 'meta-llama/Llama-3.1-8B-Instruct';
let sim: SimServer;

beforeAll(async () => {
  sim = await startSim({ port: 0, preset: 'test', numBlocks: 512, timeScale: 200, lora: ['sql-lora', 'chat-lora'], logLevel: 'silent' });
});
afterAll(async () => {
  await sim.close();
});

const ErrorShape = {
  error: { message: expect.any(String), type: expect.any(String), code: expect.any(Number) },
};

describe('spillway-sim: OpenAI API', () => {
  it('answers a non-streaming completion with usage', async () => {
    const res = await post(`${sim.url}/v1/completions`, { model: MODEL, prompt: 'a'.repeat(400), max_tokens: 7, ignore_eos: true });
    expect(res.status).toBe(200);
    const body = (await res.json()) as {
      object: string;
      model: string;
      choices: { text: string; finish_reason: string }[];
      usage: unknown;
    };
    expect(body.object).toBe('text_completion');
    expect(body.model).toBe(MODEL);
    expect(body.choices[0]?.finish_reason).toBe('length');
    expect(body.choices[0]?.text.length).toBeGreaterThan(0);
    expect(body.usage).toEqual({
      prompt_tokens: 100,
      completion_tokens: 7,
      total_tokens: 107,
      prompt_tokens_details: { cached_tokens: 0 },
    });
  });

  it('streams a chat completion as SSE ending with [DONE], with a usage chunk on request', async () => {
    const res = await post(`${sim.url}/v1/chat/completions`, {
      model: MODEL,
      messages: [
        { role: 'system', content: 'be brief' },
        { role: 'user', content: [{ type: 'text', text: 'hello there' }] },
      ],
      max_completion_tokens: 5,
      max_tokens: 99,
      stream: true,
      stream_options: { include_usage: true },
    });
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toBe('text/event-stream');
    const events = sseData(await res.text());
    expect(events.at(-1)).toBe('[DONE]');
    const chunks = events.slice(0, -1).map(
      (e) =>
        JSON.parse(e) as {
          object: string;
          choices: { delta: { role?: string; content: string }; finish_reason: string | null }[];
          usage?: { completion_tokens: number };
        },
    );
    const tokens = chunks.filter((c) => c.choices.length > 0);
    expect(tokens).toHaveLength(5);
    expect(tokens[0]?.choices[0]?.delta.role).toBe('assistant');
    expect(tokens.map((c) => c.choices[0]?.finish_reason)).toEqual([null, null, null, null, 'length']);
    expect(chunks.every((c) => c.object === 'chat.completion.chunk')).toBe(true);
    expect(chunks.at(-1)?.usage?.completion_tokens).toBe(5);
  });

  it('streams without a usage chunk unless asked', async () => {
    const res = await post(`${sim.url}/v1/completions`, { model: MODEL, prompt: ['one prompt'], max_tokens: 3, stream: true });
    const events = sseData(await res.text());
    expect(events).toHaveLength(4);
    expect(events.slice(0, 3).every((e) => !('usage' in (JSON.parse(e) as object)))).toBe(true);
  });

  it('reports cached prompt tokens for a repeated prefix', async () => {
    const prompt = 'The same long system prompt. '.repeat(30);
    const first = (await (await post(`${sim.url}/v1/completions`, { model: MODEL, prompt, max_tokens: 2 })).json()) as {
      usage: { prompt_tokens_details: { cached_tokens: number } };
    };
    const second = (await (
      await post(`${sim.url}/v1/completions`, { model: MODEL, prompt: `${prompt} and more`, max_tokens: 2 })
    ).json()) as { usage: { prompt_tokens_details: { cached_tokens: number } } };
    expect(first.usage.prompt_tokens_details.cached_tokens).toBe(0);
    expect(second.usage.prompt_tokens_details.cached_tokens).toBeGreaterThanOrEqual(16 * 13);
    // A LoRA adapter does not share the base model's cache.
    const lora = (await (await post(`${sim.url}/v1/completions`, { model: 'sql-lora', prompt, max_tokens: 2 })).json()) as {
      model: string;
      usage: { prompt_tokens_details: { cached_tokens: number } };
    };
    expect(lora.model).toBe('sql-lora');
    expect(lora.usage.prompt_tokens_details.cached_tokens).toBe(0);
    const m = await scrape(sim.url);
    expect(m.value('vllm:prefix_cache_hits_total')).toBe(second.usage.prompt_tokens_details.cached_tokens);
    expect(m.value('vllm:prefix_cache_queries_total')).toBeGreaterThan(m.value('vllm:prefix_cache_hits_total'));
  });

  it('accepts token-id prompts', async () => {
    const res = await post(`${sim.url}/v1/completions`, { model: MODEL, prompt: [1, 2, 3, 4, 5], max_tokens: 1 });
    expect(((await res.json()) as { usage: { prompt_tokens: number } }).usage.prompt_tokens).toBe(5);
  });

  it('lists the model and its LoRA adapters', async () => {
    const res = await fetch(`${sim.url}/v1/models`);
    const body = (await res.json()) as { object: string; data: { id: string; parent: string | null }[] };
    expect(body.object).toBe('list');
    expect(body.data.map((d) => [d.id, d.parent])).toEqual([
      [MODEL, null],
      ['sql-lora', MODEL],
      ['chat-lora', MODEL],
    ]);
  });

  it('answers /health', async () => {
    expect((await fetch(`${sim.url}/health`)).status).toBe(200);
  });
});

describe('spillway-sim: bad requests', () => {
  const cases: [string, string, unknown, number, RegExp][] = [
    ['invalid JSON', '/v1/completions', '{"model": ', 400, /invalid JSON/],
    ['missing model', '/v1/completions', { prompt: 'hi' }, 400, /model/],
    ['missing prompt', '/v1/completions', { model: MODEL }, 400, /prompt/],
    ['empty prompt', '/v1/completions', { model: MODEL, prompt: '' }, 400, /prompt/],
    ['missing messages', '/v1/chat/completions', { model: MODEL }, 400, /messages/],
    ['empty messages', '/v1/chat/completions', { model: MODEL, messages: [] }, 400, /messages/],
    ['zero max_tokens', '/v1/completions', { model: MODEL, prompt: 'hi', max_tokens: 0 }, 400, /max_tokens/],
    ['fractional max_tokens', '/v1/completions', { model: MODEL, prompt: 'hi', max_tokens: 1.5 }, 400, /max_tokens/],
    ['n > 1', '/v1/completions', { model: MODEL, prompt: 'hi', n: 2 }, 400, /\bn\b/],
    ['non-object body', '/v1/completions', '[1,2]', 400, /expected object/],
    ['unknown model', '/v1/completions', { model: 'gpt-7', prompt: 'hi' }, 404, /gpt-7/],
    ['prompt beyond the KV cache', '/v1/completions', { model: MODEL, prompt: 'x'.repeat(4 * 16 * 600) }, 400, /capacity/],
  ];
  it.each(cases)('%s', async (_name, path, body, status, message) => {
    const res = await post(`${sim.url}${path}`, body);
    expect(res.status).toBe(status);
    expect(res.headers.get('content-type')).toBe('application/json');
    const json = (await res.json()) as { error: { message: string; code: number } };
    expect(json).toMatchObject(ErrorShape);
    expect(json.error.code).toBe(status);
    expect(json.error.message).toMatch(message);
  });

  it('rejects unknown routes and wrong methods', async () => {
    expect((await fetch(`${sim.url}/v2/nothing`)).status).toBe(404);
    const wrong = await fetch(`${sim.url}/v1/completions`);
    expect(wrong.status).toBe(405);
    expect(await wrong.json()).toMatchObject(ErrorShape);
  });
});
