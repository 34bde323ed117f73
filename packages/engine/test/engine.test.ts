import { describe, expect, it } from 'vitest';
import { Engine, PRESETS, textBlockHashes } from '../src/index.js';
import type { EngineRequest, Sequence } from '../src/index.js';
import { drain, req, testEngine } from './helpers.js';

describe('engine: batching and queueing', () => {
  it('queues requests beyond maxNumSeqs and admits them as others finish', () => {
    const { engine, trace } = testEngine({ maxNumSeqs: 2 });
    const seqs = [0, 1, 2].map(() => engine.submit(req(16, 4), 0));
    expect(seqs.map((s) => s.state)).toEqual(['running', 'running', 'waiting']);
    expect(engine.stats()).toMatchObject({ running: 2, waiting: 1 });

    // Finishing one of the first two admits the third at that finish time.
    engine.advance(engine.nextEventAt());
    while (trace.finished.length === 0) engine.advance(engine.nextEventAt());
    const third = seqs[2] as Sequence;
    expect(third.state).toBe('running');
    expect(third.admittedAt).toBe(trace.finished[0]?.finishedAt);
    expect(third.queueMs).toBeGreaterThan(0);

    drain(engine);
    expect(trace.finished).toHaveLength(3);
    expect(engine.idle).toBe(true);
  });

  it('follows the closed form exactly without jitter', () => {
    const { engine } = testEngine({ maxNumSeqs: 4, loadFactor: 2 });
    const cfg = engine.config;
    const s = engine.submit(req(100, 3), 1000);
    drain(engine, 1000);
    // Alone in the batch: loadFactor is 1.
    const prefill = cfg.prefillOverheadMs + 100 * cfg.prefillPerTokenMs;
    expect(s.firstTokenAt).toBeCloseTo(1000 + prefill, 9);
    expect(s.finishedAt).toBeCloseTo(1000 + prefill + 2 * cfg.interTokenMs, 9);
    expect(s.ttftMs).toBeCloseTo(prefill, 9);
  });

  it('rejects when the waiting queue is full, and requests that can never fit', () => {
    const { engine } = testEngine({ maxNumSeqs: 1, maxWaiting: 2 });
    const states = [0, 1, 2, 3].map(() => engine.submit(req(8, 8), 0)).map((s) => s.state);
    expect(states).toEqual(['running', 'waiting', 'waiting', 'rejected']);
    const tooLong = engine.submit(req(64 * 16, 1), 0);
    expect(tooLong.rejectReason).toBe('too-long');
    for (const bad of [req(0, 1), req(5, 0), req(1.5, 1), req(Number.NaN, 1)]) {
      expect(engine.submit(bad, 0).rejectReason).toBe('invalid');
    }
    expect(engine.stats().rejected).toBe(6);
  });

  it('maxWaiting 0 still admits requests that fit immediately', () => {
    const { engine } = testEngine({ maxNumSeqs: 1, maxWaiting: 0 });
    expect(engine.submit(req(8, 8), 0).state).toBe('running');
    expect(engine.submit(req(8, 8), 0).rejectReason).toBe('queue-full');
  });

  it('rejects bad configuration', () => {
    expect(() => new Engine({ preset: 'test', maxNumSeqs: 0 })).toThrow(/maxNumSeqs/);
    expect(() => new Engine({ preset: 'test', jitter: 0.5 })).toThrow(/jitter/);
    expect(() => new Engine({ preset: 'test', loadFactor: 0.5 })).toThrow(/loadFactor/);
  });
});

