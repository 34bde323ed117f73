/**
 * Chained block hashes over token ids: the keys of the engine's prefix cache (the simulator hashes
 * each request's prompt with them before submitting it). A block's hash depends on its tokens and
 * on its parent's hash, so equal hashes mean equal prefixes, as in vLLM's prefix cache. The
 * scheduler does not use them: its prefix index hashes prompt *text* (`scheduler/src/hash.ts`), since
 * the EPP has no tokenizer.
 *
 * Hashes are non-negative safe integers below 2^53 so they can be Map keys and cross JSON without
 * BigInt. Two 32-bit lanes (an FNV-1a style lane and a multiply-xorshift lane, each finished with
 * murmur3's fmix32) are combined: 32 bits from one lane and 21 from the other.
 */

const FNV_OFFSET = 0x811c9dc5;
const FNV_PRIME = 0x01000193;
const M2 = 0x5bd1e995;
const TWO_32 = 4294967296;
const TWO_21 = 2097152;

function fmix32(h: number): number {
  h ^= h >>> 16;
  h = Math.imul(h, 0x85ebca6b);
  h ^= h >>> 13;
  h = Math.imul(h, 0xc2b2ae35);
  h ^= h >>> 16;
  return h >>> 0;
}

function combine(a: number, b: number): number {
  return fmix32(a) * TWO_21 + (fmix32(b) >>> 11);
}

/** Hash of tokens[start, end) chained to `parent` (a previous block hash, or a seed). */
export function hashBlock(parent: number, tokens: ArrayLike<number>, start: number, end: number): number {
  // ToUint32 on `parent` takes it modulo 2^32, which is exactly its low lane.
  let a = (parent >>> 0) ^ FNV_OFFSET;
  let b = (Math.floor(parent / TWO_32) ^ 0x9e3779b9) >>> 0;
  for (let i = start; i < end; i++) {
    const t = tokens[i] as number;
    a = Math.imul(a ^ t, FNV_PRIME);
    b = Math.imul(b ^ t, M2);
    b ^= b >>> 15;
  }
  return combine(a ^ (end - start), b);
}

/**
 * Chained hashes of every *full* block of `tokens` (a trailing partial block is not cacheable,
 * as in vLLM). `seed` separates caches that must not share blocks, e.g. different LoRA adapters;
 * `maxBlocks` bounds the work for very long prompts.
 */
export function blockHashes(tokens: ArrayLike<number>, blockSize: number, seed = 0, maxBlocks = Number.POSITIVE_INFINITY): number[] {
  const n = Math.min(Math.floor(tokens.length / blockSize), maxBlocks);
  const out = new Array<number>(n);
  let parent = seed;
  for (let i = 0; i < n; i++) {
    parent = hashBlock(parent, tokens, i * blockSize, (i + 1) * blockSize);
    out[i] = parent;
  }
  return out;
}

/** Hash of a string (UTF-16 code units), e.g. to derive a per-adapter seed for `blockHashes`. */
export function hashString(text: string, seed = 0): number {
  let a = (seed >>> 0) ^ FNV_OFFSET;
  let b = (Math.floor(seed / TWO_32) ^ 0x9e3779b9) >>> 0;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    a = Math.imul(a ^ c, FNV_PRIME);
    b = Math.imul(b ^ c, M2);
    b ^= b >>> 15;
  }
  return combine(a ^ text.length, b);
}
