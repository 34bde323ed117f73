import { describe, expect, it } from 'vitest';
import { outputLimitOf } from '@spillway/protocol';

describe('the output limit of a request body', () => {
  it('reads the field each API names, chat’s newer name first', () => {
    expect(outputLimitOf('completions', { max_tokens: 256 })).toBe(256);
    expect(outputLimitOf('chat', { max_completion_tokens: 100, max_tokens: 50 })).toBe(100);
    expect(outputLimitOf('chat', { max_tokens: 50 })).toBe(50);
    expect(outputLimitOf('chat', { max_completion_tokens: null, max_tokens: 50 })).toBe(50);
    expect(outputLimitOf('responses', { max_output_tokens: 9 })).toBe(9);
    expect(outputLimitOf('responses', { max_tokens: 9 })).toBeUndefined();
  });

  it('says nothing for a missing or unusable limit, or a path of no known API', () => {
    expect(outputLimitOf('completions', {})).toBeUndefined();
    for (const bad of [-1, 0, 2.5, '12', true, [3], { n: 1 }, 2 ** 60])
      expect(outputLimitOf('completions', { max_tokens: bad })).toBeUndefined();
    expect(outputLimitOf('embeddings', { max_tokens: 5 })).toBeUndefined();
    expect(outputLimitOf(undefined, { max_tokens: 5 })).toBeUndefined();
  });
});
