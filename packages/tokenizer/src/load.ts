import { existsSync, readFileSync } from 'node:fs';
import { basename, dirname, join } from 'node:path';
import { Tokenizer } from '@huggingface/tokenizers';
import { ChatTemplate, type ChatMessage, type DeferCheck } from './chat.js';
import { FastEncoder } from './fast.js';
import { presetFiles, TOKENIZER_PRESETS } from './presets.js';
import { parseTokenizerSpec, TokenizerSpecError } from './spec.js';

/** What the EPP and the simulator need of a model's tokenizer. */
export interface PromptTokenizer {
  readonly name: string;
  /** A /v1/completions prompt, with the model's special tokens (a BOS where the model adds one), as vLLM does. */
  encodeText(text: string): number[] | Uint32Array;
  /** /v1/chat/completions messages through the chat template, generation prompt appended, no extra special tokens. */
  encodeChat(messages: ReadonlyArray<ChatMessage>): number[] | Uint32Array;
  /** Token ids back to text (special tokens kept). */
  decode(ids: ArrayLike<number>): string;
  /** The text `encodeChat` tokenizes. */
  renderChat(messages: ReadonlyArray<ChatMessage>): string;
  /**
   * Whether encoding takes the fast path (pre-token cache, same ids as the library); when not,
   * `fastPathUnsupported` names the tokenizer.json component it does not handle.
   */
  readonly fastPath: boolean;
  readonly fastPathUnsupported?: string;
  /** Whether the chat template renders plain conversations by splicing (plain-turns.ts) instead of interpreting. */
  readonly splicesPlainTurns: boolean;
}

export interface LoadTokenizerOptions {
  /** Bound of the pre-token → ids cache, in bytes (default 16 MiB). */
  readonly pieceCacheBytes?: number;
  /** false: always encode with `@huggingface/tokenizers` itself (the reference the fast path equals). */
  readonly fast?: boolean;
  /** Runs the chat template's periodic checks later, off the request path (chat.ts); default: at once. */
  readonly deferCheck?: DeferCheck;
}

export const DEFAULT_PIECE_CACHE_BYTES = 16 * 1024 * 1024;

const SPECIAL_TOKEN_KEYS = ['bos_token', 'eos_token', 'unk_token', 'pad_token', 'sep_token', 'cls_token', 'mask_token'] as const;

function readJson(path: string, what: string): Record<string, unknown> {
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (error) {
    throw new TokenizerSpecError(`cannot read ${what} ${path}: ${error instanceof Error ? error.message : String(error)}`);
  }
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (error) {
    throw new TokenizerSpecError(`${what} ${path} is not JSON: ${error instanceof Error ? error.message : String(error)}`);
  }
  if (value === null || typeof value !== 'object' || Array.isArray(value))
    throw new TokenizerSpecError(`${what} ${path} is not a JSON object`);
  return value as Record<string, unknown>;
}

/** A special token as tokenizer_config.json writes it: a string or an AddedToken object. */
function tokenText(value: unknown): string | undefined {
  if (typeof value === 'string') return value;
  if (value !== null && typeof value === 'object' && typeof (value as { content?: unknown }).content === 'string')
    return (value as { content: string }).content;
  return undefined;
}

/** The config's chat template: a string, or the named-templates list (the one named "default"). */
function configTemplate(config: Record<string, unknown>): string | undefined {
  const t = config['chat_template'];
  if (typeof t === 'string') return t;
  if (Array.isArray(t)) {
    const named = t.find((e: unknown) => (e as { name?: unknown } | null)?.name === 'default') as { template?: unknown } | undefined;
    if (typeof named?.template === 'string') return named.template;
  }
  return undefined;
}

function templateSource(option: string): string {
  if (option.includes('{{') || option.includes('{%')) return option;
  try {
    return readFileSync(option, 'utf8');
  } catch (error) {
    throw new TokenizerSpecError(
      `chatTemplate is neither a Jinja template nor a readable file (${option}): ${error instanceof Error ? error.message : String(error)}`,
    );
  }
}

