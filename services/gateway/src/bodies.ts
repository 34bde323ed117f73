// Request and response bodies on their way through the ext_proc filter. In FULL_DUPLEX_STREAMED a
// chunk handed to the EPP is gone from the gateway (Envoy drains it: Filter::handleDataStreamedModeBase);
// only chunks that arrive once processing is complete pass through unchanged. In the other modes
// the gateway keeps the whole body, as Envoy's buffer does.
import type { Direction } from './ext-proc-filter.js';
import type { ExtProcSession } from './ext-proc-session.js';

const EMPTY = new Uint8Array(0);

/** A failure to read the body (client aborted, model server reset); `cause` is what the stream threw. */
export class BodyReadError extends Error {
  constructor(
    readonly direction: Direction,
    cause: unknown,
  ) {
    super(cause instanceof Error ? `${(cause as { code?: string }).code ?? cause.name}: ${cause.message}` : String(cause), { cause });
  }
}

/** The body grew past what the gateway buffers. */
export class BodyTooLarge extends Error {
  constructor(readonly limit: number) {
    super(`body exceeds ${limit} bytes`);
  }
}

export interface BodyReaderOptions {
  readonly direction: Direction;
  readonly session: ExtProcSession;
  /** Send chunks to the EPP (full duplex) while processing is not complete. */
  readonly toEpp: boolean;
  /**
   * keep: the chunks not sent to the EPP are kept for forwarding (a request, up to `limit` bytes);
   * stream: they pass through `passthrough` with back-pressure (a response on its way to the client).
   */
  readonly retain: 'keep' | 'stream';
  /** The most the gateway keeps of a body it keeps. */
  readonly limit: number;
  /** Declared length, if any: the chunk that completes it carries end_of_stream. */
  readonly declaredLength?: number | undefined;
  /** Called once if reading the body fails (with what `kept` rejects with). */
  readonly onFailure?: ((error: Error) => void) | undefined;
}

/**
 * Reads one body to its end, handing chunks to the EPP while the filter processes it in full
 * duplex. The rest is kept (`kept` resolves with it when the body ends) or streamed
 * (`passthrough` yields it as it arrives, and reading waits while the consumer is behind).
 */
export class BodyReader {
  readonly #options: BodyReaderOptions;
  readonly #kept: Uint8Array[] = [];
  #size = 0;
  readonly #queue = new ChunkQueue();
  #failure: Error | undefined;
  /** Resolves with the kept body once it ended; rejects with what reading it threw. */
  readonly kept: Promise<Buffer>;

  constructor(body: AsyncIterable<Uint8Array>, options: BodyReaderOptions) {
    this.#options = options;
    this.kept = this.#read(body);
    // The outcome is read through `kept`, `failure` or `passthrough`; an unread failure is not unhandled.
    this.kept.catch(() => undefined);
  }

  /** What reading the body threw, once it failed. */
  get failure(): Error | undefined {
    return this.#failure;
  }

  /** Chunks that do not go to the EPP, as they arrive; throws what reading the body threw. */
  get passthrough(): AsyncIterable<Uint8Array> {
    return this.#queue;
  }

  async #read(body: AsyncIterable<Uint8Array>): Promise<Buffer> {
    const { direction, session, toEpp, declaredLength } = this.#options;
    let seen = 0;
    let ended = false;
    try {
      for await (const chunk of body) {
        seen += chunk.length;
        ended = declaredLength !== undefined && seen >= declaredLength;
        session.bodyData(direction);
        if (toEpp && !session.complete) await session.sendBody(direction, chunk, ended);
        else if (this.#options.retain === 'stream') await this.#queue.push(chunk);
        else this.#keep(chunk);
      }
    } catch (error) {
      const failure = error instanceof BodyTooLarge ? error : new BodyReadError(direction, error);
      this.#failure = failure;
      this.#queue.fail(failure);
      this.#options.onFailure?.(failure);
      throw failure;
    }
    // Without a declared length Envoy ends the body with an empty end_of_stream message.
    if (toEpp && !session.complete && !ended) {
      session.bodyData(direction);
      await session.sendBody(direction, EMPTY, true);
    }
    this.#queue.end();
    return Buffer.concat(this.#kept);
  }

  #keep(chunk: Uint8Array): void {
    this.#size += chunk.length;
    if (this.#size > this.#options.limit) throw new BodyTooLarge(this.#options.limit);
    this.#kept.push(chunk);
  }
}

/** Bytes a streamed body may run ahead of its consumer before reading pauses. */
const HIGH_WATER_BYTES = 1024 * 1024;

/** A small single-consumer queue of chunks, ended or failed by the producer, with back-pressure. */
class ChunkQueue implements AsyncIterable<Uint8Array> {
  readonly #chunks: Uint8Array[] = [];
  #bytes = 0;
  #ended = false;
  #failure: unknown;
  #wake: (() => void) | undefined;
  #drained: (() => void) | undefined;

  /** Queues a chunk; resolves once the consumer is within the high-water mark. */
  async push(chunk: Uint8Array): Promise<void> {
    this.#chunks.push(chunk);
    this.#bytes += chunk.length;
    this.#notify();
    if (this.#bytes > HIGH_WATER_BYTES) await new Promise<void>((resolve) => (this.#drained = resolve));
  }

  end(): void {
    this.#ended = true;
    this.#notify();
  }

  fail(error: unknown): void {
    this.#failure = error;
    this.#ended = true;
    this.#notify();
  }

  async *[Symbol.asyncIterator](): AsyncIterator<Uint8Array> {
    for (;;) {
      const chunk = this.#chunks.shift();
      if (chunk !== undefined) {
        this.#bytes -= chunk.length;
        if (this.#bytes <= HIGH_WATER_BYTES) this.#release();
        yield chunk;
        continue;
      }
      if (this.#failure !== undefined) throw this.#failure;
      if (this.#ended) return;
      await new Promise<void>((resolve) => (this.#wake = resolve));
    }
  }

  #notify(): void {
    const wake = this.#wake;
    this.#wake = undefined;
    wake?.();
  }

  #release(): void {
    const drained = this.#drained;
    this.#drained = undefined;
    drained?.();
  }
}
