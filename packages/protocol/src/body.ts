// Collects a request body that arrives in chunks, up to a size limit.
import { DEFAULT_MAX_BODY_BYTES } from './constants.js';

const EMPTY = new Uint8Array(0);

/**
 * Keeps the chunks (views into the received messages, not copies) and joins them once, so
 * a body of n chunks costs one copy, not n. Past the limit it stops keeping bytes and
 * reports `overLimit`; the caller answers 413 once the body is complete or right away.
 */
export class BodyAccumulator {
  readonly #chunks: Uint8Array[] = [];
  #size = 0;
  #overLimit = false;

  constructor(readonly limit: number = DEFAULT_MAX_BODY_BYTES) {
    if (!Number.isSafeInteger(limit) || limit < 0) throw new RangeError(`body limit must be a non-negative integer, got ${limit}`);
  }

  /** Adds a chunk; false once the body has exceeded the limit. */
  push(chunk: Uint8Array): boolean {
    this.#size += chunk.length;
    if (this.#overLimit) return false;
    if (this.#size > this.limit) {
      this.#overLimit = true;
      this.#chunks.length = 0;
      return false;
    }
    if (chunk.length > 0) this.#chunks.push(chunk);
    return true;
  }

  /** Bytes received so far (counting past the limit). */
  get size(): number {
    return this.#size;
  }

  get overLimit(): boolean {
    return this.#overLimit;
  }

  /** The whole body. A single chunk is returned as is; throws if the limit was exceeded. */
  take(): Uint8Array {
    if (this.#overLimit) throw new RangeError(`body of ${this.#size} bytes exceeds the ${this.limit}-byte limit`);
    const chunks = this.#chunks;
    if (chunks.length === 0) return EMPTY;
    const first = chunks[0];
    if (chunks.length === 1 && first !== undefined) return first;
    // Every byte is overwritten below, so the zero-fill of new Uint8Array would be wasted.
    const body = Buffer.allocUnsafe(this.#size);
    let offset = 0;
    for (const chunk of chunks) {
      body.set(chunk, offset);
      offset += chunk.length;
    }
    return body;
  }
}
