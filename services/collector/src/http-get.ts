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

/** Expositions beyond this are refused unread: a misconfigured target must not exhaust memory. */
export const MAX_BODY_BYTES = 16 * 1024 * 1024;

/**
 * GETs `origin` + `path` and returns the body as text, or throws GetError. The timeout covers the whole
 * exchange (connect, headers, body), so a server that accepts and never answers, or trickles its
 * body, costs at most `timeoutMs`.
 */
export async function getText(dispatcher: Dispatcher, origin: string, path: string, timeoutMs: number, maxBytes = MAX_BODY_BYTES): Promise<string> {
  const controller = new AbortController();
  const timer = setTimeout(() => controller.abort(), timeoutMs);
  try {
    const response = await dispatcher.request({ origin, path, method: 'GET', signal: controller.signal });
    if (response.statusCode < 200 || response.statusCode > 299) {
      // Drain so the keep-alive socket can be reused.
      await response.body.dump();
      throw new GetError('http-status', `HTTP ${response.statusCode}`);
    }
    const chunks: Buffer[] = [];
    let size = 0;
    for await (const chunk of response.body) {
      const buffer = chunk as Buffer;
      size += buffer.length;
      if (size > maxBytes) {
        response.body.destroy();
        throw new GetError('too-large', `body exceeds ${maxBytes} bytes`);
      }
      chunks.push(buffer);
    }
    return Buffer.concat(chunks, size).toString('utf8');
  } catch (error) {
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

/** The origin of an `ip:port` endpoint address (IPv6 already bracketed). */
export function originOf(address: string): string {
  return `http://${address}`;
}
