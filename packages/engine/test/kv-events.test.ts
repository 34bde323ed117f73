import { describe, expect, it } from 'vitest';
import { blockHashes, Engine } from '../src/index.js';
import type { EngineRequest } from '../src/index.js';
import { drain, req } from './helpers.js';

/** Block stores and evictions as the engine reports them (the source of the simulator's KV events). */
function recorder(numBlocks: number) {
  const stored: Array<[number, number]> = [];
  const evicted: number[] = [];
  const engine = new Engine<EngineRequest>(
    { preset: 'test', numBlocks, maxNumSeqs: 1 },
    { onBlocksStored: (_s, from, to) => void stored.push([from, to]), onBlockEvicted: (h) => void evicted.push(h) },
  );
  return { engine, stored, evicted };
}

const tokens = (n: number, base: number) => Array.from({ length: n }, (_, i) => base + i);

describe('engine KV events', () => {
  it('reports the prompt blocks it caches, once, and only the new ones', () => {
    const { engine, stored } = recorder(64);
    const bs = engine.config.blockSize;
    const a = blockHashes(tokens(4 * bs + 3, 0), bs);
    engine.submit(req(4 * bs + 3, 2, { blockHashes: a }), 0);
    drain(engine);
    expect(stored).toEqual([[0, 4]]);
    // Same first two blocks, then two new ones: only the new blocks are reported.
    const b = blockHashes([...tokens(2 * bs, 0), ...tokens(2 * bs, 1000)], bs);
    engine.submit(req(4 * bs, 2, { blockHashes: b }), 1000);
    drain(engine, 1000);
    expect(stored).toEqual([
      [0, 4],
      [2, 4],
    ]);
  });

  it('reports each evicted block hash', () => {
    const { engine, stored, evicted } = recorder(6);
    const bs = engine.config.blockSize;
    const a = blockHashes(tokens(4 * bs, 0), bs);
    engine.submit(req(4 * bs, 1, { blockHashes: a }), 0);
    let t = drain(engine);
    const b = blockHashes(tokens(4 * bs, 5000), bs);
    engine.submit(req(4 * bs, 1, { blockHashes: b }), t);
    t = drain(engine, t);
    expect(stored).toEqual([
      [0, 4],
      [0, 4],
    ]);
    // Six blocks: the second prompt needed four (plus a decode block), so the first prompt's chain lost its tail first.
    expect(evicted.length).toBeGreaterThanOrEqual(2);
    for (const h of evicted) expect(a).toContain(h);
    expect(evicted[0]).toBe(a[3]);
  });
});

describe('engine prefix-cache reset', () => {
  it('clears the cache only when no request holds a block, and says so', () => {
    let cleared = 0;
    const engine = new Engine<EngineRequest>({ preset: 'test', numBlocks: 16, maxNumSeqs: 1 }, { onCacheCleared: () => void cleared++ });
    const bs = engine.config.blockSize;
    const a = blockHashes(tokens(4 * bs, 0), bs);
    engine.submit(req(4 * bs, 50, { blockHashes: a }), 0);
    engine.advance(engine.nextEventAt());
    expect(engine.resetPrefixCache()).toBe(false);
    expect(cleared).toBe(0);
    const t = drain(engine);
    expect(engine.stats().cachedBlocks).toBe(4);
    expect(engine.resetPrefixCache()).toBe(true);
    expect(cleared).toBe(1);
    expect(engine.stats().cachedBlocks).toBe(0);
    expect(engine.stats().usedBlocks).toBe(0);
    // The pool is whole again: the same prompt is a full miss.
    const seq = engine.submit(req(4 * bs, 1, { blockHashes: a }), t);
    drain(engine, t);
    expect(seq.cachedTokens).toBe(0);
  });
});