describe('engine: KV blocks', () => {
  it('holds a request in the queue while its prompt does not fit, even with free batch slots', () => {
    const { engine } = testEngine({ numBlocks: 10, maxNumSeqs: 4 });
    const a = engine.submit(req(100, 2), 0); // 7 blocks
    const b = engine.submit(req(60, 2), 0); // 4 blocks: does not fit in the 3 left
    expect(a.state).toBe('running');
    expect(b.state).toBe('waiting');
    expect(engine.stats().usedBlocks).toBe(7);
    expect(engine.kvUsage).toBeCloseTo(0.7);
    drain(engine);
    expect(b.state).toBe('finished');
    expect(engine.stats().usedBlocks).toBe(0);
  });

  it('preempts the newest running request when decode runs out of blocks', () => {
    const { engine, trace } = testEngine({ numBlocks: 6, maxNumSeqs: 4 });
    // Two prompts of exactly two blocks each; decoding needs a third block each, then more.
    const old = engine.submit(req(32, 40), 0);
    const young = engine.submit(req(32, 40), 0);
    expect(engine.stats().usedBlocks).toBe(4);
    drain(engine);
    expect(engine.stats().preemptions).toBeGreaterThan(0);
    expect(trace.preempted[0]).toBe(young);
    expect(old.preemptions).toBe(0);
    expect(young.preemptions).toBeGreaterThan(0);
    // Preemption delays but never loses tokens.
    expect(old.generated).toBe(40);
    expect(young.generated).toBe(40);
    expect(trace.finished).toHaveLength(2);
    expect(engine.stats().usedBlocks).toBe(0);
  });

  it('serves a shared prefix from cache: cached tokens counted and prefill shortened', () => {
    const { engine } = testEngine({ numBlocks: 64 });
    const system = 'You are a helpful assistant. '.repeat(40); // ~290 tokens
    const mk = (question: string): EngineRequest => {
      const text = system + question;
      return req(Math.ceil(text.length / 4), 2, { blockHashes: textBlockHashes(text, 16) });
    };
    const cold = engine.submit(mk('What is a KV cache?'), 0);
    drain(engine);
    const warm = engine.submit(mk('What is prefix caching?'), 1000);
    drain(engine, 1000);
    expect(cold.cachedTokens).toBe(0);
    expect(warm.cachedTokens).toBeGreaterThanOrEqual(16 * 17);
    expect(warm.ttftMs).toBeLessThan(cold.ttftMs);
    const st = engine.stats();
    expect(st.prefixHitTokens).toBe(warm.cachedTokens);
    expect(st.prefixQueryTokens).toBe(cold.request.promptTokens + warm.request.promptTokens);
    // Cached blocks stay in the pool but count as free.
    expect(st.cachedBlocks).toBeGreaterThan(0);
    expect(st.usedBlocks).toBe(0);
  });

  it('does not serve blocks from a prefill that has not finished yet', () => {
    const { engine } = testEngine({ numBlocks: 64 });
    const hashes = Array.from({ length: 4 }, (_, i) => i + 1);
    const a = engine.submit(req(64, 2, { blockHashes: hashes }), 0);
    const b = engine.submit(req(64, 2, { blockHashes: hashes }), 0);
    expect(a.cachedTokens).toBe(0);
    expect(b.cachedTokens).toBe(0);
    drain(engine);
    // A fully cached prompt still recomputes its last block to produce a token, as vLLM does.
    const c = engine.submit(req(64, 2, { blockHashes: hashes }), 100);
    expect(c.cachedTokens).toBe(48);
  });

  it('evicts least recently used cached blocks, the tail of a chain first', () => {
    const { engine } = testEngine({ numBlocks: 8, maxNumSeqs: 1 });
    const hA = [11, 12, 13, 14];
    const hB = [21, 22, 23, 24];
    engine.submit(req(64, 1, { blockHashes: hA }), 0);
    drain(engine);
    engine.submit(req(64, 1, { blockHashes: hB }), 100);
    drain(engine, 100);
    expect(engine.stats()).toMatchObject({ cachedBlocks: 8, usedBlocks: 0 });
    // Needs one fresh block: the least recently used one is A's last block.
    const c = engine.submit(req(80, 1, { blockHashes: [...hB, 25] }), 200);
    expect(c.cachedTokens).toBe(64);
    drain(engine, 200);
    const d = engine.submit(req(80, 1, { blockHashes: [...hA, 15] }), 300);
    expect(d.cachedTokens).toBe(48);
    drain(engine, 300);
    expect(engine.stats().usedBlocks).toBe(0);
  });

  it('frees the blocks of a cancelled request', () => {
    const { engine } = testEngine();
    const a = engine.submit(req(200, 50), 0);
    engine.advance(30);
    expect(engine.stats().usedBlocks).toBeGreaterThan(0);
    expect(engine.cancel(a, 40)).toBe(true);
    expect(engine.cancel(a, 40)).toBe(false);
    expect(engine.stats()).toMatchObject({ usedBlocks: 0, running: 0, cancelled: 1 });
    expect(engine.nextEventAt()).toBe(Number.POSITIVE_INFINITY);
  });
});

