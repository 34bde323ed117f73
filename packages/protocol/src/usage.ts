// Token usage from an OpenAI-compatible response body, read from its last bytes.
import { z } from 'zod';

/** Token counts of one response, from its `usage` object. */
export interface TokenUsage {
  readonly inputTokens: number;
  readonly outputTokens: number;
  /** Prompt tokens the server had cached, when it says. */
  readonly cachedTokens: number | undefined;
}

/** Bytes of the response's end that are kept: the final `usage` object and then some. */
export const USAGE_TAIL_BYTES = 8192;

const count = z.number().int().nonnegative().max(1e12);
const details = z.object({ cached_tokens: count.nullish() }).nullish();
// Chat and completions name them prompt/completion tokens, the Responses API input/output tokens.
const usageSchema = z
  .object({
    prompt_tokens: count.optional(),
    completion_tokens: count.optional(),
    input_tokens: count.optional(),
    output_tokens: count.optional(),
    prompt_tokens_details: details,
    input_tokens_details: details,
  })
  .transform((u, ctx): TokenUsage => {
    const inputTokens = u.prompt_tokens ?? u.input_tokens;
    const outputTokens = u.completion_tokens ?? u.output_tokens;
    if (inputTokens === undefined || outputTokens === undefined) {
      ctx.addIssue({ code: 'custom', message: 'usage without input and output token counts' });
      return z.NEVER;
    }
    const cachedTokens = u.prompt_tokens_details?.cached_tokens ?? u.input_tokens_details?.cached_tokens ?? undefined;
    return { inputTokens, outputTokens, cachedTokens };
  });

const USAGE_KEY = /"usage"\s*:\s*\{/g;

/**
 * Keeps the last USAGE_TAIL_BYTES of a response body, whatever its length, in one fixed buffer
 * (no copy beyond the chunk itself), and finds the token usage there once the body is complete.
 * Servers put `usage` at the end: last in a JSON response, in the final event of an SSE stream
 * (`stream_options.include_usage`, or vLLM's continuous usage stats, of which the last one counts),
 * or in the Responses API's `response.completed` event. A `"usage"` inside generated text is
 * escaped (`\"usage\"`) and therefore not taken for the key.
 */
export class UsageTail {
  private buffer: Uint8Array | undefined;
  /** Bytes written so far (the buffer holds the last min(total, size) of them). */
  private total = 0;

  constructor(private readonly size = USAGE_TAIL_BYTES) {}

  /** Bytes of the body seen so far. */
  get bytes(): number {
    return this.total;
  }

  push(chunk: Uint8Array): void {
    if (chunk.length === 0) return;
    const size = this.size;
    const buffer = (this.buffer ??= new Uint8Array(size));
    const take = chunk.length > size ? chunk.subarray(chunk.length - size) : chunk;
    const start = (this.total + (chunk.length - take.length)) % size;
    const first = Math.min(take.length, size - start);
    buffer.set(take.subarray(0, first), start);
    if (first < take.length) buffer.set(take.subarray(first), 0);
    this.total += chunk.length;
  }

  /** The body's last bytes, in order. */
  tail(): Uint8Array {
    const buffer = this.buffer;
    if (buffer === undefined) return new Uint8Array(0);
    if (this.total <= this.size) return buffer.subarray(0, this.total);
    const start = this.total % this.size;
    const out = new Uint8Array(this.size);
    out.set(buffer.subarray(start), 0);
    out.set(buffer.subarray(0, start), this.size - start);
    return out;
  }

  /** The last valid `usage` object in the kept tail; undefined when there is none. */
  usage(): TokenUsage | undefined {
    return findUsage(new TextDecoder().decode(this.tail()));
  }
}

/** The last `"usage": {...}` object of `text` with valid token counts (earlier ones are superseded). */
export function findUsage(text: string): TokenUsage | undefined {
  const starts: number[] = [];
  for (const match of text.matchAll(USAGE_KEY)) {
    if (match.index > 0 && text[match.index - 1] === '\\') continue;
    starts.push(match.index + match[0].length - 1);
  }
  for (let i = starts.length - 1; i >= 0; i--) {
    const object = balancedObject(text, starts[i] as number);
    if (object === undefined) continue;
    let parsed: unknown;
    try {
      parsed = JSON.parse(object);
    } catch {
      continue;
    }
    const usage = usageSchema.safeParse(parsed);
    if (usage.success) return usage.data;
  }
  return undefined;
}

/** The JSON object starting at `open` (a `{`), through its matching `}`, minding strings; undefined if cut off. */
function balancedObject(text: string, open: number): string | undefined {
  let depth = 0;
  let inString = false;
  for (let i = open; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (inString) {
      if (c === 0x5c)
        i++; // backslash: skip the escaped character
      else if (c === 0x22) inString = false;
      continue;
    }
    if (c === 0x22) inString = true;
    else if (c === 0x7b) depth++;
    else if (c === 0x7d && --depth === 0) return text.slice(open, i + 1);
  }
  return undefined;
}
