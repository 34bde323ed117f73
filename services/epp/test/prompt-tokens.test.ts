/**
 * The request path's tokenization with the real Qwen3 tokenizer: token ids built from a cached
 * prefix are exactly what tokenizing the whole prompt gives (chat through the template, and text),
 * the cache stays within its bytes, and what cannot be tokenized is counted and left to the
 * approximate index.
 */
import { describe, expect, it } from 'vitest';
import fc from 'fast-check';
import { loadTokenizer } from '@spillway/tokenizer';
import { KvCounters } from '../src/kv/counters.js';
import { PromptTokens } from '../src/kv/prompt-tokens.js';
import type { RequestTokenizer } from '../src/kv/composition.js';
import { TEXT_CHUNK_CHARS, textSplit } from '../src/kv/prompt-split.js';
import { TokenCache } from '../src/kv/token-cache.js';

const qwen3 = loadTokenizer({ preset: 'qwen3' });
const CONTEXT = 'Spillways pass flood water safely around a dam; the crest, chute and stilling basin each matter. '.repeat(40);

function tokens(cacheBytes = 16 * 1024 * 1024, maxChars = 1024 * 1024, tokenizer: RequestTokenizer = qwen3) {
  const counters = new KvCounters();
  return { counters, tokens: new PromptTokens(new Map([['*', tokenizer]]), { cacheBytes, maxChars }, counters) };
}

const ids = (a: ArrayLike<number>) => Array.from(a);