describe('engine: LoRA slots', () => {
  it('runs at most maxLoras adapters at once without blocking other requests', () => {
    const { engine } = testEngine({ maxLoras: 2, maxNumSeqs: 8 });
    const a = engine.submit(req(16, 5, { lora: 'a' }), 0);
    const b = engine.submit(req(16, 5, { lora: 'b' }), 0);
    const c = engine.submit(req(16, 5, { lora: 'c' }), 0);
    const a2 = engine.submit(req(16, 5, { lora: 'a' }), 0);
    const base = engine.submit(req(16, 5), 0);
    expect([a, b, c, a2, base].map((s) => s.state)).toEqual(['running', 'running', 'waiting', 'running', 'running']);
    expect(engine.loraInfo()).toEqual({ running: ['a', 'b'], waiting: ['c'], max: 2 });
    drain(engine);
    expect(c.state).toBe('finished');
    expect(engine.loraInfo()).toEqual({ running: [], waiting: [], max: 2 });
  });

  it('rejects adapters when LoRA is disabled', () => {
    const { engine } = testEngine({ maxLoras: 0 });
    expect(engine.submit(req(16, 5, { lora: 'a' }), 0).rejectReason).toBe('lora-disabled');
  });
});

/** Poisson arrivals at `qps` for `n` requests on an 8B/H100 replica; mean TTFT in ms. */
function meanTtft(qps: number, n: number, seed: number): number {
  const ttfts: number[] = [];
  const engine = new Engine(
    { preset: 'llama-8b-h100', maxNumSeqs: 32, seed },
    {
      onFinish: (s) => void ttfts.push(s.ttftMs),
    },
  );
  let rng = seed;
  const uniform = (): number => ((rng = (rng * 1103515245 + 12345) % 2147483648) + 1) / 2147483649;
  let t = 0;
  for (let i = 0; i < n; i++) {
    t += (-Math.log(uniform()) * 1000) / qps;
    engine.advance(t);
    engine.submit(req(256, 128), t);
  }
  drain(engine, t);
  return ttfts.reduce((a, b) => a + b, 0) / ttfts.length;
}

describe('engine: timing under load', () => {
  it('TTFT grows with the arrival rate', () => {
    // Capacity is about 32 slots / ~2.5 s per request ≈ 13 requests per second.
    const light = meanTtft(1, 200, 7);
    const busy = meanTtft(8, 200, 7);
    const overloaded = meanTtft(40, 200, 7);
    expect(busy).toBeGreaterThan(light);
    expect(overloaded).toBeGreaterThan(busy * 5);
    // At low load TTFT is close to the unloaded closed form (~88 ms for 256 tokens).
    const p = PRESETS['llama-8b-h100'];
    expect(light).toBeLessThan((p.prefillOverheadMs + 256 * p.prefillPerTokenMs) * 1.5);
  });

  it('is deterministic for a fixed seed and varies with the seed', () => {
    const run = (seed: number): number[] => {
      const times: number[] = [];
      const engine = new Engine({ preset: 'llama-8b-h100', seed, maxNumSeqs: 4 }, { onToken: (_s, at) => void times.push(at) });
      for (let i = 0; i < 10; i++) engine.submit(req(100 + i * 10, 20), i * 5);
      drain(engine);
      return times;
    };
    expect(run(42)).toEqual(run(42));
    expect(run(42)).not.toEqual(run(43));
  });

  it('adds a network delay to the reported TTFT without occupying the engine', () => {
    const { engine } = testEngine();
    const a = engine.submit(req(100, 1), 0);
    drain(engine);
    const b = engine.submit(req(100, 1, { networkDelayMs: 40 }), 1000);
    drain(engine, 1000);
    expect(b.firstTokenAt - 1000).toBe(a.firstTokenAt);
    expect(b.ttftMs - a.ttftMs).toBeCloseTo(40, 9);
  });
});
