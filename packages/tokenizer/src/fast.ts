import * as library from '@huggingface/tokenizers';
import type { Tokenizer } from '@huggingface/tokenizers';
import { IdBpe } from './bpe.js';
import { byteLevel } from './byte-level.js';
import { IdBuffer } from './id-buffer.js';
import { PieceCache } from './piece-cache.js';

/**
 * The request-path encoder: the same pipeline as `@huggingface/tokenizers`' `encode`, with its slow
 * step replaced and the model's output cached per pre-token.
 *
 * The library encodes a text as: split out added tokens (exact dictionary match) → normalizer → split
 * out normalized added tokens → pre-tokenizer (for Qwen2/3 and Llama 3: a Split regex, then ByteLevel,
 * which maps every piece's UTF-8 bytes to printable characters through `Array.from(...).join`) → BPE
 * per piece → ids, then the post-processor wraps the result (BOS etc.). Here every step but ByteLevel
 * is the library's own object, called exactly as the library calls it, so its behaviour (and its
 * quirks) is kept by construction. ByteLevel and BPE are done in id space on the UTF-8 bytes, and the ids of each
 * pre-token (BPE of one piece is a pure function of that piece) are kept in a cache bounded in
 * bytes: a repeated word costs one Map lookup. This is how Hugging Face's Rust tokenizers and
 * tiktoken make byte-level BPE fast.
 *
 * Supported (else `unsupported` says why and the caller uses the library): a BPE model without
 * `fuse_unk` (which merges across pieces), a pre-tokenizer made of `Split` steps and a final
 * `ByteLevel` (alone or in a `Sequence`), any normalizer, any post-processor that wraps the sequence
 * in fixed tokens, no `remove_space` / `do_lowercase_and_remove_accent` in the config.
 */

/** The parts of the library's Tokenizer the fast path reuses (typed privately: checked at runtime). */
interface AddedTokenView {
  readonly id: number;
  readonly lstrip: boolean;
  readonly rstrip: boolean;
}
interface TrieNode {
  readonly end?: string;
  readonly [char: string]: TrieNode | string | undefined;
}
interface SplitterView {
  readonly trie: TrieNode;
  split(text: string): string[];
}
interface PreTokenizerView {
  readonly config: {
    readonly type?: unknown;
    readonly add_prefix_space?: unknown;
    readonly use_regex?: unknown;
    readonly trim_offsets?: unknown;
  };
  readonly tokenizers?: ReadonlyArray<PreTokenizerView>;
  readonly pattern?: unknown;
  pre_tokenize_text(text: string, options?: unknown): string[];
}
interface ModelView {
  readonly config: { readonly type?: unknown };
  readonly fuse_unk: boolean;
  readonly tokens_to_ids: Map<string, number>;
  readonly unk_token_id: number | undefined;
  readonly merges?: unknown;
  readonly ignore_merges?: unknown;
  readonly end_of_word_suffix?: unknown;
  readonly continuing_subword_suffix?: unknown;
  encode(tokens: string[]): string[];
}
interface TokenizerView {
  readonly normalizer: ((text: string) => string) | null;
  readonly pre_tokenizer: PreTokenizerView | null;
  readonly model: ModelView;
  readonly post_processor: ((tokens: string[], pair: null, addSpecial: boolean) => { tokens: string[] }) | null;
  readonly splitter_unnormalized: SplitterView;
  readonly splitter_normalized: SplitterView;
  readonly added_tokens_map: Map<string, AddedTokenView>;
  readonly remove_space?: unknown;
  readonly do_lowercase_and_remove_accent?: unknown;
}

/**
 * `value instanceof` the library's class `name` (BPE, SplitPreTokenizer, ...). Looked up at run time:
 * the package's type declarations use extensionless paths, so under NodeNext only `Tokenizer` is typed.
 */
function isLibrary(value: unknown, name: string): boolean {
  const cls = (library as unknown as Record<string, unknown>)[name];
  return typeof cls === 'function' && value instanceof (cls as abstract new (...args: never[]) => unknown);
}