describe('PromptTokens with the Qwen3 tokenizer', () => {
  it('finds that Qwen3 chat and text compose, so both have a prefix cache', () => {
    expect(tokens().tokens.describe()).toEqual([
      { tokenizer: 'qwen3', fastPath: true, chatPrefixCache: true, textPrefixCache: true, plainTurnsSpliced: true },
    ]);
  });

  it('a conversation whose prefix is cached gets exactly the ids of the whole conversation', () => {
    const { tokens: t, counters } = tokens();
    const role = fc.constantFrom('user', 'assistant', 'system');
    const text = fc.stringMatching(/^[A-Za-z0-9 ,.!?'\n-]{0,80}$/);
    fc.assert(
      fc.property(fc.array(fc.record({ role, content: text }), { minLength: 0, maxLength: 5 }), text, (middle, question) => {
        const messages = [{ role: 'system', content: CONTEXT }, ...middle, { role: 'user', content: question }];
        const expected = ids(qwen3.encodeChat(messages));
        // Twice: the first fills the cache, the second uses it; both must be exact.
        for (let i = 0; i < 2; i++) expect(ids(t.tokenize('m', { api: 'chat', prompt: '', messages })?.ids ?? [])).toEqual(expected);
      }),
      { numRuns: 60 },
    );
    expect(counters.tokenizedPartly).toBeGreaterThan(30);
  });

  it('shares a cached system context across different questions', () => {
    const { tokens: t, counters } = tokens();
    for (let i = 0; i < 5; i++) {
      const messages = [
        { role: 'system', content: CONTEXT },
        { role: 'user', content: `Question ${i}: how wide is the chute?` },
      ];
      const result = t.tokenize('m', { api: 'chat', prompt: '', messages });
      expect(result?.outcome).toBe(i === 0 ? 'full' : 'prefix-cached');
      expect(ids(result?.ids ?? [])).toEqual(ids(qwen3.encodeChat(messages)));
    }
    expect([counters.tokenizedFresh, counters.tokenizedPartly]).toEqual([1, 4]);
  });

  it('a completions prompt split after a newline past each chunk composes exactly', () => {
    const { tokens: t, counters } = tokens();
    const context = `${CONTEXT}\n${CONTEXT}\nQ: `;
    expect(textSplit(context + 'what?')).toBeGreaterThan(TEXT_CHUNK_CHARS);
    for (const question of ['what is a stilling basin?', 'Why  two spaces?', '42 metres?', 'é ü ß 漢字']) {
      const prompt = `${context}${question}`;
      expect(ids(t.tokenize('m', { api: 'completions', prompt })?.ids ?? [])).toEqual(ids(qwen3.encodeText(prompt)));
    }
    expect(counters.tokenizedPartly).toBe(3);
  });

  it('keeps the cache within its bytes, least recently used out first', () => {
    const { tokens: t } = tokens(256 * 1024);
    for (let i = 0; i < 40; i++) {
      const messages = [
        { role: 'system', content: `${i} ${CONTEXT}` },
        { role: 'user', content: 'q' },
      ];
      t.tokenize('m', { api: 'chat', prompt: '', messages });
      expect(t.cache.bytes).toBeLessThanOrEqual(256 * 1024);
    }
    expect(t.cache.evictions).toBeGreaterThan(0);
  });

  it('leaves a too-long prompt, another API and a failing tokenizer to the approximate index, counted', () => {
    const { tokens: t, counters } = tokens(1024 * 1024, 1000);
    expect(t.tokenize('m', { api: 'completions', prompt: 'x'.repeat(1001) })).toBeUndefined();
    expect(t.tokenize('m', { api: 'chat', prompt: '', messages: [{ role: 'user', content: 'y'.repeat(1001) }] })).toBeUndefined();
    expect(t.tokenize('m', { api: 'embeddings', prompt: 'hello' })).toBeUndefined();
    expect(t.tokenize('m', { api: 'chat', prompt: '', messages: ['not a message'] })).toBeUndefined();
    expect(counters.tokenizeSkipped).toBe(3);
    const broken: RequestTokenizer = {
      name: 'broken',
      encodeText: () => {
        throw new Error('no');
      },
      encodeChat: () => {
        throw new Error('no');
      },
    };
    const b = tokens(1024, 1000, broken);
    expect(b.tokens.describe()).toEqual([
      { tokenizer: 'broken', fastPath: false, chatPrefixCache: false, textPrefixCache: false, plainTurnsSpliced: false },
    ]);
    expect(b.tokens.tokenize('m', { api: 'completions', prompt: 'hi' })).toBeUndefined();
    expect(b.counters.tokenizeSkipped).toBe(1);
  });

  it("turns a tokenizer's chat prefix cache off when joined ids ever disagree with the whole conversation", () => {
    // A template quirk the probes do not meet: a conversation ending with a QUIRK system turn starts with an extra token.
    const quirky: RequestTokenizer = {
      name: 'quirky',
      encodeText: (text) => qwen3.encodeText(text),
      encodeChat: (messages) => {
        const ids = Array.from(qwen3.encodeChat(messages));
        const last = messages[messages.length - 1];
        return last?.role === 'system' && String(last.content).includes('QUIRK') ? [7, ...ids] : ids;
      },
    };
    const { tokens: t, counters } = tokens(1 << 20, 1 << 20, quirky);
    expect(t.describe()[0]?.chatPrefixCache).toBe(true);
    const messages = [
      { role: 'system', content: 'QUIRK context' },
      { role: 'user', content: 'q' },
    ];
    expect(ids(t.tokenize('m', { api: 'chat', prompt: '', messages })?.ids ?? [])).toEqual(ids(quirky.encodeChat(messages)));
    expect(counters.compositionFailures).toBe(1);
    expect(t.describe()[0]?.chatPrefixCache).toBe(false);
    expect(ids(t.tokenize('m', { api: 'chat', prompt: '', messages })?.ids ?? [])).toEqual(ids(quirky.encodeChat(messages)));
  });

  it('with deferred checks, joined ids are returned at once and a late disagreement still turns the chat prefix cache off', () => {
    const quirky: RequestTokenizer = {
      name: 'quirky',
      encodeText: (text) => qwen3.encodeText(text),
      encodeChat: (messages) => {
        const ids = Array.from(qwen3.encodeChat(messages));
        const last = messages[messages.length - 1];
        return last?.role === 'system' && String(last.content).includes('QUIRK') ? [7, ...ids] : ids;
      },
    };
    const counters = new KvCounters();
    const queue: Array<() => void> = [];
    const t = new PromptTokens(
      new Map([['*', quirky]]),
      { cacheBytes: 1 << 20, maxChars: 1 << 20, deferCheck: (check) => queue.push(check) },
      counters,
    );
    const chat = (i: number, system: string) => [
      { role: 'system', content: `${system} ${i}` },
      { role: 'user', content: 'q' },
    ];
    // The first 16 misses are checked at once (nothing deferred), the next ones not at all until the 256th.
    for (let i = 0; i < 256; i++) {
      const messages = chat(i, 'context');
      expect(ids(t.tokenize('m', { api: 'chat', prompt: '', messages })?.ids ?? [])).toEqual(ids(quirky.encodeChat(messages)));
    }
    expect(queue).toHaveLength(0);
    const messages = chat(256, 'QUIRK');
    const joined = ids(t.tokenize('m', { api: 'chat', prompt: '', messages })?.ids ?? []);
    expect(joined).not.toEqual(ids(quirky.encodeChat(messages))); // returned before the check
    expect(queue).toHaveLength(1);
    expect(t.describe()[0]?.chatPrefixCache).toBe(true);
    for (const check of queue.splice(0)) check();
    expect(counters.compositionFailures).toBe(1);
    expect(t.describe()[0]?.chatPrefixCache).toBe(false);
    expect(t.cache.size).toBe(0);
    expect(ids(t.tokenize('m', { api: 'chat', prompt: '', messages })?.ids ?? [])).toEqual(ids(quirky.encodeChat(messages)));
  });

  it('uses the tokenizer of the model, or of *', () => {
    const counters = new KvCounters();
    const t = new PromptTokens(new Map([['llama', qwen3]]), { cacheBytes: 1 << 20, maxChars: 1 << 20 }, counters);
    expect(t.tokenize('other', { api: 'completions', prompt: 'hi' })).toBeUndefined();
    expect(t.tokenize('llama', { api: 'completions', prompt: 'hi' })?.ids.length).toBeGreaterThan(0);
  });
});

describe('TokenCache', () => {
  it('never holds more than its bytes, and refuses an entry larger than an eighth of them', () => {
    const cache = new TokenCache(10_000);
    cache.set(['big'], 1, new Uint32Array(400));
    expect(cache.size).toBe(0);
    for (let i = 0; i < 100; i++) cache.set(['c', `k${i}`], 2, new Uint32Array(100));
    expect(cache.bytes).toBeLessThanOrEqual(10_000);
    expect(cache.get(['c', 'k99'])).toBeDefined();
    expect(cache.get(['c', 'k0'])).toBeUndefined();
  });

  it('finds a prefix by its first parts, and never by parts that only hash alike', () => {
    const cache = new TokenCache(1 << 20);
    const long = 'x'.repeat(10_000);
    cache.set(['c', 'system', long, 'user', 'q1'], 3, Uint32Array.of(1, 2, 3));
    expect(Array.from(cache.get(['c', 'system', long, 'user', 'q2'], 3) ?? [])).toEqual([1, 2, 3]);
    // Same length, same sampled characters, one unsampled character different: a miss.
    const other = `${'x'.repeat(5001)}y${'x'.repeat(4998)}`;
    expect(cache.get(['c', 'system', other], 3)).toBeUndefined();
    expect(cache.get(['c', 'system', long], 2)).toBeUndefined();
    // Both kept when they hash alike: they share a bucket.
    cache.set(['c', 'system', other], 3, Uint32Array.of(4));
    expect(Array.from(cache.get(['c', 'system', long], 3) ?? [])).toEqual([1, 2, 3]);
    expect(Array.from(cache.get(['c', 'system', other], 3) ?? [])).toEqual([4]);
  });
});
