import { describe, expect, it } from 'vitest';
import { BodyAccumulator, DEFAULT_MAX_BODY_BYTES, apiKindForPath, parseInferenceBody } from '@spillway/protocol';
import type { BodyErrorKind } from '@spillway/protocol';

const bytes = (text: string): Uint8Array => new TextEncoder().encode(text);
const json = (value: unknown): Uint8Array => bytes(JSON.stringify(value));

describe('BodyAccumulator', () => {
  it('joins chunks in order and returns a single chunk without copying', () => {
    const acc = new BodyAccumulator(100);
    const only = bytes('{"a":1}');
    acc.push(only);
    expect(acc.take()).toBe(only);

    const many = new BodyAccumulator(100);
    for (const part of ['{"mo', 'del":', '', '"m"}']) expect(many.push(bytes(part))).toBe(true);
    expect(new TextDecoder().decode(many.take())).toBe('{"model":"m"}');
    expect(many.size).toBe(13);
    expect(new BodyAccumulator().take()).toEqual(new Uint8Array(0));
  });

  it('accepts exactly the limit and rejects one byte more', () => {
    const exact = new BodyAccumulator(8);
    expect(exact.push(new Uint8Array(5))).toBe(true);
    expect(exact.push(new Uint8Array(3))).toBe(true);
    expect(exact.take()).toHaveLength(8);

    const over = new BodyAccumulator(8);
    over.push(new Uint8Array(5));
    expect(over.push(new Uint8Array(4))).toBe(false);
    expect(over.push(new Uint8Array(1))).toBe(false);
    expect(over.overLimit).toBe(true);
    expect(over.size).toBe(10);
    expect(() => over.take()).toThrow(RangeError);
  });

  it('rejects a 10 MB body at the default limit', () => {
    const acc = new BodyAccumulator();
    expect(acc.limit).toBe(DEFAULT_MAX_BODY_BYTES);
    const chunk = new Uint8Array(16_384);
    let accepted = true;
    for (let sent = 0; sent < 10_000_000 && accepted; sent += chunk.length) accepted = acc.push(chunk);
    expect(accepted).toBe(false);
    expect(acc.overLimit).toBe(true);
  });

  it('rejects a bad limit', () => {
    expect(() => new BodyAccumulator(-1)).toThrow(RangeError);
    expect(() => new BodyAccumulator(Number.NaN)).toThrow(RangeError);
  });
});

describe('apiKindForPath', () => {
  it.each([
    ['/v1/completions', 'completions'],
    ['/v1/chat/completions', 'chat'],
    ['/v1/chat/completions?x=1', 'chat'],
    ['/openai/v1/responses/', 'responses'],
    ['/v1/embeddings', 'embeddings'],
    ['/v1/models', undefined],
    [undefined, undefined],
  ])('%s -> %s', (path, kind) => {
    expect(apiKindForPath(path)).toBe(kind);
  });
});

