import type { ApiKind } from '@spillway/protocol';
import type { KvCounters } from './counters.js';
import { TokenCache } from './token-cache.js';

/** What the request path needs of a tokenizer (`@spillway/tokenizer`'s PromptTokenizer has this shape). */
export interface PromptTokenizer {
  readonly name: string;
  encodeText(text: string): ArrayLike<number>;
  encodeChat(messages: ReadonlyArray<{ role: string; content: unknown }>): ArrayLike<number>;
  /** The text `encodeChat` tokenizes (optional: it lets a user turn skip the template engine). */
  renderChat?(messages: ReadonlyArray<{ role: string; content: unknown }>): string;
  /** Whether it encodes on its fast path; when not, which tokenizer.json component prevents it (logged at start). */
  readonly fastPath?: boolean;
  readonly fastPathUnsupported?: string | undefined;
}

/** The parts of a parsed request a tokenizer reads. */
export interface PromptInput {
  readonly api: ApiKind | undefined;
  readonly prompt: string;
  /** The chat request's `messages`, as parsed (chat only). */
  readonly messages?: readonly unknown[] | undefined;
}

/**
 * How token ids compose for one tokenizer, found by probing it: for chat,
 * `encodeChat(P ++ [m]) = encodeChat(P)[..-gen] ++ encodeChat([m])[lead..]` (`gen`: the generation
 * prompt appended to P; `lead`: what a conversation starts with, BOS or a default system turn); for
 * text, `encodeText(a + b) = encodeText(a) ++ encodeText(b)[lead..]` when `a` ends at a newline.
 */
interface Composition {
  chat: { lead: number; gen: number } | undefined;
  textLead: number | undefined;
  /**
   * A lone user turn as the template renders it, `before + content + after`, when that holds and
   * `encodeText` of it (past `textLead`) is `encodeChat` of it: the tail of a cached conversation is
   * then tokenized without running the template engine (which costs more than tokenizing a question).
   */
  userTurn: { before: string; after: string } | undefined;
}

/** Every this many chat misses, the joined ids are checked against tokenizing the whole conversation. */
const VERIFY_EVERY = 16;

/** Completions prompts are split for caching at the first newline after each multiple of this many characters. */
export const TEXT_CHUNK_CHARS = 2048;

export interface PromptTokensOptions {
  /** Token ids of prompt prefixes kept, in bytes. */
  cacheBytes: number;
  /** Prompts longer than this (characters) are not tokenized: the approximate index prices them. */
  maxChars: number;
}

/** Where a request's token ids came from: a cached prefix and the tail tokenized, or the whole prompt. */
export type TokenizeOutcome = 'prefix-cached' | 'full';

/**
 * The request path's tokenization (docs/kv-events.md, "In the EPP"): a request's prompt, through its
 * model's tokenizer (chat messages through the chat template, generation prompt appended, as vLLM
 * does), to the token ids the precise block index is looked up with.
 *
 * Tokenizing costs CPU on the request path, and most of a long prompt is usually a context shared by
 * many requests (a system prompt, a document, the earlier turns). So the ids of a prompt's prefix are
 * cached, bounded in bytes: for chat, the conversation before its last message (up to a message that
 * is not the assistant's); for completions, the text up to the first newline after the last multiple
 * of TEXT_CHUNK_CHARS characters. A request whose prefix is
 * cached tokenizes only its own tail. Exact by construction: the split falls where the tokenizer
 * starts afresh (a message boundary is a special token; a piece after a newline starts a new
 * pre-token), each tokenizer's composition rule is probed when it is loaded, and a prefix enters the
 * cache only if its ids are what the full tokenization began with. A tokenizer that does not compose
 * still works, uncached.
 */
export class PromptTokens {
  readonly cache: TokenCache;
  private readonly compositions = new Map<PromptTokenizer, Composition>();
  private chatMisses = 0;

  constructor(
    /** By model name (after rewrites); `*` serves every other model. */
    private readonly tokenizers: ReadonlyMap<string, PromptTokenizer>,
    private readonly options: PromptTokensOptions,
    private readonly counters: KvCounters,
  ) {
    this.cache = new TokenCache(options.cacheBytes);
    for (const tokenizer of new Set(tokenizers.values())) this.compositions.set(tokenizer, probe(tokenizer));
  }

  tokenizerFor(model: string): PromptTokenizer | undefined {
    return this.tokenizers.get(model) ?? this.tokenizers.get('*');
  }

  /** The rule each tokenizer follows (for the log at start). */
  describe(): {
    tokenizer: string;
    fastPath: boolean;
    fastPathUnsupported?: string;
    chatPrefixCache: boolean;
    textPrefixCache: boolean;
    userTurnShortcut: boolean;
  }[] {
    return [...this.compositions].map(([t, c]) => ({
      tokenizer: t.name,
      // false: the tokenizer.json uses a component the fast encoder does not handle (named), so encoding costs the library's ~3 µs/token.
      fastPath: t.fastPath === true,
      ...(t.fastPathUnsupported !== undefined && { fastPathUnsupported: t.fastPathUnsupported }),
      chatPrefixCache: c.chat !== undefined,
      textPrefixCache: c.textLead !== undefined,
      userTurnShortcut: c.userTurn !== undefined,
    }));
  }

