import type { PromptTokenizer } from '@spillway/tokenizer';
import { chatSplits, type ChatMessage } from './prompt-split.js';

/**
 * What the request path calls of a model's tokenizer: its encoders, and, when it has them, the
 * reports of its fast paths (logged at start).
 */
export type RequestTokenizer = Pick<PromptTokenizer, 'name' | 'encodeText' | 'encodeChat'> &
  Partial<Pick<PromptTokenizer, 'fastPath' | 'fastPathUnsupported' | 'splicesPlainTurns'>>;

/**
 * How token ids compose for one tokenizer, found by probing it: for chat,
 * `encodeChat(P ++ [m]) = encodeChat(P)[..-gen] ++ encodeChat([m])[lead..]` (`gen`: the generation
 * prompt appended to P; `lead`: what a conversation starts with, BOS or a default system turn); for
 * text, `encodeText(a + b) = encodeText(a) ++ encodeText(b)[lead..]` when `a` ends at a newline.
 */
export interface Composition {
  chat: { lead: number; gen: number } | undefined;
  textLead: number | undefined;
}

export function toIds(ids: ArrayLike<number>): Uint32Array {
  return ids instanceof Uint32Array ? ids : Uint32Array.from(ids);
}

export function startsWith(full: Uint32Array, head: Uint32Array, length: number): boolean {
  if (full.length < length) return false;
  for (let i = 0; i < length; i++) if (full[i] !== head[i]) return false;
  return true;
}

export function concat(head: Uint32Array, headLength: number, tail: ArrayLike<number>, skip: number): Uint32Array {
  const out = new Uint32Array(headLength + Math.max(0, tail.length - skip));
  out.set(head.subarray(0, headLength));
  for (let i = skip; i < tail.length; i++) out[headLength + i - skip] = tail[i] as number;
  return out;
}

const PROBE_CHATS: ChatMessage[][] = [
  [
    { role: 'system', content: 'You are a terse assistant for a bookshop.' },
    { role: 'user', content: 'Which novels by Tolstoy do you stock?' },
  ],
  [
    { role: 'user', content: 'Tell me a story about a river.' },
    { role: 'assistant', content: 'Once a river ran past a mill.' },
    { role: 'user', content: 'And then what happened?' },
  ],
  [
    { role: 'system', content: 'Answer in French.\nBe brief.' },
    { role: 'user', content: 'Hello!' },
    { role: 'assistant', content: 'Bonjour !' },
    { role: 'user', content: '2 + 2 = ?' },
  ],
];
const PROBE_TEXTS: [string, string][] = [
  ['The shared context of many requests.\n', 'Question: what is a spillway?'],
  ['Line one, with punctuation!\nLine two: numbers 12345.\n', 'Final words here.'],
];

/** Finds the composition rule of a tokenizer from a few probe prompts; a rule that does not hold for all of them is not used. */
export function probe(tokenizer: RequestTokenizer): Composition {
  return { chat: probeChat(tokenizer), textLead: probeText(tokenizer) };
}

function probeChat(tokenizer: RequestTokenizer): Composition['chat'] {
  try {
    const cases = PROBE_CHATS.map((chat) => {
      const split = chatSplits(chat)[0] as number;
      return {
        full: toIds(tokenizer.encodeChat(chat)),
        head: toIds(tokenizer.encodeChat(chat.slice(0, split))),
        tail: toIds(tokenizer.encodeChat(chat.slice(split))),
      };
    });
    const first = cases[0] as (typeof cases)[number];
    for (let lead = 0; lead <= 64; lead++) {
      const gen = first.head.length + first.tail.length - lead - first.full.length;
      if (gen < 0) continue;
      if (cases.every((c) => c.head.length >= gen && equal(c.full, concat(c.head, c.head.length - gen, c.tail, lead))))
        return { lead, gen };
    }
  } catch {
    // A template that fails on the probes: no prefix cache for chat.
  }
  return undefined;
}

function probeText(tokenizer: RequestTokenizer): number | undefined {
  try {
    const cases = PROBE_TEXTS.map(([a, b]) => ({
      full: toIds(tokenizer.encodeText(a + b)),
      head: toIds(tokenizer.encodeText(a)),
      tail: toIds(tokenizer.encodeText(b)),
    }));
    for (let lead = 0; lead <= 4; lead++) {
      if (cases.every((c) => equal(c.full, concat(c.head, c.head.length, c.tail, lead)))) return lead;
    }
  } catch {
    // no prefix cache for text
  }
  return undefined;
}

export function equal(a: Uint32Array, b: Uint32Array): boolean {
  if (a.length !== b.length) return false;
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return false;
  return true;
}
