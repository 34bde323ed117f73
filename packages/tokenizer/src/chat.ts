import { Template } from '@huggingface/jinja';

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

/**
 * A compiled chat template. Rendered as transformers' `apply_chat_template` (which vLLM calls for
 * /v1/chat/completions): the messages, `add_generation_prompt: true`, and the tokenizer's special
 * tokens (bos_token, eos_token, ...) as variables (the Jinja package brings `raise_exception`).
 */
export class ChatTemplate {
  private readonly template: Template;

  constructor(
    source: string,
    private readonly specialTokens: Readonly<Record<string, string>>,
  ) {
    this.template = new Template(source);
  }

  render(messages: ReadonlyArray<ChatMessage>): string {
    const normalized = messages.map((m) => ({ ...(m as object), role: m.role, content: messageText(m.content) }));
    return this.template.render({
      ...this.specialTokens,
      messages: normalized,
      add_generation_prompt: true,
    });
  }
}
