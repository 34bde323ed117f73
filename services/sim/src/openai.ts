import { z } from 'zod';

/** OpenAI-shaped error body, as vLLM returns it. */
export interface ApiError {
  status: number;
  body: { error: { message: string; type: string; code: number } };
}

const ERROR_TYPES: Record<number, string> = {
  400: 'invalid_request_error',
  404: 'not_found_error',
  405: 'invalid_request_error',
  413: 'invalid_request_error',
  429: 'rate_limit_error',
  500: 'server_error',
};

export function apiError(status: number, message: string): ApiError {
  return { status, body: { error: { message, type: ERROR_TYPES[status] ?? 'server_error', code: status } } };
}

const common = {
  model: z.string().min(1),
  stream: z.boolean().nullish(),
  stream_options: z.object({ include_usage: z.boolean().nullish() }).nullish(),
  ignore_eos: z.boolean().nullish(),
  n: z.literal(1).nullish(),
  /** vLLM's cache salt (its OpenAI protocol's `cache_salt`): prefix-cache isolation between tenants. */
  cache_salt: z.string().nullish(),
};

export const CompletionRequest = z.object({
  ...common,
  prompt: z.union([z.string().min(1), z.array(z.string().min(1)).length(1), z.array(z.number().int().nonnegative()).min(1)]),
  max_tokens: z.number().int().min(1).nullish(),
});

const ContentPart = z.object({ type: z.string(), text: z.string().optional() });

export const ChatRequest = z.object({
  ...common,
  messages: z
    .array(z.object({ role: z.string().min(1), content: z.union([z.string(), z.array(ContentPart), z.null()]).optional() }))
    .min(1),
  max_tokens: z.number().int().min(1).nullish(),
  max_completion_tokens: z.number().int().min(1).nullish(),
});

export type CompletionRequest = z.infer<typeof CompletionRequest>;
export type ChatRequest = z.infer<typeof ChatRequest>;

/** The prompt as the engine sees it: text to tokenize, or token ids given directly. */
export type Prompt = { text: string } | { tokenIds: number[] };

export function completionPrompt(r: CompletionRequest): Prompt {
  const p = r.prompt;
  if (typeof p === 'string') return { text: p };
  if (typeof p[0] === 'string') return { text: p[0] };
  return { tokenIds: p as number[] };
}

/** A plain chat template: enough for shared system prompts to share prefix blocks. */
export function chatPrompt(r: ChatRequest): Prompt {
  let text = '';
  for (const m of r.messages) {
    const content = typeof m.content === 'string' ? m.content : (m.content ?? []).map((p) => p.text ?? '').join('');
    text += `<|${m.role}|>\n${content}\n`;
  }
  return { text: `${text}<|assistant|>\n` };
}

/** First zod issue as a one-line message naming the field. */
export function describeIssue(error: z.ZodError): string {
  const issue = error.issues[0];
  if (!issue) return 'invalid request';
  const path = issue.path.join('.');
  return path ? `${path}: ${issue.message}` : issue.message;
}

export interface Usage {
  prompt_tokens: number;
  completion_tokens: number;
  total_tokens: number;
  prompt_tokens_details: { cached_tokens: number };
}

export function usage(prompt: number, completion: number, cached: number): Usage {
  return {
    prompt_tokens: prompt,
    completion_tokens: completion,
    total_tokens: prompt + completion,
    prompt_tokens_details: { cached_tokens: cached },
  };
}

/** What every response object of one request starts with. */
export interface ResponseHead {
  readonly id: string;
  /** Unix seconds. */
  readonly created: number;
  readonly model: string;
}

/** Response shapes of the two endpoints, so the server code does not branch on each field. */
export interface Shapes {
  idPrefix: string;
  chunk(head: ResponseHead, text: string, finish: string | null, first: boolean): object;
  full(head: ResponseHead, text: string, finish: string, u: Usage): object;
  usageChunk(head: ResponseHead, u: Usage): object;
}

export const COMPLETION: Shapes = {
  idPrefix: 'cmpl-',
  chunk: ({ id, created, model }, text, finish) => ({
    id,
    object: 'text_completion',
    created,
    model,
    choices: [{ index: 0, text, logprobs: null, finish_reason: finish, stop_reason: null }],
  }),
  full: ({ id, created, model }, text, finish, u) => ({
    id,
    object: 'text_completion',
    created,
    model,
    choices: [{ index: 0, text, logprobs: null, finish_reason: finish, stop_reason: null }],
    usage: u,
  }),
  usageChunk: ({ id, created, model }, u) => ({ id, object: 'text_completion', created, model, choices: [], usage: u }),
};

export const CHAT: Shapes = {
  idPrefix: 'chatcmpl-',
  chunk: ({ id, created, model }, text, finish, first) => ({
    id,
    object: 'chat.completion.chunk',
    created,
    model,
    choices: [{ index: 0, delta: first ? { role: 'assistant', content: text } : { content: text }, logprobs: null, finish_reason: finish }],
  }),
  full: ({ id, created, model }, text, finish, u) => ({
    id,
    object: 'chat.completion',
    created,
    model,
    choices: [{ index: 0, message: { role: 'assistant', content: text }, logprobs: null, finish_reason: finish }],
    usage: u,
  }),
  usageChunk: ({ id, created, model }, u) => ({ id, object: 'chat.completion.chunk', created, model, choices: [], usage: u }),
};

const WORDS = [' the', ' of', ' and', ' to', ' in', ' is', ' it', ' for', ' on', ' as', ' at', ' by', ' we', ' an', ' be', ' or'];

/** Deterministic filler text, one short word per token. */
export function outputToken(requestNo: number, index: number): string {
  return WORDS[(requestNo * 7 + index) % WORDS.length] as string;
}
