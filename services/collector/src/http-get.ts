import { Agent, errors as undiciErrors, type Dispatcher } from 'undici';

export type GetFailureReason = 'timeout' | 'connect' | 'http-status' | 'too-large';

export class GetError extends Error {
  override readonly name = 'GetError';
  constructor(
    readonly reason: GetFailureReason,
    message: string,
  ) {
    super(message);
  }
}

/**
 * One keep-alive connection pool for every scrape and probe. A model server is asked at most one
 * thing at a time per purpose, so a couple of sockets per origin suffice; pipelining stays off so a
 * stalled response never holds up the next request behind it.
 */
export function createAgent(): Agent {
  return new Agent({ connections: 4, pipelining: 1, keepAliveTimeout: 30_000, keepAliveMaxTimeout: 60_000, connect: { timeout: 5_000 } });
}

/** Bodies beyond this are refused (callers pass their own, smaller limit where they have one). */
export const MAX_BODY_BYTES = 16 * 1024 * 1024;

/** One GET: where to, and its bounds. */
export interface GetRequest {
  readonly origin: string;
  readonly path: string;
  readonly timeoutMs: number;
  readonly maxBytes: number;
}

/** What a non-2xx answer's body may hold and still be read to its end, so its keep-alive socket can be reused. */
const DRAIN_LIMIT_BYTES = 64 * 1024;

/**
 * GETs `origin` + `path` and hands the body to `onChunk` piece by piece as it arrives, so nothing
 * is buffered here; throws GetError. The timeout covers the whole exchange (connect, headers,
 * body), so a server that accepts and never answers, or trickles its body, costs at most
 * `timeoutMs`. Reading stops (and the connection is dropped) once `maxBytes` have arrived, or when
 * `onChunk` throws: that error is rethrown as is. A non-2xx answer's body is read and dropped
 * (up to 64 KiB, else the connection is dropped) before it fails as `http-status`.
 *
 * Built on undici's dispatch handler rather than `request()`: a scrape reads its body once, in
 * order, straight into the filter, and request()'s body stream, async iteration, abort signal and
 * promise per chunk cost about as much CPU as the rest of the exchange (half a plain GET's, in
 * `npm run bench -- collector`).
 */
export function getStreamed(dispatcher: Dispatcher, request: GetRequest, onChunk: (chunk: Buffer) => void): Promise<void> {
  return new Promise<void>((resolve, reject) => new StreamedGet(request, onChunk, resolve, reject).start(dispatcher));
}

/** One getStreamed exchange: settles its promise once, whatever undici reports after that. */
class StreamedGet implements Dispatcher.DispatchHandler {
  private controller: Dispatcher.DispatchController | undefined;
  private timer: NodeJS.Timeout | undefined;
  private settled = false;
  private status = 0;
  private size = 0;

  constructor(
    private readonly request: GetRequest,
    private readonly onChunk: (chunk: Buffer) => void,
    private readonly resolve: () => void,
    private readonly reject: (error: unknown) => void,
  ) {}

  start(dispatcher: Dispatcher): void {
    const { origin, path, timeoutMs } = this.request;
    this.timer = setTimeout(() => this.fail(new GetError('timeout', `no complete answer within ${timeoutMs} ms`)), timeoutMs);
    try {
      dispatcher.dispatch({ origin, path, method: 'GET' }, this);
    } catch (error) {
      this.fail(new GetError('connect', (error as Error).message));
    }
  }

  onRequestStart(controller: Dispatcher.DispatchController): void {
    this.controller = controller;
    // Timed out (or failed) while still queued for a socket: never send it.
    if (this.settled) controller.abort(new Error('abandoned'));
  }

  onResponseStart(_controller: Dispatcher.DispatchController, statusCode: number): void {
    this.status = statusCode;
  }

  onResponseData(_controller: Dispatcher.DispatchController, chunk: Buffer): void {
    if (this.settled || this.status < 200) return;
    this.size += chunk.length;
    if (this.status > 299) {
      if (this.size > DRAIN_LIMIT_BYTES) this.fail(new GetError('http-status', `HTTP ${this.status}`));
      return;
    }
    const { maxBytes } = this.request;
    if (this.size > maxBytes) {
      this.fail(new GetError('too-large', `body exceeds ${maxBytes} bytes`));
      return;
    }
    try {
      this.onChunk(chunk);
    } catch (error) {
      this.fail(error);
    }
  }

  onResponseEnd(): void {
    // Read to its end, so the keep-alive socket is reused whatever the status.
    this.settle(this.status < 200 || this.status > 299 ? new GetError('http-status', `HTTP ${this.status}`) : undefined);
  }

  onResponseError(_controller: Dispatcher.DispatchController, error: Error): void {
    const timedOut = error instanceof undiciErrors.HeadersTimeoutError || error instanceof undiciErrors.BodyTimeoutError;
    this.fail(new GetError(timedOut ? 'timeout' : 'connect', error.message));
  }

  /** Fails the GET (once) and drops the exchange: its connection is not reused. */
  private fail(error: unknown): void {
    if (this.settled) return;
    this.settle(error);
    this.controller?.abort(error instanceof Error ? error : new Error(String(error)));
  }

  private settle(error: unknown): void {
    if (this.settled) return;
    this.settled = true;
    clearTimeout(this.timer);
    if (error === undefined) this.resolve();
    else this.reject(error);
  }
}

/** GETs a small text (a probe answer): getStreamed, collected. */
export async function getText(
  dispatcher: Dispatcher,
  origin: string,
  path: string,
  timeoutMs: number,
  maxBytes = MAX_BODY_BYTES,
): Promise<string> {
  const chunks: Buffer[] = [];
  let size = 0;
  await getStreamed(dispatcher, { origin, path, timeoutMs, maxBytes }, (chunk) => {
    chunks.push(chunk);
    size += chunk.length;
  });
  return Buffer.concat(chunks, size).toString('utf8');
}

/** The origin of an `ip:port` endpoint address (IPv6 already bracketed). */
export function originOf(address: string): string {
  return `http://${address}`;
}
