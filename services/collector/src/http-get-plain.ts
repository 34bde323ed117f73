import { errors as undiciErrors, type Dispatcher } from 'undici';
import { GetError, type GetRequest } from './http-get.js';

/**
 * getStreamed as undici's `request()` API gives it: the plain version, kept as the reference the
 * dispatch-handler getStreamed is tested against (test/http-get.test.ts) and as the bench's
 * plain-GET baseline (`npm run bench -- collector`). Same contract as getStreamed.
 */
export async function getStreamedPlain(dispatcher: Dispatcher, request: GetRequest, onChunk: (chunk: Buffer) => void): Promise<void> {
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