interface ByteLevelStep {
  readonly addPrefixSpace: boolean;
  /** The library's own ByteLevel regex when `use_regex` (GPT-2 style configurations), else null. */
  readonly pattern: RegExp | null;
}

export interface FastEncoderOptions {
  /** Bound of the per-pre-token cache, in bytes (keys, ids and per-entry overhead). */
  readonly pieceCacheBytes: number;
}

/** The output buffer is kept between encodings up to this size (256K ids); a larger one is dropped after use. */
const KEEP_OUTPUT_BYTES = 1024 * 1024;

export class FastEncoder {
  private readonly cache: PieceCache;
  private readonly splits: ReadonlyArray<PreTokenizerView>;
  /** BPE in id space for cache misses; null: the library's BPE (see `idBpe`). */
  private readonly bpe: IdBpe | null;
  private readonly unnormalized: AddedTokenSplitter;
  private readonly normalized: AddedTokenSplitter;
  /** A private copy of the regex when the pre-tokenizer is one Isolated Split (Qwen2/3, Llama 3): split while encoding. */
  private readonly isolated: RegExp | null;
  /** The same regex, sticky: tries one position without building a match array (see `splitIsolated`). */
  private readonly sticky: RegExp | null;
  /** Longer sections cannot be an added token: no Map lookup (which would hash the whole section). */
  private readonly maxAddedChars: number;
  private readonly out = new IdBuffer(KEEP_OUTPUT_BYTES);
  private readonly byteLevel: ByteLevelStep;
  /** Ids the post-processor puts around the sequence, with and without special tokens. */
  private readonly wrap: { readonly true: { before: number[]; after: number[] }; readonly false: { before: number[]; after: number[] } };

  private constructor(
    private readonly lib: Tokenizer,
    private readonly view: TokenizerView,
    splits: ReadonlyArray<PreTokenizerView>,
    byteLevelStep: ByteLevelStep,
    options: FastEncoderOptions,
  ) {
    this.cache = new PieceCache(options.pieceCacheBytes);
    this.splits = splits;
    this.bpe = idBpe(view);
    this.unnormalized = new AddedTokenSplitter(view.splitter_unnormalized.trie);
    this.normalized = new AddedTokenSplitter(view.splitter_normalized.trie);
    const only = splits.length === 1 ? splits[0] : undefined;
    const config = only?.config as { invert?: unknown; behavior?: unknown } | undefined;
    this.isolated =
      only &&
      config &&
      !config.invert &&
      String(config.behavior).toLowerCase() !== 'removed' &&
      only.pattern instanceof RegExp &&
      only.pattern.global
        ? new RegExp(only.pattern.source, only.pattern.flags)
        : null;
    this.sticky =
      this.isolated === null ? null : new RegExp(this.isolated.source, this.isolated.flags.replace('g', '').replace('y', '') + 'y');
    let maxAdded = 0;
    for (const content of view.added_tokens_map.keys()) maxAdded = Math.max(maxAdded, content.length);
    this.maxAddedChars = maxAdded;
    this.byteLevel = byteLevelStep;
    this.wrap = { true: this.wrapping(true), false: this.wrapping(false) };
  }

