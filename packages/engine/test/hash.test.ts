import { describe, expect, it } from 'vitest';
import { Rng, blockHashes, countTokens, hashBlock, hashString, textBlockHashes, tokenize } from '../src/index.js';

describe('tokenizer and block hashes', () => {
  it('counts about four characters per token', () => {
    expect(countTokens('')).toBe(0);
    expect(countTokens('abcd')).toBe(1);
    expect(countTokens('abcde')).toBe(2);
    expect(tokenize('abcdefgh')).toHaveLength(2);
  });

  it('gives shared prefixes shared token ids and shared block hashes', () => {
    const prefix = 'x'.repeat(64 * 3) + 'system prompt '.repeat(10);
    const a = textBlockHashes(prefix + 'first question?');
    const b = textBlockHashes(prefix + 'another, longer question for the model?');
    const common = Math.floor(prefix.length / 4 / 16);
    expect(a.slice(0, common)).toEqual(b.slice(0, common));
    expect(a.length).toBeGreaterThanOrEqual(common);
    // Chained: identical blocks at different positions hash differently.
    expect(new Set(a.slice(0, 3)).size).toBe(3);
  });

  it('changes every hash after a differing block, and with the seed', () => {
    const t1 = tokenize('a'.repeat(64 * 4));
    const t2 = tokenize('a'.repeat(64) + 'b' + 'a'.repeat(64 * 3 - 1));
    const h1 = blockHashes(t1, 16);
    const h2 = blockHashes(t2, 16);
    expect(h1[0]).toBe(h2[0]);
    for (let i = 1; i < 4; i++) expect(h1[i]).not.toBe(h2[i]);
    expect(blockHashes(t1, 16, hashString('sql-lora'))[0]).not.toBe(h1[0]);
  });

  it('produces safe non-negative integers and ignores a trailing partial block', () => {
    const hs = blockHashes(tokenize('q'.repeat(64 * 5 + 10)), 16, 2 ** 52 + 12345);
    expect(hs).toHaveLength(5);
    for (const h of hs) {
      expect(Number.isSafeInteger(h)).toBe(true);
      expect(h).toBeGreaterThanOrEqual(0);
    }
    expect(hashBlock(0, [1, 2, 3], 0, 3)).toBe(hashBlock(0, new Uint32Array([1, 2, 3]), 0, 3));
    expect(blockHashes([1, 2, 3], 16, 0, 10)).toEqual([]);
  });

  it('seeded RNG repeats its sequence and stays in range', () => {
    const a = new Rng(9);
    const b = new Rng(9);
    const xs = Array.from({ length: 1000 }, () => a.next());
    expect(xs).toEqual(Array.from({ length: 1000 }, () => b.next()));
    expect(Math.min(...xs)).toBeGreaterThanOrEqual(0);
    expect(Math.max(...xs)).toBeLessThan(1);
    const g = new Rng(1);
    const n = Array.from({ length: 4000 }, () => g.gaussian());
    const mean = n.reduce((s, x) => s + x, 0) / n.length;
    const sd = Math.sqrt(n.reduce((s, x) => s + (x - mean) ** 2, 0) / n.length);
    expect(Math.abs(mean)).toBeLessThan(0.1);
    expect(Math.abs(sd - 1)).toBeLessThan(0.1);
  });
});
