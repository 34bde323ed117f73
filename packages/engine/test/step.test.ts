import { describe, expect, it } from 'vitest';
import { Engine, PRESETS } from '../src/index.js';
import type { EngineOptions, EngineRequest, Sequence } from '../src/index.js';
import { drain, req } from './helpers.js';

/** A jitter-free step-mode engine on the test preset (budget 64 tokens, overhead 5 ms, 0.1 ms/token, 0.001 ms/context token). */
function stepEngine(options: EngineOptions = {}, onToken?: (s: Sequence, at: number) => void): Engine {
  return new Engine({ preset: 'test', mode: 'step', ...options }, onToken ? { onToken } : {});
}

describe('engine (step mode): scheduling', () => {
  it('chunks a prefill into the token budget and emits the first token when the last chunk is done', () => {
    const engine = stepEngine();
    const s = engine.submit(req(150, 2), 0);
    expect(s.state).toBe('running');
    drain(engine);
    // 150 prompt tokens over a 64-token budget: chunks of 64, 64, 22, then one decode step.
    const p = PRESETS.test;
    const step = (tokens: number, context: number) => p.stepOverheadMs + tokens * p.stepPerTokenMs + context * p.stepPerContextTokenMs;
    const ttft = step(64, 64) + step(64, 128) + step(22, 150);
    expect(s.ttftMs).toBeCloseTo(ttft, 9);
    expect(s.finishedAt).toBeCloseTo(ttft + step(1, 151), 9);
    expect(engine.stats().steps).toBe(4);
  });

  it('serves running decodes first and admits waiting requests into what is left of the budget', () => {
    const engine = stepEngine({ maxNumSeqs: 4 });
    const first = engine.submit(req(60, 50), 0); // fills the first step (60 of 64)
    const second = engine.submit(req(40, 50), 0); // waits for the next step
    expect(first.state).toBe('running');
    expect(second.state).toBe('waiting');
    engine.advance(engine.nextEventAt());
    // Step 2: first's decode (1 token) + second's prefill chunk (40): both running, second's prefill done at once.
    expect(second.state).toBe('running');
    engine.advance(engine.nextEventAt());
    expect(first.generated).toBe(2);
    expect(second.generated).toBe(1);
    drain(engine);
    expect(engine.idle).toBe(true);
  });

  it('a cache miss slows its batch-mates: their inter-token gaps grow while it prefills', () => {
    // A steady decode batch, then one request with a long prompt joins: uncached (a miss) or cached (a hit).
    const gapsWhileJoining = (cached: boolean): number => {
      const system = Array.from({ length: 40 }, (_, i) => i + 1); // 40 blocks = 640 tokens
      const gaps: { at: number; gap: number }[] = [];
      const watch: { seq?: Sequence } = {};
      const engine = new Engine(
        { preset: 'test', mode: 'step', numBlocks: 400, maxNumBatchedTokens: 64, maxNumSeqs: 8 },
        { onToken: (s, at) => void (s === watch.seq && gaps.push({ at, gap: s.lastItlMs })) },
      );
      if (cached) {
        engine.submit(req(640, 1, { blockHashes: system }), 0);
        drain(engine);
      }
      const t0 = 10_000;
      const mates = [0, 1, 2].map(() => engine.submit(req(8, 400), t0));
      watch.seq = mates[0];
      engine.advance(t0 + 200);
      const joiner = engine.submit(req(656, 2, { blockHashes: [...system, 999] }), t0 + 200);
      drain(engine);
      expect(joiner.cachedTokens).toBe(cached ? 640 : 0);
      // The mates' gaps that ended while the joiner was prefilling (after its admission, up to its first token).
      const during = gaps.filter((g) => g.at > joiner.admittedAt && g.at <= joiner.firstTokenAt).map((g) => g.gap);
      expect(during.length).toBeGreaterThan(0);
      return during.reduce((a, b) => a + b, 0) / during.length;
    };
    const miss = gapsWhileJoining(false);
    const hit = gapsWhileJoining(true);
    // A miss computes 656 prompt tokens in chunks that fill each step's budget beside the mates'
    // decodes, so every one of those steps is a full-budget step; a hit computes one block.
    const p = PRESETS.test;
    const decodeOnly = p.stepOverheadMs + 3 * p.stepPerTokenMs;
    expect(miss).toBeGreaterThan(decodeOnly * 2);
    expect(hit).toBeLessThan(miss / 1.5);
  });

  it('throughput plateaus at the token budget: offering twice as much work does not process more tokens per second', () => {
    const tokensPerSecond = (backlog: number): number => {
      const engine = new Engine({ preset: 'llama-8b-h100', mode: 'step', jitter: 0, maxWaiting: 1_000_000 });
      const end = 20_000;
      let t = 0;
      const refill = (now: number): void => {
        while (engine.waitingCount < backlog) engine.submit(req(2000, 20), now);
      };
      while (t < end) {
        refill(t);
        t = engine.nextEventAt();
        engine.advance(t);
      }
      // Busy the whole time (the backlog never empties), so tokens per busy second is the throughput.
      const st = engine.stats();
      expect(st.busyMs).toBeGreaterThan(t - 1000);
      return st.stepTokens / (st.busyMs / 1000);
    };
    const p = PRESETS['llama-8b-h100'];
    const ceiling = p.maxNumBatchedTokens / ((p.stepOverheadMs + p.maxNumBatchedTokens * p.stepPerTokenMs) / 1000);
    const a = tokensPerSecond(8);
    const b = tokensPerSecond(64);
    expect(a).toBeLessThanOrEqual(ceiling);
    expect(b).toBeLessThanOrEqual(ceiling);
    expect(b / a).toBeLessThan(1.05);
    expect(a).toBeGreaterThan(ceiling * 0.8);
  });

  it('never schedules more tokens in a step than the budget, and decodes one token per running sequence', () => {
    let stepTokens = 0;
    let lastAt = -1;
    let maxStep = 0;
    const engine = stepEngine({ maxNumSeqs: 4, numBlocks: 200 }, (_s, at) => {
      if (at !== lastAt) {
        maxStep = Math.max(maxStep, stepTokens);
        stepTokens = 0;
        lastAt = at;
      }
      stepTokens++;
    });
    for (let i = 0; i < 10; i++) engine.submit(req(100 + i * 13, 30), i * 3);
    drain(engine);
    // At most one emitted token per running sequence per step.
    expect(maxStep).toBeLessThanOrEqual(4);
    expect(engine.stats().finished).toBe(10);
  });

  it('rejects a budget smaller than the batch in step mode', () => {
    expect(() => new Engine({ preset: 'test', mode: 'step', maxNumSeqs: 100 })).toThrow(/maxNumBatchedTokens/);
    expect(() => new Engine({ preset: 'test', mode: 'bogus' as 'step' })).toThrow(/mode/);
  });

  it('is deterministic for a seed and differs with the seed', () => {
    const run = (seed: number): number[] => {
      const engine = new Engine<EngineRequest>({ preset: 'llama-8b-h100', mode: 'step', maxNumSeqs: 16, seed });
      const seqs = Array.from({ length: 40 }, (_, i) => engine.submit(req(200 + ((i * 37) % 300), 20), i * 5));
      drain(engine);
      return seqs.map((s) => s.ttftMs);
    };
    expect(run(3)).toEqual(run(3));
    expect(run(3)).not.toEqual(run(4));
  });
});
