// Model-server connections: a keep-alive pool per endpoint, and one attempt at forwarding,
// classified the way Envoy's retry policy sees it (connect-failure, reset, 5xx, per-try timeout).
import { Pool } from 'undici';
import type { Dispatcher } from 'undici';
import type { Headers } from './mutations.js';

export interface UpstreamRequest {
  readonly method: string;
  readonly path: string;
  readonly headers: Headers;
  /** The body as the EPP returned it; undefined for a request without a body. */
  readonly body: Buffer | undefined;
}

export type AttemptResult =
  | { readonly ok: true; readonly response: Dispatcher.ResponseData }
  | { readonly ok: false; readonly reason: 'connect-failure' | 'reset' | 'timeout' | 'aborted'; readonly message: string };

const CONNECT_ERRORS = new Set(['ECONNREFUSED', 'EHOSTUNREACH', 'ENETUNREACH', 'EADDRNOTAVAIL', 'ENOTFOUND', 'UND_ERR_CONNECT_TIMEOUT']);
const TIMEOUT_ERRORS = new Set(['UND_ERR_HEADERS_TIMEOUT', 'UND_ERR_BODY_TIMEOUT']);

export interface UpstreamOptions {
  readonly connectTimeoutMs: number;
  /** Connect plus time to response headers, per attempt; 0 = no limit beyond the connect timeout. */
  readonly perTryTimeoutMs: number;
}

export class Upstreams {
  readonly #pools = new Map<string, Pool>();
  readonly #options: UpstreamOptions;

  constructor(options: UpstreamOptions) {
    this.#options = options;
  }

  /** Sends the request to one endpoint and waits for its response headers. */
  async attempt(address: string, request: UpstreamRequest, signal: AbortSignal): Promise<AttemptResult> {
    const perTry = this.#options.perTryTimeoutMs > 0 ? AbortSignal.timeout(this.#options.perTryTimeoutMs) : undefined;
    const combined = perTry === undefined ? signal : AbortSignal.any([signal, perTry]);
    const headers: string[] = [];
    for (const [name, value] of request.headers) headers.push(name, value);
    if (request.body !== undefined) headers.push('content-length', String(request.body.length));
    try {
      const response = await this.#pool(address).request({
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
      return { ok: true, response };
    } catch (error) {
      if (signal.aborted) return { ok: false, reason: 'aborted', message: 'request aborted' };
      if (perTry?.aborted === true) return { ok: false, reason: 'timeout', message: `no response headers within ${this.#options.perTryTimeoutMs} ms` };
      const code = (error as { code?: unknown }).code;
      const message = error instanceof Error ? error.message : String(error);
      if (typeof code === 'string' && CONNECT_ERRORS.has(code)) return { ok: false, reason: 'connect-failure', message: `${code}: ${message}` };
      if (typeof code === 'string' && TIMEOUT_ERRORS.has(code)) return { ok: false, reason: 'timeout', message };
      return { ok: false, reason: 'reset', message: typeof code === 'string' ? `${code}: ${message}` : message };
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
