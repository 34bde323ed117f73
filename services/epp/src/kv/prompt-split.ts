/** Completions prompts are split for caching at the first newline after each multiple of this many characters. */
export const TEXT_CHUNK_CHARS = 2048;

export interface ChatMessage {
  role: string;
  content: unknown;
}

/** The messages as the template takes them; undefined when one is not a message or they are too long. */
export function chatMessages(raw: readonly unknown[], maxChars: number): ChatMessage[] | undefined {
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
export function chatSplits(messages: readonly ChatMessage[]): number[] {
  const splits: number[] = [];
  for (let k = messages.length - 1; k >= 1 && splits.length < MAX_CHAT_SPLITS; k--)
    if ((messages[k - 1] as ChatMessage).role !== 'assistant') splits.push(k);
  return splits;
}

/**
 * The cache key parts of a conversation's prefixes: the tokenizer (with a marker of chat), then each
 * message's role and content; the first k messages are `parts[0 .. 1 + 2k)`.
 */
export function chatParts(tokenizer: string, messages: readonly ChatMessage[], upTo: number): string[] {
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