  /** The fast encoder for a loaded library tokenizer, or the reason it does not apply. */
  static create(lib: Tokenizer, options: FastEncoderOptions): FastEncoder | { unsupported: string } {
    const view = lib as unknown as TokenizerView;
    const model = view.model as ModelView | null;
    if (!model || !isLibrary(model, 'BPE') || typeof model.encode !== 'function' || !(model.tokens_to_ids instanceof Map)) {
      return { unsupported: `model ${String(model?.config?.type)} (only BPE)` };
    }
    if (model.fuse_unk) return { unsupported: 'BPE fuse_unk' };
    if (view.remove_space === true || view.do_lowercase_and_remove_accent === true)
      return { unsupported: 'remove_space / do_lowercase_and_remove_accent' };
    if (
      !(view.added_tokens_map instanceof Map) ||
      typeof view.splitter_unnormalized?.trie !== 'object' ||
      typeof view.splitter_normalized?.trie !== 'object'
    ) {
      return { unsupported: 'this @huggingface/tokenizers version (added-token splitters not found)' };
    }
    const pre = view.pre_tokenizer;
    if (!pre) return { unsupported: 'no pre-tokenizer' };
    const steps = isLibrary(pre, 'SequencePreTokenizer') ? (pre.tokenizers ?? []) : [pre];
    const last = steps[steps.length - 1];
    if (!last || !isLibrary(last, 'ByteLevelPreTokenizer')) return { unsupported: 'pre-tokenizer does not end with ByteLevel' };
    const splits = steps.slice(0, -1);
    const other = splits.find((s) => !isLibrary(s, 'SplitPreTokenizer'));
    if (other) return { unsupported: `pre-tokenizer ${String(other.config?.type ?? other.constructor.name)}` };
    const useRegex = last.config.use_regex ?? true;
    if (useRegex && !(last.pattern instanceof RegExp)) return { unsupported: 'ByteLevel regex not found' };
    const step: ByteLevelStep = {
      addPrefixSpace: last.config.add_prefix_space === true,
      pattern: useRegex ? (last.pattern as RegExp) : null,
    };
    if (view.post_processor !== null && typeof view.post_processor !== 'function') return { unsupported: 'post-processor' };
    try {
      return new FastEncoder(lib, view, splits, step, options);
    } catch (error) {
      return { unsupported: error instanceof Error ? error.message : String(error) };
    }
  }

  /** The ids of `text`, equal to `lib.encode(text, { add_special_tokens }).ids`. */
  encode(text: string, addSpecialTokens: boolean): Uint32Array {
    const wrap = addSpecialTokens ? this.wrap.true : this.wrap.false;
    const out = this.out;
    out.reset();
    out.pushAll(wrap.before);
    if (!this.encodeText(text, out)) {
      out.reset();
      return Uint32Array.from(this.lib.encode(text, { add_special_tokens: addSpecialTokens }).ids);
    }
    out.pushAll(wrap.after);
    return out.take();
  }

  /** The added token `text` is, if any (a section longer than every added token is not looked up). */
  private added(text: string): AddedTokenView | undefined {
    return text.length > this.maxAddedChars ? undefined : this.view.added_tokens_map.get(text);
  }

  /** The library's `encode_text`, step by step; false when a piece maps to no id (then the library decides). */
  private encodeText(text: string, out: IdBuffer): boolean {
    const { view } = this;
    const added = (t: string): AddedTokenView | undefined => this.added(t);
    const sections = this.unnormalized.split(text);
    stripAround(sections, added);
    for (let s = 0; s < sections.length; s++) {
      let section = sections[s] as string;
      if (section.length === 0) continue;
      const token = this.added(section);
      if (token) {
        out.push(token.id);
        continue;
      }
      if (view.normalizer !== null) section = view.normalizer(section);
      if (section.length === 0) continue;
      const subsections = this.normalized.split(section);
      stripAround(subsections, added);
      for (const sub of subsections) {
        if (sub.length === 0) continue;
        const addedSub = this.added(sub);
        if (addedSub) {
          out.push(addedSub.id);
          continue;
        }
        if (this.isolated !== null && this.sticky !== null) {
          if (!this.splitIsolated(this.isolated, this.sticky, sub, out)) return false;
          continue;
        }
        let pieces = [sub];
        for (const split of this.splits) pieces = pieces.flatMap((p) => split.pre_tokenize_text(p, { section_index: s }));
        for (const piece of pieces) if (!this.encodePiece(piece, out)) return false;
      }
    }
    return true;
  }

