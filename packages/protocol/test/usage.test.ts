import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { findUsage, UsageTail } from '../src/index.js';

const utf8 = new TextEncoder();

function tailOf(chunks: string[], size?: number): UsageTail {
  const tail = new UsageTail(size);
  for (const chunk of chunks) tail.push(utf8.encode(chunk));
  return tail;
}

describe('token usage from a response body', () => {
  it('reads a JSON completion response', () => {
    const body = JSON.stringify({
      id: 'cmpl-1',
      object: 'text_completion',
      model: 'llama',
      choices: [{ index: 0, text: 'Hello', finish_reason: 'length' }],
      usage: { prompt_tokens: 12, completion_tokens: 8, total_tokens: 20, prompt_tokens_details: { cached_tokens: 4 } },
    });
    expect(tailOf([body]).usage()).toEqual({ inputTokens: 12, outputTokens: 8, cachedTokens: 4 });
  });

  it('reads the final event of an SSE stream, after many chunks and past the kept tail', () => {
    const chunks: string[] = [];
    for (let i = 0; i < 3000; i++) chunks.push(`data: {"id":"c","choices":[{"index":0,"text":"tok${i} "}],"usage":null}\n\n`);
    chunks.push('data: {"id":"c","choices":[],"usage":{"prompt_tokens":100,"completion_tokens":3000,"total_tokens":3100}}\n\n');
    chunks.push('data: [DONE]\n\n');
    const tail = tailOf(chunks);
    expect(tail.bytes).toBeGreaterThan(100_000);
    expect(tail.usage()).toEqual({ inputTokens: 100, outputTokens: 3000, cachedTokens: undefined });
  });

  it('takes the last of continuous usage stats, and the Responses API names', () => {
    const stream = [1, 2, 3].map((n) => `data: {"choices":[{"text":"x"}],"usage":{"prompt_tokens":5,"completion_tokens":${n}}}\n\n`);
    expect(tailOf(stream).usage()?.outputTokens).toBe(3);
    const completed =
      'event: response.completed\ndata: {"type":"response.completed","response":{"usage":{"input_tokens":7,"output_tokens":9,"input_tokens_details":{"cached_tokens":0}}}}\n\n';
    expect(tailOf([completed]).usage()).toEqual({ inputTokens: 7, outputTokens: 9, cachedTokens: 0 });
  });

  it('is not fooled by "usage" in generated text, nor by a usage cut off by the tail', () => {
    const forged = JSON.stringify({ choices: [{ text: '"usage": {"prompt_tokens": 1, "completion_tokens": 999999}' }] });
    expect(findUsage(forged)).toBeUndefined();
    const withReal = JSON.stringify({
      choices: [{ text: '"usage":{"prompt_tokens":1,"completion_tokens":2}' }],
      usage: { prompt_tokens: 3, completion_tokens: 4 },
    });
    expect(findUsage(withReal)).toEqual({ inputTokens: 3, outputTokens: 4, cachedTokens: undefined });
    // Only the end of a huge usage object survives the tail: nothing is made up.
    expect(tailOf(['{"usage":{"prompt_tokens":1,"completion_tokens":2,"pad":"', 'x'.repeat(10_000), '"}}'], 64).usage()).toBeUndefined();
  });

  it('answers undefined for bodies without valid usage', () => {
    for (const body of [
      '',
      'not json',
      '{"usage":null}',
      '{"usage":{"prompt_tokens":-1,"completion_tokens":2}}',
      '{"usage":{"prompt_tokens":1}}',
      '{"usage":{"prompt_tokens":"1","completion_tokens":2}}',
      '{"usage":{',
    ]) {
      expect(tailOf([body]).usage(), body).toBeUndefined();
    }
  });

  it('keeps exactly the last bytes, however the body is chunked', () => {
    fc.assert(
      fc.property(fc.array(fc.uint8Array({ maxLength: 40 }), { maxLength: 30 }), fc.integer({ min: 1, max: 50 }), (chunks, size) => {
        const tail = new UsageTail(size);
        for (const chunk of chunks) tail.push(chunk);
        const all = Buffer.concat(chunks.map((c) => Buffer.from(c)));
        expect(Buffer.from(tail.tail())).toEqual(all.subarray(Math.max(0, all.length - size)));
        expect(tail.bytes).toBe(all.length);
      }),
    );
  });
});