  /**
   * The prompt's token ids, or undefined when the model has no tokenizer, the API has no prompt to
   * tokenize (embeddings, responses), the prompt is too long, or the tokenizer failed on it.
   */
  tokenize(model: string, input: PromptInput): { ids: Uint32Array; outcome: TokenizeOutcome } | undefined {
    const tokenizer = this.tokenizerFor(model);
    if (tokenizer === undefined) return undefined;
    const composition = this.compositions.get(tokenizer) as Composition;
    try {
      if (input.api === 'chat' && input.messages !== undefined) return this.chat(tokenizer, composition, input.messages);
      if (input.api === 'completions') return this.text(tokenizer, composition, input.prompt);
      return undefined;
    } catch {
      // A prompt the tokenizer or template cannot take (odd content parts): priced approximately.
      this.counters.tokenizeSkipped++;
      return undefined;
    }
  }

  private chat(
    tokenizer: PromptTokenizer,
    composition: Composition,
    raw: readonly unknown[],
  ): { ids: Uint32Array; outcome: TokenizeOutcome } | undefined {
    const messages = chatMessages(raw, this.options.maxChars);
    if (messages === undefined) {
      this.counters.tokenizeSkipped++;
      return undefined;
    }
    const rule = composition.chat;
    const splits = rule === undefined ? [] : chatSplits(messages);
    if (rule === undefined || splits.length === 0) {
      this.counters.tokenizedFresh++;
      return { ids: toIds(tokenizer.encodeChat(messages)), outcome: 'full' };
    }
    const parts = chatParts(tokenizer.name, messages, splits[0] as number);
    for (const split of splits) {
      const cached = this.cache.get(parts, 1 + 2 * split);
      if (cached === undefined) continue;
      this.counters.tokenizedPartly++;
      return {
        ids: concat(cached, cached.length - rule.gen, this.encodeTail(tokenizer, composition, messages, split), rule.lead),
        outcome: 'prefix-cached',
      };
    }
    // A miss: the longest cacheable prefix (kept for the next request with it) and the tail, joined
    // by the rule. The first miss and every VERIFY_EVERY-th one also tokenize the whole conversation
    // and compare: a rule that ever disagrees (a template quirk the probes missed) is dropped.
    const split = splits[0] as number;
    const head = toIds(tokenizer.encodeChat(messages.slice(0, split)));
    this.counters.tokenizedFresh++;
    const composed =
      head.length >= rule.gen
        ? concat(head, head.length - rule.gen, this.encodeTail(tokenizer, composition, messages, split), rule.lead)
        : undefined;
    if (composed !== undefined && this.chatMisses++ % VERIFY_EVERY !== 0) {
      this.cache.set(parts, 1 + 2 * split, head);
      return { ids: composed, outcome: 'full' };
    }
    const full = toIds(tokenizer.encodeChat(messages));
    if (composed !== undefined && !equal(full, composed)) {
      composition.chat = undefined;
      this.cache.clear();
      this.counters.compositionFailures++;
      return { ids: full, outcome: 'full' };
    }
    if (composed !== undefined) this.cache.set(parts, 1 + 2 * split, head);
    return { ids: full, outcome: 'full' };
  }

  /** `encodeChat(messages.slice(split))`, by the user-turn shortcut when it applies. */
  private encodeTail(
    tokenizer: PromptTokenizer,
    composition: Composition,
    messages: readonly ChatMessage[],
    split: number,
  ): ArrayLike<number> {
    const turn = composition.userTurn;
    const last = messages[split] as ChatMessage;
    if (turn !== undefined && split === messages.length - 1 && last.role === 'user' && typeof last.content === 'string') {
      // The lead of encodeChat (BOS, a default system turn) stays in place: `rule.lead` skips it.
      const ids = tokenizer.encodeText(turn.before + last.content + turn.after);
      return composition.textLead === 0 ? ids : Array.from(ids).slice(composition.textLead);
    }
    return tokenizer.encodeChat(messages.slice(split));
  }

  private text(
    tokenizer: PromptTokenizer,
    composition: Composition,
    prompt: string,
  ): { ids: Uint32Array; outcome: TokenizeOutcome } | undefined {
    if (prompt.length > this.options.maxChars) {
      this.counters.tokenizeSkipped++;
      return undefined;
    }
    const lead = composition.textLead;
    const split = lead === undefined ? -1 : textSplit(prompt);
    if (split <= 0 || lead === undefined) {
      this.counters.tokenizedFresh++;
      return { ids: toIds(tokenizer.encodeText(prompt)), outcome: 'full' };
    }
    const parts = [`${tokenizer.name}\u0002t`, prompt.slice(0, split)];
    const cached = this.cache.get(parts);
    if (cached !== undefined) {
      this.counters.tokenizedPartly++;
      return { ids: concat(cached, cached.length, tokenizer.encodeText(prompt.slice(split)), lead), outcome: 'prefix-cached' };
    }
    const full = toIds(tokenizer.encodeText(prompt));
    const head = toIds(tokenizer.encodeText(prompt.slice(0, split)));
    if (startsWith(full, head, head.length)) this.cache.set(parts, 2, head);
    this.counters.tokenizedFresh++;
    return { ids: full, outcome: 'full' };
  }
}

