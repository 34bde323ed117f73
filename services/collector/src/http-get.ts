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

/**
 * GETs `origin` + `path` and hands the body to `onChunk` piece by piece as it arrives, so nothing
 * is buffered here; throws GetError. The timeout covers the whole exchange (connect, headers,
 * body), so a server that accepts and never answers, or trickles its body, costs at most
 * `timeoutMs`. Reading stops (and the connection is dropped) once `maxBytes` have arrived, or when
 * `onChunk` throws: that error is rethrown as is.
 */
export async function getStreamed(dispatcher: Dispatcher, request: GetRequest, onChunk: (chunk: Buffer) => void): Promise<void> {
  const { origin, path, timeoutMs, maxBytes } = request;
  const controller = new AbortController();
  const timer = setTimeout(() => controller.abort(), timeoutMs);
  let consumerError: { error: unknown } | undefined;
  try {
    const response = await dispatcher.request({ origin, path, method: 'GET', signal: controller.signal });
    if (response.statusCode < 200 || response.statusCode > 299) {
      // Drain (bounded by the timeout) so the keep-alive socket can be reused.
      await response.body.dump({ limit: 64 * 1024 });
      throw new GetError('http-status', `HTTP ${response.statusCode}`);
    }
    let size = 0;
    for await (const chunk of response.body) {
      const buffer = chunk as Buffer;
      size += buffer.length;
      if (size > maxBytes) {
        response.body.destroy();
        throw new GetError('too-large', `body exceeds ${maxBytes} bytes`);
      }
      try {
        onChunk(buffer);
      } catch (error) {
        consumerError = { error };
        response.body.destroy();
        throw error;
      }
    }
  } catch (error) {
    if (consumerError) throw consumerError.error;
    if (error instanceof GetError) throw error;
    if (controller.signal.aborted) throw new GetError('timeout', `no complete answer within ${timeoutMs} ms`);
    if (error instanceof undiciErrors.HeadersTimeoutError || error instanceof undiciErrors.BodyTimeoutError) {
      throw new GetError('timeout', (error as Error).message);
    }
    throw new GetError('connect', (error as Error).message);
  } finally {
    clearTimeout(timer);
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
