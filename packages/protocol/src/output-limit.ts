// The output limit an OpenAI-compatible request body sets: how many tokens the model may generate.
import type { ApiKind, JsonObject } from './openai.js';

/** Fields that limit a response's output tokens, by API, first present wins (chat's newer name first). */
const LIMIT_FIELDS: Readonly<Record<ApiKind, readonly string[]>> = {
  completions: ['max_tokens'],
  chat: ['max_completion_tokens', 'max_tokens'],
  responses: ['max_output_tokens'],
  embeddings: [],
};

/**
 * The body's output limit: `max_tokens` (completions), `max_completion_tokens` or the older
 * `max_tokens` (chat), `max_output_tokens` (responses). Undefined when absent or not a whole
 * number of at least 1: such a body is the model server's to refuse, and an estimate built on it
 * falls back to its default. Other paths (no known API) say nothing.
 */
export function outputLimitOf(api: ApiKind | undefined, json: JsonObject): number | undefined {
  if (api === undefined) return undefined;
  for (const field of LIMIT_FIELDS[api]) {
    const value = json[field];
    if (value === undefined || value === null) continue;
    return typeof value === 'number' && Number.isSafeInteger(value) && value >= 1 ? value : undefined;
  }
  return undefined;
}