/**
 * Loads a tokenizer: reads `tokenizer.json` and `tokenizer_config.json` once (synchronously, at
 * start-up) and compiles the chat template. Throws `TokenizerSpecError` naming the bad field or file.
 */
export function loadTokenizer(input: unknown, options: LoadTokenizerOptions = {}): PromptTokenizer {
  const spec = parseTokenizerSpec(input);
  let jsonPath: string;
  let configPath: string | undefined;
  let name: string;
  if (spec.preset !== undefined) {
    const files = presetFiles(spec.preset);
    if (!files) throw new TokenizerSpecError(`unknown tokenizer preset "${spec.preset}" (known: ${TOKENIZER_PRESETS.join(', ')})`);
    jsonPath = files.tokenizerJson;
    configPath = files.tokenizerConfig;
    name = spec.preset;
  } else {
    jsonPath = spec.tokenizerJson as string;
    const beside = join(dirname(jsonPath), 'tokenizer_config.json');
    configPath = spec.tokenizerConfig ?? (existsSync(beside) ? beside : undefined);
    name = basename(dirname(jsonPath)) || basename(jsonPath);
  }
  const tokenizerJson = readJson(jsonPath, 'tokenizer.json');
  if (tokenizerJson['model'] === null || typeof tokenizerJson['model'] !== 'object') {
    throw new TokenizerSpecError(`tokenizer.json ${jsonPath} has no "model" section (is it a Hugging Face tokenizer.json?)`);
  }
  const config = configPath === undefined ? {} : readJson(configPath, 'tokenizer_config.json');
  let tokenizer: Tokenizer;
  try {
    tokenizer = new Tokenizer(tokenizerJson, config);
  } catch (error) {
    throw new TokenizerSpecError(`cannot build a tokenizer from ${jsonPath}: ${error instanceof Error ? error.message : String(error)}`);
  }

  const specials: Record<string, string> = {};
  for (const key of SPECIAL_TOKEN_KEYS) {
    const text = tokenText(config[key]);
    if (text !== undefined) specials[key] = text;
  }
  const source = spec.chatTemplate !== undefined ? templateSource(spec.chatTemplate) : configTemplate(config);
  let template: ChatTemplate | undefined;
  if (source !== undefined) {
    try {
      template = new ChatTemplate(source, specials, options.deferCheck);
    } catch (error) {
      throw new TokenizerSpecError(`chat template of ${name} does not compile: ${error instanceof Error ? error.message : String(error)}`);
    }
  }

  const renderChat = (messages: ReadonlyArray<ChatMessage>): string => {
    if (!template) throw new TokenizerSpecError(`tokenizer ${name} has no chat template (give chatTemplate)`);
    return template.render(messages);
  };
  const fast =
    options.fast === false
      ? { unsupported: 'disabled' }
      : FastEncoder.create(tokenizer, { pieceCacheBytes: options.pieceCacheBytes ?? DEFAULT_PIECE_CACHE_BYTES });
  const encode =
    fast instanceof FastEncoder
      ? (text: string, addSpecialTokens: boolean): number[] | Uint32Array => fast.encode(text, addSpecialTokens)
      : (text: string, addSpecialTokens: boolean): number[] | Uint32Array =>
          tokenizer.encode(text, { add_special_tokens: addSpecialTokens }).ids;
  return {
    name,
    encodeText: (text) => encode(text, true),
    encodeChat: (messages) => encode(renderChat(messages), false),
    fastPath: fast instanceof FastEncoder,
    splicesPlainTurns: template?.splicesPlainTurns === true,
    ...(fast instanceof FastEncoder ? {} : { fastPathUnsupported: fast.unsupported }),
    decode: (ids) => (ids.length === 0 ? '' : tokenizer.decode(Array.from(ids))),
    renderChat,
  };
}