export interface ChatMessage {
  role: string;
  content: unknown;
}

/** The messages as the template takes them; undefined when one is not a message or they are too long. */
function chatMessages(raw: readonly unknown[], maxChars: number): ChatMessage[] | undefined {
  const messages: ChatMessage[] = [];
  let chars = 0;
  for (const item of raw) {
    if (typeof item !== 'object' || item === null || Array.isArray(item)) return undefined;
    const record = item as Record<string, unknown>;
    const role = record['role'];
    if (typeof role !== 'string') return undefined;
    const content = record['content'];
    chars += typeof content === 'string' ? content.length : JSON.stringify(content ?? null).length;
    if (chars > maxChars) return undefined;
    messages.push({ role, content });
  }
  return messages;
}

/** At most this many prefixes of a conversation are looked up (each lookup hashes its key). */
const MAX_CHAT_SPLITS = 4;

/**
 * Where a conversation may be split for the cache, longest prefix first: after a message that is not
 * the assistant's (templates render an assistant turn differently when it is the last one, e.g.
 * Qwen3's empty thinking block), before the last message.
 */
function chatSplits(messages: readonly ChatMessage[]): number[] {
  const splits: number[] = [];
  for (let k = messages.length - 1; k >= 1 && splits.length < MAX_CHAT_SPLITS; k--)
    if ((messages[k - 1] as ChatMessage).role !== 'assistant') splits.push(k);
  return splits;
}

/**
 * The cache key parts of a conversation's prefixes: the tokenizer (with a marker of chat), then each
 * message's role and content; the first k messages are `parts[0 .. 1 + 2k)`.
 */
function chatParts(tokenizer: string, messages: readonly ChatMessage[], upTo: number): string[] {
  const parts: string[] = [`${tokenizer}\u0002c`];
  for (let k = 0; k < upTo; k++) {
    const m = messages[k] as ChatMessage;
    parts.push(m.role, typeof m.content === 'string' ? m.content : JSON.stringify(m.content ?? null));
  }
  return parts;
}

/** Where a completions prompt is split for caching: after the first newline past the last whole chunk; -1 for none. */
export function textSplit(prompt: string): number {
  for (let chunk = Math.floor(prompt.length / TEXT_CHUNK_CHARS); chunk >= 1; chunk--) {
    const newline = prompt.indexOf('\n', chunk * TEXT_CHUNK_CHARS);
    // Not the prompt's last character (nothing to compose), and a piece after it that starts with no whitespace (it would join the newline's pre-token).
    if (newline >= 0 && newline < prompt.length - 1 && !/\s/.test(prompt[newline + 1] as string)) return newline + 1;
  }
  return -1;
}

function toIds(ids: ArrayLike<number>): Uint32Array {
  return ids instanceof Uint32Array ? ids : Uint32Array.from(ids);
}

function startsWith(full: Uint32Array, head: Uint32Array, length: number): boolean {
  if (full.length < length) return false;
  for (let i = 0; i < length; i++) if (full[i] !== head[i]) return false;
  return true;
}

function concat(head: Uint32Array, headLength: number, tail: ArrayLike<number>, skip: number): Uint32Array {
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
function probe(tokenizer: PromptTokenizer): Composition {
  const textLead = probeText(tokenizer);
  return { chat: probeChat(tokenizer), textLead, userTurn: textLead === undefined ? undefined : probeUserTurn(tokenizer, textLead) };
}

function probeChat(tokenizer: PromptTokenizer): Composition['chat'] {
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

function probeUserTurn(tokenizer: PromptTokenizer, textLead: number): Composition['userTurn'] {
  if (tokenizer.renderChat === undefined) return undefined;
  try {
    const marker = '\u0000SPILLWAY\u0000';
    const rendered = tokenizer.renderChat([{ role: 'user', content: marker }]);
    const at = rendered.indexOf(marker);
    if (at < 0 || rendered.indexOf(marker, at + 1) >= 0) return undefined;
    const turn = { before: rendered.slice(0, at), after: rendered.slice(at + marker.length) };
    const contents = [' Padded question?  ', 'Hello, world!\nSecond line.', '42 + 1 = ?', 'é 漢字 \t tab'];
    for (const content of contents) {
      const text = turn.before + content + turn.after;
      if (tokenizer.renderChat([{ role: 'user', content }]) !== text) return undefined;
      const viaText = Array.from(tokenizer.encodeText(text)).slice(textLead);
      if (!equal(toIds(viaText), toIds(tokenizer.encodeChat([{ role: 'user', content }])))) return undefined;
    }
    return turn;
  } catch {
    return undefined;
  }
}

function probeText(tokenizer: PromptTokenizer): number | undefined {
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

function equal(a: Uint32Array, b: Uint32Array): boolean {
  if (a.length !== b.length) return false;
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return false;
  return true;
}
