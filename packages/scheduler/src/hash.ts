/**
 * Chained block hashes of a prompt for approximate prefix-cache affinity (the prefix scorer of the
 * Gateway API Inference Extension's EPP, now in llm-d).
 * Block i's hash covers its characters and block i−1's hash, so equal hashes mean equal prefixes.
 * The hash is a cyrb53 variant (two 32-bit multiply-rotate lanes folded into 53 bits): non-cryptographic,
 * allocation-free, and an exact JavaScript number, so it can key a Map without a BigInt.
 */
const TWO_32 = 4294967296;

function cyrb53(text: string, start: number, end: number, seed: number): number {
  let h1 = 0xdeadbeef ^ (seed >>> 0);
  let h2 = 0x41c6ce57 ^ Math.floor(seed / TWO_32);
  let i = start;
  // Two UTF-16 units per step (one 32-bit word) halves the loop; the rotations keep high bits mixing down.
  for (; i + 1 < end; i += 2) {
    const word = text.charCodeAt(i) | (text.charCodeAt(i + 1) << 16);
    h1 = Math.imul(h1 ^ word, 2654435761);
    h1 = (h1 << 15) | (h1 >>> 17);
    h2 = Math.imul(h2 ^ word, 1597334677);
    h2 = (h2 << 13) | (h2 >>> 19);
  }
  if (i < end) {
    const ch = text.charCodeAt(i);
    h1 = Math.imul(h1 ^ ch, 2654435761);
    h2 = Math.imul(h2 ^ ch, 1597334677);
  }
  h1 = Math.imul(h1 ^ (h1 >>> 16), 2246822507);
  h1 ^= Math.imul(h2 ^ (h2 >>> 13), 3266489909);
  h2 = Math.imul(h2 ^ (h2 >>> 16), 2246822507);
  h2 ^= Math.imul(h1 ^ (h1 >>> 13), 3266489909);
  return TWO_32 * (0x1fffff & h2) + (h1 >>> 0);
}

/** The chain's seed: the model (so two models never share cache entries) and an optional salt. */
export function prefixSeed(model: string, salt?: string): number {
  const base = cyrb53(model, 0, model.length, 0);
  return salt ? cyrb53(salt, 0, salt.length, base) : base;
}

/**
 * Writes the prompt's block hashes into `out` and returns how many. A prompt shorter than one
 * block has none; the text beyond `maxBlocks` blocks is ignored; a trailing partial block is hashed.
 * `out` must hold `maxBlocks` numbers.
 */
export function hashPromptBlocks(prompt: string, seed: number, blockChars: number, maxBlocks: number, out: Float64Array): number {
  if (prompt.length < blockChars) return 0;
  const end = Math.min(prompt.length, blockChars * maxBlocks);
  let previous = seed;
  let count = 0;
  for (let start = 0; start < end; start += blockChars) {
    previous = cyrb53(prompt, start, Math.min(end, start + blockChars), previous);
    out[count++] = previous;
  }
  return count;
}