describe('parseInferenceBody', () => {
  it('completions: prompt string or array', () => {
    const single = parseInferenceBody(json({ model: 'llama', prompt: 'Hello', stream: true }), '/v1/completions');
    expect(single).toMatchObject({ ok: true, body: { api: 'completions', model: 'llama', prompt: 'Hello', stream: true } });
    const list = parseInferenceBody(json({ model: 'llama', prompt: ['a', 'b'] }), '/v1/completions');
    expect(list).toMatchObject({ ok: true, body: { prompt: 'a\nb', stream: false } });
    const tokens = parseInferenceBody(json({ model: 'llama', prompt: [[1, 2], [3]] }), '/v1/completions');
    expect(tokens).toMatchObject({ ok: true, body: { prompt: '1 2\n3' } });
  });

  it('chat completions: content as string, parts or null', () => {
    const result = parseInferenceBody(
      json({
        model: 'llama',
        messages: [
          { role: 'system', content: 'Be brief.' },
          {
            role: 'user',
            content: [
              { type: 'text', text: 'Look: ' },
              { type: 'image_url', image_url: { url: 'x' } },
              { type: 'text', text: 'this' },
            ],
          },
          { role: 'assistant', content: null, tool_calls: [] },
        ],
      }),
      '/v1/chat/completions',
    );
    expect(result).toMatchObject({ ok: true, body: { api: 'chat', prompt: 'system: Be brief.\nuser: Look: this\nassistant: \n' } });
  });

  it('chat completions: a growing conversation keeps its prompt as a prefix', () => {
    const turn1 = [{ role: 'user', content: 'hi' }];
    const turn2 = [...turn1, { role: 'assistant', content: 'hello' }, { role: 'user', content: 'more' }];
    const p1 = parseInferenceBody(json({ model: 'm', messages: turn1 }), '/v1/chat/completions');
    const p2 = parseInferenceBody(json({ model: 'm', messages: turn2 }), '/v1/chat/completions');
    if (!p1.ok || !p2.ok) throw new Error('both parse');
    expect(p2.body.prompt.startsWith(p1.body.prompt)).toBe(true);
  });

  it('responses: input string or items, instructions first', () => {
    expect(parseInferenceBody(json({ model: 'm', input: 'Tell me' }), '/v1/responses')).toMatchObject({
      ok: true,
      body: { api: 'responses', prompt: 'Tell me' },
    });
    const items = parseInferenceBody(
      json({
        model: 'm',
        instructions: 'Be kind.',
        input: [
          { role: 'user', content: [{ type: 'input_text', text: 'Q?' }] },
          { type: 'function_call_output', call_id: 'c', output: '42' },
        ],
      }),
      '/v1/responses',
    );
    expect(items).toMatchObject({ ok: true, body: { prompt: 'system: Be kind.\nuser: Q?\n: 42\n' } });
  });

  it('embeddings: input string or array', () => {
    expect(parseInferenceBody(json({ model: 'e5', input: 'text' }), '/v1/embeddings')).toMatchObject({
      ok: true,
      body: { api: 'embeddings', prompt: 'text' },
    });
    expect(parseInferenceBody(json({ model: 'e5', input: ['a', 'b'] }), '/v1/embeddings')).toMatchObject({
      ok: true,
      body: { prompt: 'a\nb' },
    });
  });

  it('other paths need only a model', () => {
    expect(parseInferenceBody(json({ model: 'm', anything: 1 }), '/v1/audio/x')).toMatchObject({
      ok: true,
      body: { api: undefined, prompt: '' },
    });
  });

  const bad: [string, Uint8Array, string, BodyErrorKind][] = [
    ['invalid JSON', bytes('{"model": "m",'), '/v1/completions', 'invalid-json'],
    ['plain text', bytes('no healthy upstream'), '/v1/completions', 'invalid-json'],
    ['empty body', bytes(''), '/v1/completions', 'invalid-json'],
    ['a JSON array', json([{ model: 'm' }]), '/v1/completions', 'not-object'],
    ['a JSON string', json('m'), '/v1/completions', 'not-object'],
    ['null', bytes('null'), '/v1/completions', 'not-object'],
    ['missing model', json({ prompt: 'x' }), '/v1/completions', 'missing-model'],
    ['empty model', json({ model: '', prompt: 'x' }), '/v1/completions', 'missing-model'],
    ['numeric model', json({ model: 7, prompt: 'x' }), '/v1/completions', 'invalid-model'],
    ['object model', json({ model: { name: 'm' }, prompt: 'x' }), '/v1/completions', 'invalid-model'],
    ['completions without prompt', json({ model: 'm', messages: [] }), '/v1/completions', 'invalid-shape'],
    ['completions with object prompt', json({ model: 'm', prompt: { a: 1 } }), '/v1/completions', 'invalid-shape'],
    ['chat without messages', json({ model: 'm', prompt: 'x' }), '/v1/chat/completions', 'invalid-shape'],
    ['chat with empty messages', json({ model: 'm', messages: [] }), '/v1/chat/completions', 'invalid-shape'],
    ['chat with a string message', json({ model: 'm', messages: ['hi'] }), '/v1/chat/completions', 'invalid-shape'],
    ['chat with numeric content', json({ model: 'm', messages: [{ role: 'user', content: 5 }] }), '/v1/chat/completions', 'invalid-shape'],
    ['responses without input', json({ model: 'm' }), '/v1/responses', 'invalid-shape'],
    ['responses with numeric input', json({ model: 'm', input: 3 }), '/v1/responses', 'invalid-shape'],
    ['embeddings without input', json({ model: 'm', prompt: 'x' }), '/v1/embeddings', 'invalid-shape'],
    ['non-UTF-8 bytes', Uint8Array.from([0x7b, 0x22, 0x6d, 0xff, 0xfe, 0x22, 0x7d]), '/v1/completions', 'invalid-utf8'],
    ['a lone surrogate in UTF-8', Uint8Array.from([0x22, 0xed, 0xa0, 0x80, 0x22]), '/v1/completions', 'invalid-utf8'],
  ];

  it.each(bad)('rejects %s', (_name, body, path, kind) => {
    const result = parseInferenceBody(body, path);
    expect(result.ok).toBe(false);
    if (result.ok) return;
    expect(result.error.kind).toBe(kind);
    expect(result.error.status).toBe(400);
    expect(result.error.code).toBe(kind.replaceAll('-', '_'));
    expect(result.error.message.length).toBeGreaterThan(0);
  });
});