  /**
   * The library's `regex_split` (a Split with behaviour Isolated: matches and the text between them
   * are pre-tokens, empty ones dropped), pre-tokens encoded as they are found instead of collected.
   *
   * `exec` builds a match array (with `index`, `input`, `groups`) per pre-token: ~100 bytes a token
   * of garbage, which is what made the young generation fill every few dozen requests. The Qwen and
   * Llama 3 patterns match every character, so the next match almost always starts where the last
   * ended: the sticky copy's `test` there (no array) finds that same match, since a regex tried at
   * one position finds the same match whether it got there sticky or by a global search. Only
   * when it fails or matches empty does `exec` search on, exactly as before.
   */
  private splitIsolated(re: RegExp, sticky: RegExp, text: string, out: IdBuffer): boolean {
    const n = text.length;
    let prev = 0; // start of the text not yet encoded
    let at = 0; // where the search goes on
    for (;;) {
      if (at < n) {
        sticky.lastIndex = at;
        if (sticky.test(text) && sticky.lastIndex > at) {
          const end = sticky.lastIndex;
          if (prev < at && !this.encodeRange(text, prev, at, out)) return false;
          if (!this.encodeRange(text, at, end, out)) return false;
          prev = at = end;
          continue;
        }
      }
      re.lastIndex = at;
      const m = re.exec(text);
      if (m === null) break;
      const match = m[0];
      if (prev < m.index && !this.encodePiece(text.slice(prev, m.index), out)) return false;
      if (match.length > 0) {
        if (!this.encodePiece(match, out)) return false;
        at = re.lastIndex;
      } else {
        // matchAll's rule for an empty match: move on by one code point (the pattern is unicode).
        at = advance(text, re.lastIndex, re.unicode);
      }
      prev = m.index + match.length;
    }
    if (prev < n && !this.encodePiece(text.slice(prev), out)) return false;
    return true;
  }

  /**
   * `encodePiece(text.slice(start, end))`; when ByteLevel takes the piece as it is (no prefix space,
   * no regex of its own), a cached piece is found without making its string.
   */
  private encodeRange(text: string, start: number, end: number, out: IdBuffer): boolean {
    if (this.byteLevel.pattern === null && !this.byteLevel.addPrefixSpace) {
      const cached = this.cache.lookup(text, start, end);
      if (cached !== undefined) {
        out.pushAll(cached);
        return true;
      }
    }
    return this.encodePiece(text.slice(start, end), out);
  }

  /** One pre-token through ByteLevel and BPE, from the cache when seen before. */
  private encodePiece(piece: string, out: IdBuffer): boolean {
    const { pattern, addPrefixSpace } = this.byteLevel;
    if (addPrefixSpace && !piece.startsWith(' ')) piece = ' ' + piece;
    if (pattern === null) return this.encodeWord(piece, out);
    const words = piece.match(pattern);
    if (words) for (const word of words) if (!this.encodeWord(word, out)) return false;
    return true;
  }

  private encodeWord(word: string, out: IdBuffer): boolean {
    const cached = this.cache.get(word);
    if (cached !== undefined) {
      out.pushAll(cached);
      return true;
    }
    const fromIds = this.bpe?.encode(word);
    if (fromIds !== undefined) {
      out.pushAll(fromIds);
      this.cache.set(word, Uint32Array.from(fromIds));
      return true;
    }
    const { model, added_tokens_map: added } = this.view;
    const tokens = model.encode([byteLevel(word)]);
    const ids = new Uint32Array(tokens.length);
    for (let i = 0; i < tokens.length; i++) {
      const t = tokens[i] as string;
      const id = added.get(t)?.id ?? model.tokens_to_ids.get(t) ?? model.unk_token_id;
      if (id === undefined) return false;
      ids[i] = id;
      out.push(id);
    }
    this.cache.set(word, ids);
    return true;
  }

