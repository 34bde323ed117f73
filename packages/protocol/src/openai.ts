// Reads `model` and the prompt text out of OpenAI-compatible request bodies.
import type { ErrorStatus } from './immediate.js';

export type JsonValue = null | boolean | number | string | JsonValue[] | JsonObject;
export interface JsonObject {
  [key: string]: JsonValue;
}

/** The OpenAI API a request path names; undefined for other paths (only `model` is required). */
export type ApiKind = 'completions' | 'chat' | 'responses' | 'embeddings';

export type BodyErrorKind =
  'too-large' | 'invalid-utf8' | 'invalid-json' | 'not-object' | 'missing-model' | 'invalid-model' | 'invalid-shape';

/** Why a request body cannot be routed; `status` is the HTTP status to answer with. */
export class RequestBodyError extends Error {
  override readonly name = 'RequestBodyError';
  readonly status: ErrorStatus;

  constructor(
    readonly kind: BodyErrorKind,
    message: string,
  ) {
    super(message);
    this.status = kind === 'too-large' ? 413 : 400;
  }

  /** `error.code` for the JSON error body. */
  get code(): string {
    return this.kind.replaceAll('-', '_');
  }
}

export interface InferenceBody {
  readonly api: ApiKind | undefined;
  readonly model: string;
  /** Prompt text for prefix-cache affinity: the part of the input a model server would cache. */
  readonly prompt: string;
  /** `"stream": true`: the response will be server-sent events. */
  readonly stream: boolean;
  /** The parsed body, for re-serialisation after a model rewrite. */
  readonly json: JsonObject;
}

export type BodyParseResult =
  { readonly ok: true; readonly body: InferenceBody } | { readonly ok: false; readonly error: RequestBodyError };

/** Matches by suffix (gateways may prefix the path), ignoring any query string. */
export function apiKindForPath(path: string | undefined): ApiKind | undefined {
  if (path === undefined) return undefined;
  const query = path.indexOf('?');
  const bare = query < 0 ? path : path.slice(0, query);
  const trimmed = bare.endsWith('/') ? bare.slice(0, -1) : bare;
  if (trimmed.endsWith('/chat/completions')) return 'chat';
  if (trimmed.endsWith('/completions')) return 'completions';
  if (trimmed.endsWith('/responses')) return 'responses';
  if (trimmed.endsWith('/embeddings')) return 'embeddings';
  return undefined;
}

// fatal: a body with invalid UTF-8 is rejected rather than silently altered by U+FFFD.
const utf8 = new TextDecoder('utf-8', { fatal: true, ignoreBOM: false });

function fail(kind: BodyErrorKind, message: string): BodyParseResult {
  return { ok: false, error: new RequestBodyError(kind, message) };
}

function isObject(value: JsonValue | undefined): value is JsonObject {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/** Parses and validates a request body for the API its path names. */
export function parseInferenceBody(bytes: Uint8Array, path: string | undefined): BodyParseResult {
  let text: string;
  try {
    text = utf8.decode(bytes);
  } catch {
    return fail('invalid-utf8', 'request body is not valid UTF-8');
  }
  let json: JsonValue;
  try {
    json = JSON.parse(text) as JsonValue;
  } catch (error) {
    return fail('invalid-json', `request body is not valid JSON: ${(error as Error).message}`);
  }
  if (!isObject(json)) return fail('not-object', 'request body must be a JSON object');
  const model = json['model'];
  if (model === undefined || model === null || model === '') return fail('missing-model', 'model not found in request body');
  if (typeof model !== 'string') return fail('invalid-model', 'model must be a string');
  const api = apiKindForPath(path);
  const prompt = api === undefined ? '' : promptOf(api, json);
  if (prompt === undefined) return fail('invalid-shape', SHAPE_ERROR[api ?? 'completions']);
  return { ok: true, body: { api, model, prompt, stream: json['stream'] === true, json } };
}

const SHAPE_ERROR: Readonly<Record<ApiKind, string>> = {
  completions: 'invalid completions request: must have a prompt (string or array)',
  chat: 'invalid chat completions request: must have a non-empty messages array of objects',
  responses: 'invalid responses request: must have an input (string or array)',
  embeddings: 'invalid embeddings request: must have an input (string or array)',
};

function promptOf(api: ApiKind, json: JsonObject): string | undefined {
  switch (api) {
    case 'completions':
      return stringOrList(json['prompt']);
    case 'embeddings':
      return stringOrList(json['input']);
    case 'chat':
      return chatPrompt(json['messages']);
    case 'responses':
      return responsesPrompt(json['instructions'], json['input']);
  }
}

/** A string, or a list of strings, of token ids, or of token-id lists. */
function stringOrList(value: JsonValue | undefined): string | undefined {
  if (typeof value === 'string') return value;
  if (!Array.isArray(value)) return undefined;
  const parts: string[] = [];
  for (const item of value) {
    if (typeof item === 'string' || typeof item === 'number') parts.push(String(item));
    else if (Array.isArray(item) && item.every((token) => typeof token === 'number')) parts.push(item.join(' '));
    else return undefined;
  }
  return parts.join('\n');
}

/** Text of a message `content`: a string, or parts of which the text ones count; null is allowed (tool calls). */
function contentText(content: JsonValue | undefined): string | undefined {
  if (typeof content === 'string') return content;
  if (content === null || content === undefined) return '';
  if (!Array.isArray(content)) return undefined;
  let text = '';
  for (const part of content) {
    if (typeof part === 'string') text += part;
    else if (isObject(part)) {
      const value = part['text'];
      if (typeof value === 'string') text += value;
    } else return undefined;
  }
  return text;
}

// Role-tagged lines: a conversation that grows keeps its earlier text as a prefix, which is
// what prefix-cache affinity needs.
function chatPrompt(messages: JsonValue | undefined): string | undefined {
  if (!Array.isArray(messages) || messages.length === 0) return undefined;
  let prompt = '';
  for (const message of messages) {
    if (!isObject(message)) return undefined;
    const text = contentText(message['content']);
    if (text === undefined) return undefined;
    const role = message['role'];
    prompt += `${typeof role === 'string' ? role : ''}: ${text}\n`;
  }
  return prompt;
}

function responsesPrompt(instructions: JsonValue | undefined, input: JsonValue | undefined): string | undefined {
  const prefix = typeof instructions === 'string' ? `system: ${instructions}\n` : '';
  if (typeof input === 'string') return prefix + input;
  if (!Array.isArray(input)) return undefined;
  let prompt = prefix;
  for (const item of input) {
    if (typeof item === 'string') {
      prompt += `${item}\n`;
      continue;
    }
    if (!isObject(item)) return undefined;
    // Items other than messages (function_call_output, reasoning, ...) may lack content.
    const text = contentText(item['content'] ?? item['output'] ?? null);
    if (text === undefined) return undefined;
    const role = item['role'];
    prompt += `${typeof role === 'string' ? role : ''}: ${text}\n`;
  }
  return prompt;
}
