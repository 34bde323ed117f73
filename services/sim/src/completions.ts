import type { IncomingMessage, ServerResponse } from 'node:http';
import { blockHashes, hashString, tokenize } from '@spillway/engine';
import type { RejectReason, Sequence } from '@spillway/engine';
import type { ChatMessage, PromptTokenizer } from '@spillway/tokenizer';
import type { Logger } from 'pino';
import { readJson, sendError, sendJson } from './http.js';
import type { EngineObserver } from './metrics.js';
import {
  CHAT,
  COMPLETION,
  ChatRequest,
  CompletionRequest,
  apiError,
  chatPrompt,
  completionPrompt,
  describeIssue,
  outputToken,
  usage,
} from './openai.js';
import type { ApiError, Prompt, Shapes } from './openai.js';
import type { LiveRequest, RealtimeEngine } from './runner.js';

/** One data-parallel rank as the request path sees it: its engine and its metric series. */
export interface SimRank {
  runner: RealtimeEngine;
  observe: EngineObserver;
}

export interface CompletionContext {
  model: string;
  loras: ReadonlySet<string>;
  /** The data-parallel ranks (one without data parallelism). */
  ranks: readonly SimRank[];
  /** Whether this request should fail (--error-rate); seeded, so a run is repeatable. */
  errorInjected(): boolean;
  logger: Logger;
  /** The model's tokenizer (`--tokenizer`); absent: the engine's toy tokenizer. */
  tokenizer?: PromptTokenizer | undefined;
}

const DEFAULT_MAX_TOKENS = { completion: 16, chat: 128 } as const;
let requestCounter = 0;

const REJECT_STATUS: Record<RejectReason, ApiError> = {
  'queue-full': apiError(429, 'the waiting queue is full, try again later'),
  'too-long': apiError(400, 'prompt plus max_tokens exceeds the KV-cache capacity of this server'),
  'lora-disabled': apiError(400, 'LoRA adapters are not enabled on this server'),
  invalid: apiError(400, 'invalid prompt or max_tokens'),
};

interface Parsed {
  model: string;
  prompt: Prompt;
  /** Chat requests: the messages, for a real tokenizer's chat template. */
  messages?: ReadonlyArray<ChatMessage>;
  maxTokens: number;
  stream: boolean;
  includeUsage: boolean;
  cacheSalt: string | undefined;
}

/** vLLM refuses an empty salt (its protocol's `check_cache_salt_support`), with this message. */
function saltOf(salt: string | null | undefined): string | undefined | ApiError {
  if (salt === undefined || salt === null) return undefined;
  if (salt.length === 0) return apiError(400, "Parameter 'cache_salt' must be a non-empty string if provided.");
  return salt;
}

function parse(kind: 'completion' | 'chat', body: unknown): Parsed | ApiError {
  if (kind === 'completion') {
    const r = CompletionRequest.safeParse(body);
    if (!r.success) return apiError(400, describeIssue(r.error));
    const d = r.data;
    const cacheSalt = saltOf(d.cache_salt);
    if (typeof cacheSalt === 'object') return cacheSalt;
    return {
      cacheSalt,
      model: d.model,
      prompt: completionPrompt(d),
      maxTokens: d.max_tokens ?? DEFAULT_MAX_TOKENS.completion,
      stream: d.stream ?? false,
      includeUsage: d.stream_options?.include_usage ?? false,
    };
  }
  const r = ChatRequest.safeParse(body);
  if (!r.success) return apiError(400, describeIssue(r.error));
  const d = r.data;
  const cacheSalt = saltOf(d.cache_salt);
  if (typeof cacheSalt === 'object') return cacheSalt;
  return {
    cacheSalt,
    model: d.model,
    prompt: chatPrompt(d),
    messages: d.messages,
    maxTokens: d.max_completion_tokens ?? d.max_tokens ?? DEFAULT_MAX_TOKENS.chat,
    stream: d.stream ?? false,
    includeUsage: d.stream_options?.include_usage ?? false,
  };
}

/**
 * The prompt's token ids: given ids as they are; otherwise the model's tokenizer when configured
 * (chat through its template, as vLLM), else the engine's toy tokenizer.
 */
function promptTokens(tokenizer: PromptTokenizer | undefined, p: Parsed): ArrayLike<number> | ApiError {
  if ('tokenIds' in p.prompt) return p.prompt.tokenIds;
  if (!tokenizer) return tokenize(p.prompt.text);
  try {
    return p.messages ? tokenizer.encodeChat(p.messages) : tokenizer.encodeText(p.prompt.text);
  } catch (error) {
    return apiError(400, `cannot tokenize the prompt: ${error instanceof Error ? error.message : String(error)}`);
  }
}

/**
 * The rank a request goes to, as vLLM's API server picks the engine of a data-parallel deployment
 * (`vllm/v1/engine/core_client.py`, `DPLBAsyncMPClient.get_core_engine_for_request`): the rank in
 * the request's `X-data-parallel-rank` header when it names one, else the least loaded by
 * `waiting * 4 + running`, lowest rank first among equals. (vLLM scores the counts its engines last
 * reported; here they are exact.) Undefined for a header naming no rank.
 */
