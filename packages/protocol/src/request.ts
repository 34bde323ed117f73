// The complete request body -> what the scheduler needs and what to forward.
import type { RequestHeaders } from './headers.js';
import { parseInferenceBody } from './openai.js';
import type { ApiKind, JsonObject, JsonValue, RequestBodyError } from './openai.js';
import { rewriteModel } from './rewrite.js';
import type { ModelRewriter, Random } from './rewrite.js';

export interface PreparedRequest {
  readonly api: ApiKind | undefined;
  /** The model the client asked for. */
  readonly requestedModel: string;
  /** The model sent upstream, after rewrites. */
  readonly model: string;
  readonly prompt: string;
  /** A chat request's `messages` as parsed (for tokenizing through the model's chat template); undefined for other APIs. */
  readonly messages: readonly JsonValue[] | undefined;
  readonly stream: boolean;
  /** The body to forward. */
  readonly body: Uint8Array;
  readonly bodyChanged: boolean;
  /** The body as the client sent it, parsed (once). Read more of it only when needed. */
  readonly json: JsonObject;
}

export type PrepareResult =
  { readonly ok: true; readonly request: PreparedRequest } | { readonly ok: false; readonly error: RequestBodyError };

/**
 * Parses the body for the API its `:path` names, then applies the model rewrite (the
 * `x-gateway-model-name-rewrite` header first, then the configured rules).
 */
export function prepareRequest(
  bytes: Uint8Array,
  headers: Pick<RequestHeaders, 'path' | 'modelRewrite'>,
  rewriter: ModelRewriter | undefined,
  random: Random,
): PrepareResult {
  const parsed = parseInferenceBody(bytes, headers.path);
  if (!parsed.ok) return parsed;
  const { body } = parsed;
  const target = rewriter === undefined ? (headers.modelRewrite ?? body.model) : rewriter.target(body.model, headers.modelRewrite, random);
  const rewritten = rewriteModel(body, bytes, target);
  return {
    ok: true,
    request: {
      api: body.api,
      requestedModel: body.model,
      model: rewritten.model,
      prompt: body.prompt,
      messages: body.api === 'chat' ? (body.json['messages'] as JsonValue[]) : undefined,
      stream: body.stream,
      body: rewritten.bytes,
      bodyChanged: rewritten.changed,
      json: body.json,
    },
  };
}