  /** The post-processor's fixed tokens around a sequence, found by wrapping a marker token. */
  private wrapping(addSpecialTokens: boolean): { before: number[]; after: number[] } {
    const post = this.view.post_processor;
    if (post === null) return { before: [], after: [] };
    const marker = '\u0000spillway-sequence\u0000';
    const tokens = post([marker], null, addSpecialTokens).tokens;
    const at = tokens.indexOf(marker);
    if (at < 0 || tokens.lastIndexOf(marker) !== at) throw new Error('post-processor does not wrap the sequence once');
    const toIds = (list: string[]): number[] =>
      list.map((t) => {
        const id = this.view.added_tokens_map.get(t)?.id ?? this.view.model.tokens_to_ids.get(t) ?? this.view.model.unk_token_id;
        if (id === undefined) throw new Error(`post-processor token ${t} has no id`);
        return id;
      });
    return { before: toIds(tokens.slice(0, at)), after: toIds(tokens.slice(at + 1)) };
  }
}

/**
 * Id-space BPE when it gives the library's ids: no suffixes on subwords, and no added token whose
 * id differs from the vocabulary's for the same string (the library's output mapping prefers the
 * added token; BPE works on the vocabulary).
 */
function idBpe(view: TokenizerView): IdBpe | null {
  const model = view.model;
  if (model.end_of_word_suffix || model.continuing_subword_suffix || !Array.isArray(model.merges)) return null;
  for (const [content, token] of view.added_tokens_map) {
    const vocab = model.tokens_to_ids.get(content);
    if (vocab !== undefined && vocab !== token.id) return null;
  }
  const merges = model.merges as unknown[];
  if (!merges.every((m) => Array.isArray(m) && m.length === 2 && typeof m[0] === 'string' && typeof m[1] === 'string')) return null;
  return IdBpe.create(merges as Array<readonly [string, string]>, (t) => model.tokens_to_ids.get(t), model.ignore_merges === true) ?? null;
}

/**
 * The library's DictionarySplitter over its own trie (same walk: at each position the longest added
 * token starting there), skipping straight to the positions where an added token can start instead
 * of looking every character up in the trie.
 */
class AddedTokenSplitter {
  private readonly first: ReadonlySet<string>;
  private readonly only: string | undefined;

  constructor(private readonly trie: TrieNode) {
    this.first = new Set(Object.keys(trie).filter((k) => k !== 'end'));
    this.only = this.first.size === 1 ? [...this.first][0] : undefined;
  }

  split(text: string): string[] {
    const n = text.length;
    let start = 0;
    let i = this.next(text, 0);
    if (i >= n) return [text];
    const result: string[] = [];
    while (i < n) {
      let node: TrieNode | undefined = this.trie;
      let match: string | undefined;
      for (let j = i; j < n; j++) {
        node = node[text[j] as string] as TrieNode | undefined;
        if (node === undefined) break;
        if (node.end) match = node.end;
      }
      if (match !== undefined) {
        if (i > start) result.push(text.slice(start, i));
        result.push(match);
        i += match.length;
        start = i;
      } else {
        i++;
      }
      i = this.next(text, i);
    }
    if (start < n) result.push(text.slice(start));
    return result;
  }

  /** The first position at or after `from` where an added token could start (n: none). */
  private next(text: string, from: number): number {
    if (this.only !== undefined) {
      const at = text.indexOf(this.only, from);
      return at < 0 ? text.length : at;
    }
    if (this.first.size === 0) return text.length;
    for (let i = from; i < text.length; i++) if (this.first.has(text[i] as string)) return i;
    return text.length;
  }
}

function advance(text: string, index: number, unicode: boolean): number {
  if (!unicode || index + 1 >= text.length) return index + 1;
  const code = text.charCodeAt(index);
  return code >= 0xd800 && code <= 0xdbff && (text.charCodeAt(index + 1) & 0xfc00) === 0xdc00 ? index + 2 : index + 1;
}

/** The library's lstrip/rstrip of the text around an added token (same rule, same order). */
function stripAround(sections: string[], added: (text: string) => AddedTokenView | undefined): void {
  for (let i = 0; i < sections.length; i++) {
    const token = added(sections[i] as string);
    if (!token) continue;
    if (token.lstrip && i > 0) sections[i - 1] = (sections[i - 1] as string).trimEnd();
    if (token.rstrip && i < sections.length - 1) sections[i + 1] = (sections[i + 1] as string).trimStart();
  }
}
