import { blockHashes } from './hash.js';

/**
 * A deterministic stand-in tokenizer: one token per 4 UTF-16 code units, counted from the start of
 * the text. Chunks are aligned to the start, so two texts sharing a prefix share the token ids of
 * that prefix and therefore its block hashes — which is all a prefix cache needs.
 */
export const CHARS_PER_TOKEN = 4;

export function countTokens(text: string): number {
  return Math.ceil(text.length / CHARS_PER_TOKEN);
}

/** Token ids: FNV-1a (32-bit) of each 4-character chunk. */
export function tokenize(text: string): Uint32Array {
  const n = countTokens(text);
  const ids = new Uint32Array(n);
  for (let i = 0; i < n; i++) {
    let h = 0x811c9dc5;
    const end = Math.min(text.length, (i + 1) * CHARS_PER_TOKEN);
    for (let j = i * CHARS_PER_TOKEN; j < end; j++) h = Math.imul(h ^ text.charCodeAt(j), 0x01000193);
    ids[i] = h >>> 0;
  }
  return ids;
}

/** Block hashes of a text's full blocks: `blockHashes(tokenize(text), blockSize, seed)`. */
export function textBlockHashes(text: string, blockSize = 16, seed = 0): number[] {
  return blockHashes(tokenize(text), blockSize, seed);
}