export function pickRank(ranks: readonly SimRank[], header: string | string[] | undefined): SimRank | undefined {
  if (header !== undefined) {
    const rank = Number(Array.isArray(header) ? header[0] : header);
    return Number.isInteger(rank) ? ranks[rank] : undefined;
  }
  let best = ranks[0];
  let bestScore = Number.POSITIVE_INFINITY;
  for (const rank of ranks) {
    const { waiting, running } = rank.runner.engine.stats();
    const score = waiting * 4 + running;
    if (score < bestScore) {
      best = rank;
      bestScore = score;
    }
  }
  return best;
}

/** The seed of a request's block hashes: 0 for the base model without a salt, else what sets its blocks apart. */
function hashSeed(lora: string | undefined, salt: string | undefined): number {
  if (salt === undefined) return lora === undefined ? 0 : hashString(lora);
  return hashString(`${lora ?? ''}\u0000cache_salt\u0000${salt}`);
}

/** POST /v1/completions and /v1/chat/completions, streaming or not. */
export async function handleCompletion(
  ctx: CompletionContext,
  kind: 'completion' | 'chat',
  req: IncomingMessage,
  res: ServerResponse,
): Promise<void> {
  const body = await readJson(req);
  if (!body.ok) return sendError(res, body.error);
  const p = parse(kind, body.value);
  if ('status' in p) return sendError(res, p);
  if (p.model !== ctx.model && !ctx.loras.has(p.model)) return sendError(res, apiError(404, `The model \`${p.model}\` does not exist.`));
  if (ctx.errorInjected()) return sendError(res, apiError(500, 'injected failure (--error-rate)'));

  const rank = pickRank(ctx.ranks, req.headers['x-data-parallel-rank']);
  if (rank === undefined) return sendError(res, apiError(400, `X-data-parallel-rank must name one of ${ctx.ranks.length} ranks`));
  const { runner, observe } = rank;
  const shapes: Shapes = kind === 'chat' ? CHAT : COMPLETION;
  const lora = p.model === ctx.model ? undefined : p.model;
  const tokens = promptTokens(ctx.tokenizer, p);
  if ('status' in tokens) return sendError(res, tokens);
  const n = ++requestCounter;
  const id = `${shapes.idPrefix}${n.toString(16)}`;
  const head = { id, created: Math.floor(Date.now() / 1000), model: p.model };
  let text = '';

  const write = (obj: object): void => {
    if (!res.destroyed && !res.writableEnded) res.write(`data: ${JSON.stringify(obj)}\n\n`);
  };
  const live: LiveRequest = {
    promptTokens: tokens.length,
    tokenIds: tokens,
    outputTokens: p.maxTokens,
    // Adapters never share cache blocks with the base model or each other, nor salted requests with
    // others (vLLM folds the LoRA name and the salt into the block hashes as extra keys).
    blockHashes: blockHashes(tokens, runner.engine.config.blockSize, hashSeed(lora, p.cacheSalt)),
    ...(lora === undefined ? {} : { lora }),
    ...(p.cacheSalt === undefined ? {} : { cacheSalt: p.cacheSalt }),
    onToken(seq, _at) {
      // Prefill: what the engine's stats add at this same token (prefillSumMs), so the histogram agrees with them.
      if (seq.generated === 1)
        observe.firstToken((seq.firstTokenAt - seq.submittedAt) / 1000, seq.queueMs / 1000, (seq.firstTokenAt - seq.admittedAt) / 1000);
      else observe.token(seq.lastItlMs / 1000);
      const tok = outputToken(n, seq.generated - 1);
      const last = seq.generated === seq.request.outputTokens;
      if (p.stream) write(shapes.chunk(head, tok, last ? 'length' : null, seq.generated === 1));
      else text += tok;
    },
    onFinish(seq, _at) {
      const tpot = seq.generated > 1 ? (seq.finishedAt - seq.firstTokenAt) / (seq.generated - 1) / 1000 : undefined;
      observe.finish((seq.finishedAt - seq.submittedAt) / 1000, 'length', tpot);
      const u = usage(seq.request.promptTokens, seq.generated, seq.cachedTokens);
      if (p.stream) {
        if (p.includeUsage) write(shapes.usageChunk(head, u));
        if (!res.destroyed && !res.writableEnded) res.end('data: [DONE]\n\n');
      } else if (!res.destroyed && !res.writableEnded) {
        sendJson(res, 200, shapes.full(head, text, 'length', u));
      }
    },
  };

  const seq: Sequence<LiveRequest> = runner.submit(live);
  if (seq.state === 'rejected') {
    ctx.logger.debug({ id, reason: seq.rejectReason }, 'request rejected');
    return sendError(res, REJECT_STATUS[seq.rejectReason ?? 'invalid']);
  }
  // A client that goes away must not keep holding a batch slot and KV blocks.
  res.on('close', () => {
    if (seq.state === 'waiting' || seq.state === 'running') {
      ctx.logger.debug({ id, generated: seq.generated }, 'client went away; request cancelled');
      runner.cancel(seq);
    }
  });
  if (p.stream && seq.state !== 'finished') {
    res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache', connection: 'keep-alive' });
    res.flushHeaders();
  }
}
