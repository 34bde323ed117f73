// Model-server connections: a keep-alive pool per endpoint, and one attempt at forwarding,
// classified the way Envoy's retry policy sees it (connect-failure, reset, 5xx, per-try timeout).
import { Pool } from 'undici';
import type { Dispatcher } from 'undici';
import type { Headers } from './mutations.js';
import type { AttemptFailure as RetryableFailure } from './retry-policy.js';

export interface UpstreamRequest {
  readonly method: string;
  readonly path: string;
  readonly headers: Headers;
  /** The body as the EPP returned it; undefined for a request without a body. */
  readonly body: Buffer | undefined;
}

/** An upstream response the exchange has committed to. */
export interface UpstreamResponse {
  readonly statusCode: number;
  readonly headers: Dispatcher.ResponseData['headers'];
  /** No body follows (HEAD, 204, 304, content-length 0). */
  readonly bodiless: boolean;
  /** The body, as it arrives. */
  readonly body: AsyncIterable<Uint8Array>;
  /** Stops reading the body and drops the connection (the exchange ended early). */
  discard(): void;
}

/** Why an attempt failed: what the retry policy judges, or our own abort (client gone, timeout). */
export type AttemptFailure = RetryableFailure | 'aborted';

export type AttemptResult =
  | { readonly ok: true; readonly response: UpstreamResponse }
  | { readonly ok: false; readonly reason: AttemptFailure; readonly message: string };

const CONNECT_ERRORS = new Set(['ECONNREFUSED', 'EHOSTUNREACH', 'ENETUNREACH', 'EADDRNOTAVAIL', 'ENOTFOUND', 'UND_ERR_CONNECT_TIMEOUT']);
const TIMEOUT_ERRORS = new Set(['UND_ERR_HEADERS_TIMEOUT', 'UND_ERR_BODY_TIMEOUT']);

export interface UpstreamOptions {
  readonly connectTimeoutMs: number;
  /**
   * Per attempt: connect and response headers (until the attempt is committed); 0 = no limit
   * beyond the connect timeout. Never applies to the body.
   */
  readonly perTryTimeoutMs: number;
}

/**
 * Sends requests to model servers. An attempt is *committed* when its response headers arrive, as
 * Envoy's router commits (Router::Filter::onUpstreamHeaders): from then on the response goes to
 * the filters and the client, and a failure while its body streams (a model server killed with
 * streams open: vLLM flushes a streaming request's headers before its first token) cuts the
 * client's response instead of moving to another endpoint.
 */
export class Upstreams {
  readonly #pools = new Map<string, Pool>();
  readonly #options: UpstreamOptions;

  constructor(options: UpstreamOptions) {
    this.#options = options;
  }

  /** Sends the request to one endpoint; resolves once the attempt is committed or failed. */
  async attempt(address: string, request: UpstreamRequest, signal: AbortSignal): Promise<AttemptResult> {
    // Not AbortSignal.timeout: undici keeps the request's signal for the whole body, and a per-try
    // limit must never cut a long stream once it has started.
    const perTry = new AbortController();
    const timer = this.#options.perTryTimeoutMs > 0 ? setTimeout(() => perTry.abort(), this.#options.perTryTimeoutMs) : undefined;
    const combined = AbortSignal.any([signal, perTry.signal]);
    const headers: string[] = [];
    for (const [name, value] of request.headers) headers.push(name, value);
    if (request.body !== undefined) headers.push('content-length', String(request.body.length));
    let data: Dispatcher.ResponseData | undefined;
    try {
      data = await this.#pool(address).request({
        method: request.method as Dispatcher.HttpMethod,
        path: request.path,
        headers,
        body: request.body ?? null,
        signal: combined,
        // Streams (SSE) may pause between tokens for as long as the model needs; the overall
        // request deadline, not an idle timer, bounds them.
        headersTimeout: 0,
        bodyTimeout: 0,
      });
      const bodiless =
        request.method === 'HEAD' || data.statusCode === 204 || data.statusCode === 304 || data.headers['content-length'] === '0';
      const body = data.body;
      const discard = (): void => {
        if (body.readableEnded || body.destroyed) return;
        // Destroying emits an abort error; nobody is left to care about it.
        body.on('error', () => undefined);
        body.destroy();
      };
      return { ok: true, response: { statusCode: data.statusCode, headers: data.headers, bodiless, body, discard } };
    } catch (error) {
      if (data !== undefined && !data.body.destroyed) data.body.destroy();
      if (signal.aborted) return { ok: false, reason: 'aborted', message: 'request aborted' };
      if (perTry.signal.aborted)
        return { ok: false, reason: 'timeout', message: `no response within the ${this.#options.perTryTimeoutMs} ms per-try timeout` };
      const code = (error as { code?: unknown }).code;
      const message = error instanceof Error ? error.message : String(error);
      if (typeof code === 'string' && CONNECT_ERRORS.has(code))
        return { ok: false, reason: 'connect-failure', message: `${code}: ${message}` };
      if (typeof code === 'string' && TIMEOUT_ERRORS.has(code)) return { ok: false, reason: 'timeout', message };
      const before = data === undefined ? 'before the response headers' : 'after the response headers, before the body';
      return { ok: false, reason: 'reset', message: `${typeof code === 'string' ? `${code}: ` : ''}${message} (${before})` };
    } finally {
      clearTimeout(timer);
    }
  }

  async close(): Promise<void> {
    const pools = [...this.#pools.values()];
    this.#pools.clear();
    await Promise.all(pools.map((pool) => pool.destroy()));
  }

  #pool(address: string): Pool {
    let pool = this.#pools.get(address);
    if (pool === undefined) {
      pool = new Pool(`http://${address}`, { connect: { timeout: this.#options.connectTimeoutMs }, keepAliveTimeout: 4_000 });
      this.#pools.set(address, pool);
    }
    return pool;
  }
}
