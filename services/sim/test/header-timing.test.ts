// When the simulator's response headers leave, as vLLM's do: a streamed completion's at once,
// before the first token (vLLM's OpenAI server returns its StreamingResponse, whose headers are
// sent before the generator yields); a non-streamed one's with the whole body at the end. A
// gateway that learns a request "started" from the response headers depends on this.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startSim } from '../src/index.js';
import type { SimServer } from '../src/index.js';
import { post } from './helpers.js';

const MODEL = 'test-model';
let sim: SimServer;

beforeAll(async () => {
  // 20x slower than the test preset: a long prompt's prefill takes a few hundred ms.
  sim = await startSim({ port: 0, preset: 'test', timeScale: 0.05, model: MODEL, logLevel: 'silent' });
});
afterAll(async () => {
  await sim.close();
});

describe('spillway-sim: response header timing', () => {
  it('streams: headers arrive before the first token is generated', async () => {
    const res = await post(`${sim.url}/v1/completions`, { model: MODEL, prompt: 'p'.repeat(2_000), max_tokens: 3, stream: true });
    const tokensAtHeaders = sim.engine.stats().generationTokens;
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toBe('text/event-stream');
    expect(tokensAtHeaders).toBe(0);
    expect(await res.text()).toContain('[DONE]');
    expect(sim.engine.stats().generationTokens).toBe(3);
  });

  it('does not stream: headers arrive with the finished body', async () => {
    const before = sim.engine.stats().generationTokens;
    const res = await post(`${sim.url}/v1/completions`, { model: MODEL, prompt: 'p'.repeat(200), max_tokens: 3 });
    expect(sim.engine.stats().generationTokens - before).toBe(3);
    expect(((await res.json()) as { usage: { completion_tokens: number } }).usage.completion_tokens).toBe(3);
  });
});
