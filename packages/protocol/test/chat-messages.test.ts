import { describe, expect, it } from 'vitest';
import { chatMessages, prepareRequest } from '@spillway/protocol';

const bytes = (value: unknown): Uint8Array => new TextEncoder().encode(JSON.stringify(value));

function prepared(path: string, body: unknown) {
  const result = prepareRequest(bytes(body), { path, modelRewrite: undefined }, undefined, Math.random);
  if (!result.ok) throw new Error(result.error.message);
  return result.request;
}

describe('chatMessages', () => {
  it('gives the structured messages of a chat request, content parts joined, null content as empty', () => {
    const request = prepared('/v1/chat/completions', {
      model: 'm',
      messages: [
        { role: 'system', content: 'be brief' },
        { role: 'user', content: [{ type: 'text', text: 'hello ' }, { type: 'image_url', image_url: {} }, { type: 'text', text: 'there' }] },
        { role: 'assistant', content: null, tool_calls: [] },
      ],
    });
    expect(chatMessages(request)).toEqual([
      { role: 'system', content: 'be brief' },
      { role: 'user', content: 'hello there' },
      { role: 'assistant', content: '' },
    ]);
    // The flat prompt the scheduler hashes is made of the same parts.
    expect(request.prompt).toBe('system: be brief\nuser: hello there\nassistant: \n');
  });

  it('is undefined for other APIs', () => {
    expect(chatMessages(prepared('/v1/completions', { model: 'm', prompt: 'x' }))).toBeUndefined();
    expect(chatMessages(prepared('/v1/models', { model: 'm' }))).toBeUndefined();
  });

  it('reads the body as the client sent it, whatever the model rewrite', () => {
    const result = prepareRequest(bytes({ model: 'a', messages: [{ role: 'user', content: 'q' }] }), { path: '/v1/chat/completions', modelRewrite: 'b' }, undefined, Math.random);
    if (!result.ok) throw new Error(result.error.message);
    expect(result.request.model).toBe('b');
    expect(chatMessages(result.request)).toEqual([{ role: 'user', content: 'q' }]);
  });
});
