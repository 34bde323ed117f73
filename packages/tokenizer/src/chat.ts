import { Template } from '@huggingface/jinja';
import { isPlain, probePlainTurns, splice, type PlainTurns, type TextMessage } from './plain-turns.js';

export interface ChatMessage {
  readonly role: string;
  readonly content?: unknown;
}

/**
 * A message's content as the template sees it, the way vLLM renders a "string"-content template:
 * a string as is; an array of OpenAI content parts as its text parts joined by newlines (other
 * parts carry no text); anything else (null for an assistant's tool call) as the empty string.
 */
export function messageText(content: unknown): string {
  if (typeof content === 'string') return content;
  if (!Array.isArray(content)) return '';
  const texts: string[] = [];
  for (const part of content) {
    if (typeof part === 'string') texts.push(part);
    else if (part !== null && typeof part === 'object' && typeof (part as { text?: unknown }).text === 'string')
      texts.push((part as { text: string }).text);
  }
  return texts.join('\n');
}

/** A spliced render is compared with the template's this often (after the first ones, which always are). */
const VERIFY_FIRST = 16;
const VERIFY_EVERY = 256;

/**
 * Runs a task later, off the request path (the EPP passes `setImmediate`). The package does no I/O
 * and keeps no timers: whoever owns the event loop decides when.
 */
export type DeferCheck = (check: () => void) => void;

/**
 * A compiled chat template. Rendered as transformers' `apply_chat_template` (which vLLM calls for
 * /v1/chat/completions): the messages, `add_generation_prompt: true`, and the tokenizer's special
 * tokens (bos_token, eos_token, ...) as variables (the Jinja package brings `raise_exception`).
 *
 * A plain conversation (an optional system message and user messages, nothing but roles and text)
 * is rendered by splicing the pieces the template was found to put around each message
 * (plain-turns.ts) — the same string, without the interpreter. The first spliced renders, and one in
 * VERIFY_EVERY after, are compared with the template's own; a rule that ever disagrees is dropped.
 *
 * With `defer`, the checks after the first VERIFY_FIRST run later: interpreting a long conversation
 * costs more than the whole tokenization (~0.5–1 ms for 10,000 characters), and one request in
 * VERIFY_EVERY paying it was, with GC, what set the request path's p99. The spliced text is returned
 * at once; if the late check disagrees the rule is dropped, so that one request's token ids were
 * wrong — a routing estimate (the prefix-cache score), not what the model server tokenizes.
 */
export class ChatTemplate {
  private readonly template: Template;
  private turns: PlainTurns | undefined;
  private spliced = 0;

  constructor(
    source: string,
    private readonly specialTokens: Readonly<Record<string, string>>,
    private readonly defer?: DeferCheck,
  ) {
    this.template = new Template(source);
    this.turns = probePlainTurns((messages) => this.interpret(messages));
  }

  /** Whether plain conversations are spliced (for the start-up log and tests). */
  get splicesPlainTurns(): boolean {
    return this.turns !== undefined;
  }

  render(messages: ReadonlyArray<ChatMessage>): string {
    const normalized = messages.map((m) => ({ ...(m as object), role: m.role, content: messageText(m.content) }));
    const turns = this.turns;
    if (turns !== undefined && normalized.every(isPlain)) {
      const text = splice(turns, normalized);
      if (text !== undefined) {
        const n = this.spliced++;
        if (n >= VERIFY_FIRST && n % VERIFY_EVERY !== 0) return text;
        if (n >= VERIFY_FIRST && this.defer !== undefined) {
          this.defer(() => {
            if (this.turns === turns && this.interpret(normalized) !== text) this.turns = undefined;
          });
          return text;
        }
        const rendered = this.interpret(normalized);
        if (rendered !== text) this.turns = undefined;
        return rendered;
      }
    }
    return this.interpret(normalized);
  }

  private interpret(messages: ReadonlyArray<TextMessage>): string {
    return this.template.render({
      ...this.specialTokens,
      messages: messages as TextMessage[],
      add_generation_prompt: true,
    });
  }
}
