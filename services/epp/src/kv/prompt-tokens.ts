import type { ApiKind } from '@spillway/protocol';
import type { KvCounters } from './counters.js';
import { TokenCache } from './token-cache.js';
import { concat, equal, probe, startsWith, toIds, type Composition, type RequestTokenizer } from './composition.js';
import { chatMessages, chatParts, chatSplits, textSplit, type ChatMessage } from './prompt-split.js';

/** The parts of a parsed request a tokenizer reads. */
export interface PromptInput {
  readonly api: ApiKind | undefined;
  readonly prompt: string;
  /** The chat request's `messages`, as parsed (chat only). */
  readonly messages?: readonly unknown[] | undefined;
}

/**
 * The first VERIFY_FIRST chat misses, and one in VERIFY_EVERY after, check the joined ids against
 * tokenizing the whole conversation: a rule the probes missed shows early, and later checks stay
 * rare enough (under 1 % of misses) that tokenizing twice is not what a miss costs at p99.
 */
const VERIFY_FIRST = 16;
const VERIFY_EVERY = 256;

export interface PromptTokensOptions {
  /** Token ids of prompt prefixes kept, in bytes. */
  cacheBytes: number;
  /** Prompts longer than this (characters) are not tokenized: the approximate index prices them. */
  maxChars: number;
  /**
   * Runs the periodic check of joined ids (after the first VERIFY_FIRST) later, off the request path
   * (the EPP passes `setImmediate`); default: at once. Checking tokenizes the whole conversation a
   * second time, which would double that request's cost.
   */
  deferCheck?: (check: () => void) => void;
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
  private readonly compositions = new Map<RequestTokenizer, Composition>();
  private chatMisses = 0;

  constructor(
    /** By model name (after rewrites); `*` serves every other model. */
    private readonly tokenizers: ReadonlyMap<string, RequestTokenizer>,
    private readonly options: PromptTokensOptions,
    private readonly counters: KvCounters,
  ) {
    this.cache = new TokenCache(options.cacheBytes);
    for (const tokenizer of new Set(tokenizers.values())) this.compositions.set(tokenizer, probe(tokenizer));
  }

  tokenizerFor(model: string): RequestTokenizer | undefined {
    return this.tokenizers.get(model) ?? this.tokenizers.get('*');
  }

  /** The rule each tokenizer follows (for the log at start). */
  describe(): {
    tokenizer: string;
    fastPath: boolean;
    fastPathUnsupported?: string;
    chatPrefixCache: boolean;
    textPrefixCache: boolean;
    plainTurnsSpliced: boolean;
  }[] {
    return [...this.compositions].map(([t, c]) => ({
      tokenizer: t.name,
      // false: the tokenizer.json uses a component the fast encoder does not handle (named), so encoding costs the library's ~3 µs/token.
      fastPath: t.fastPath === true,
      ...(t.fastPathUnsupported !== undefined && { fastPathUnsupported: t.fastPathUnsupported }),
      chatPrefixCache: c.chat !== undefined,
      textPrefixCache: c.textLead !== undefined,
      plainTurnsSpliced: t.splicesPlainTurns === true,
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
    tokenizer: RequestTokenizer,
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
        ids: concat(cached, cached.length - rule.gen, tokenizer.encodeChat(messages.slice(split)), rule.lead),
        outcome: 'prefix-cached',
      };
    }
    // A miss: the longest cacheable prefix (kept for the next request with it) and the tail, joined
    // by the rule. The first misses and one in VERIFY_EVERY after also tokenize the whole conversation
    // and compare: a rule that ever disagrees (a template quirk the probes missed) is dropped.
    const split = splits[0] as number;
    const head = toIds(tokenizer.encodeChat(messages.slice(0, split)));
    this.counters.tokenizedFresh++;
    const composed =
      head.length >= rule.gen ? concat(head, head.length - rule.gen, tokenizer.encodeChat(messages.slice(split)), rule.lead) : undefined;
    const miss = this.chatMisses++;
    const defer = this.options.deferCheck;
    if (composed !== undefined && miss >= VERIFY_FIRST && (miss % VERIFY_EVERY !== 0 || defer !== undefined)) {
      this.cache.set(parts, 1 + 2 * split, head);
      // Checked later: if the ids disagree the rule goes (as below); this request's ids were a routing estimate.
      if (miss % VERIFY_EVERY === 0 && defer !== undefined) defer(() => this.checkLater(tokenizer, composition, messages, composed));
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

  /** The deferred form of the check in `chat`: the rule is dropped if the whole conversation's ids differ from the joined ones. */
  private checkLater(tokenizer: RequestTokenizer, composition: Composition, messages: ChatMessage[], composed: Uint32Array): void {
    if (composition.chat === undefined) return;
    let full: Uint32Array;
    try {
      full = toIds(tokenizer.encodeChat(messages));
    } catch {
      return;
    }
    if (equal(full, composed)) return;
    composition.chat = undefined;
    this.cache.clear();
    this.counters.compositionFailures++;
  }

  private text(
    tokenizer: RequestTokenizer,
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
