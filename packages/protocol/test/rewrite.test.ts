import { describe, expect, it } from 'vitest';
import { compileModelRewrites, prepareRequest, routedResponses, ProcessingResponse } from '@spillway/protocol';

const bytes = (text: string): Uint8Array => new TextEncoder().encode(text);
const fixed = (value: number) => (): number => value;

describe('compileModelRewrites', () => {
  const rewriter = compileModelRewrites([
    {
      match: 'llama',
      targets: [
        { model: 'llama-a', weight: 1 },
        { model: 'llama-b', weight: 3 },
      ],
    },
    {
      match: 'zero',
      targets: [
        { model: 'z1', weight: 0 },
        { model: 'z2', weight: 0 },
      ],
    },
    {
      match: 'skip',
      targets: [
        { model: 'never', weight: 0 },
        { model: 'always', weight: 2 },
      ],
    },
  ]);

  it('chooses targets in proportion to their weights', () => {
    expect(rewriter.target('llama', undefined, fixed(0))).toBe('llama-a');
    expect(rewriter.target('llama', undefined, fixed(0.2499))).toBe('llama-a');
    expect(rewriter.target('llama', undefined, fixed(0.25))).toBe('llama-b');
    expect(rewriter.target('llama', undefined, fixed(0.9999))).toBe('llama-b');
    const counts = { 'llama-a': 0, 'llama-b': 0 } as Record<string, number>;
    for (let i = 0; i < 1000; i++) {
      const t = rewriter.target('llama', undefined, fixed(i / 1000));
      counts[t] = (counts[t] ?? 0) + 1;
    }
    expect(counts).toEqual({ 'llama-a': 250, 'llama-b': 750 });
  });

  it('never picks a zero-weight target, and is uniform when all weights are zero', () => {
    expect(rewriter.target('skip', undefined, fixed(0))).toBe('always');
    expect(rewriter.target('zero', undefined, fixed(0.1))).toBe('z1');
    expect(rewriter.target('zero', undefined, fixed(0.6))).toBe('z2');
  });

  it('survives a random source outside [0, 1)', () => {
    expect(rewriter.target('llama', undefined, fixed(1))).toBe('llama-b');
    expect(rewriter.target('llama', undefined, fixed(-3))).toBe('llama-a');
  });

  it('lets the x-gateway-model-name-rewrite header win, and leaves unmatched models alone', () => {
    expect(rewriter.target('llama', 'from-header', fixed(0))).toBe('from-header');
    expect(rewriter.target('other', undefined, fixed(0))).toBe('other');
    expect(rewriter.target('other', '', fixed(0))).toBe('other');
  });

  it('rejects bad rules', () => {
    expect(() => compileModelRewrites([{ match: 'm', targets: [] }])).toThrow(/no targets/);
    expect(() => compileModelRewrites([{ match: 'm', targets: [{ model: 'x', weight: -1 }] }])).toThrow(/weight/);
    expect(() => compileModelRewrites([{ match: '', targets: [{ model: 'x', weight: 1 }] }])).toThrow(/empty match/);
    expect(() =>
      compileModelRewrites([
        { match: 'm', targets: [{ model: 'x', weight: 1 }] },
        { match: 'm', targets: [{ model: 'y', weight: 1 }] },
      ]),
    ).toThrow(/two/);
  });
});

describe('prepareRequest', () => {
  const rewriter = compileModelRewrites([{ match: 'llama', targets: [{ model: 'llama-ft', weight: 1 }] }]);
  const original = bytes('{ "prompt": "hi",  "model": "llama", "seed": 1 }');

  it('leaves the body byte for byte when the model does not change', () => {
    const body = bytes('{ "model": "other",  "prompt": "hi" }');
    const result = prepareRequest(body, { path: '/v1/completions', modelRewrite: undefined }, rewriter, fixed(0));
    expect(result.ok && result.request.body).toBe(body);
    expect(result).toMatchObject({ ok: true, request: { model: 'other', requestedModel: 'other', bodyChanged: false } });
    const same = prepareRequest(body, { path: '/v1/completions', modelRewrite: 'other' }, rewriter, fixed(0));
    expect(same.ok && same.request.body).toBe(body);
  });

  it('re-serialises with the new model, keeping the other fields and their order', () => {
    const result = prepareRequest(original, { path: '/v1/completions', modelRewrite: undefined }, rewriter, fixed(0));
    if (!result.ok) throw result.error;
    expect(result.request).toMatchObject({ model: 'llama-ft', requestedModel: 'llama', bodyChanged: true, prompt: 'hi' });
    expect(new TextDecoder().decode(result.request.body)).toBe('{"prompt":"hi","model":"llama-ft","seed":1}');
  });

  it('applies the header override over the rules, and without any rules', () => {
    const viaHeader = prepareRequest(original, { path: '/v1/completions', modelRewrite: 'pinned' }, rewriter, fixed(0));
    expect(viaHeader).toMatchObject({ ok: true, request: { model: 'pinned', bodyChanged: true } });
    const noRules = prepareRequest(original, { path: '/v1/completions', modelRewrite: 'pinned' }, undefined, fixed(0));
    expect(noRules).toMatchObject({ ok: true, request: { model: 'pinned', bodyChanged: true } });
  });

  it('returns the parse error for a bad body', () => {
    const result = prepareRequest(bytes('{'), { path: '/v1/completions', modelRewrite: undefined }, rewriter, fixed(0));
    expect(result).toMatchObject({ ok: false, error: { kind: 'invalid-json', status: 400 } });
  });

  it('sets content-length to the rewritten length in both modes', () => {
    const result = prepareRequest(original, { path: '/v1/completions', modelRewrite: undefined }, rewriter, fixed(0));
    if (!result.ok) throw result.error;
    const { body, bodyChanged } = result.request;
    for (const mode of ['full-duplex', 'buffered'] as const) {
      const [first] = routedResponses({ mode, destination: '10.0.0.1:80', body, bodyChanged });
      const decoded = ProcessingResponse.decode(ProcessingResponse.encode(first as ProcessingResponse).finish());
      const r = decoded.response;
      const set = r?.$case === 'requestHeaders' || r?.$case === 'requestBody' ? r.value.response?.headerMutation?.setHeaders : [];
      const length = set?.find((h) => h.header?.key === 'content-length')?.header?.rawValue;
      expect(new TextDecoder().decode(length)).toBe(String(body.length));
    }
  });
});
