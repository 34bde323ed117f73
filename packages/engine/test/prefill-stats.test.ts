import { describe, expect, it } from 'vitest';
import { Engine, PRESETS } from '../src/index.js';
import type { EngineOptions, Sequence } from '../src/index.js';
import { drain, req, testEngine } from './helpers.js';

/** A step-mode engine on the jitter-free test preset (budget 64 tokens). */
function stepEngine(options: EngineOptions = {}): Engine {
  return new Engine({ preset: 'test', mode: 'step', ...options });
}

const p = PRESETS.test;
const step = (tokens: number, context: number) => p.stepOverheadMs + tokens * p.stepPerTokenMs + context * p.stepPerContextTokenMs;

describe('engine stats: prefill time per request (first scheduled → first token) and inter-token gaps', () => {
  it('closed form: the prefill of a request alone, and of one that waited, without its wait', () => {
    const { engine } = testEngine({ maxNumSeqs: 1 });
    const a = engine.submit(req(100, 3), 0);
    const b = engine.submit(req(200, 2), 0);
    drain(engine);
    const prefillA = p.prefillOverheadMs + 100 * p.prefillPerTokenMs;
    const prefillB = p.prefillOverheadMs + 200 * p.prefillPerTokenMs;
    expect(b.queueMs).toBeCloseTo(a.finishedAt, 9);
    const st = engine.stats();
    expect(st.prefillCount).toBe(2);
    expect(st.prefillSumMs).toBeCloseTo(prefillA + prefillB, 9);
    // TTFT = queue + prefill, request by request.
    expect(st.ttftSumMs).toBeCloseTo(st.queueSumMs + st.prefillSumMs, 9);
    // Decode gaps: 2 after a's first token, 1 after b's.
    expect(st.itlCount).toBe(3);
    expect(st.itlSumMs).toBeCloseTo(3 * p.interTokenMs, 9);
  });

  it('step mode: a chunked prefill counts every step from the one that first schedules it to its first token', () => {
    const engine = stepEngine({ maxNumSeqs: 4 });
    const long = engine.submit(req(150, 2), 0);
    // Arrives during the first step: scheduled at its end, with long's second chunk.
    const late = engine.submit(req(30, 1), 1);
    drain(engine);
    // Steps: [long 64] [long 64] [long 22 + late 30 → both first tokens] [long's decode].
    const s1 = step(64, 64);
    const s2 = step(64, 128);
    const s3 = step(22 + 30, 150 + 30);
    expect(long.firstTokenAt).toBeCloseTo(s1 + s2 + s3, 9);
    expect(late.admittedAt).toBeCloseTo(s1 + s2, 9);
    const st = engine.stats();
    expect(st.prefillCount).toBe(2);
    expect(st.prefillSumMs).toBeCloseTo(s1 + s2 + s3 + s3, 9);
    expect(st.itlCount).toBe(1);
    expect(st.itlSumMs).toBeCloseTo(step(1, 151), 9);
  });

  it('a preemption redoes the prefill but counts the request once, its prefill time from its first scheduling', () => {
    const { engine, trace } = testEngine({ numBlocks: 6, maxNumSeqs: 4 });
    const old = engine.submit(req(32, 40), 0);
    const young = engine.submit(req(32, 40), 0);
    drain(engine);
    expect(young.preemptions).toBeGreaterThan(0);
    expect(trace.finished).toHaveLength(2);
    const st = engine.stats();
    expect(st.prefillCount).toBe(2);
    expect(st.prefillSumMs).toBeCloseTo(old.firstTokenAt - old.admittedAt + (young.firstTokenAt - young.admittedAt), 9);
    expect(st.itlCount).toBe(2 * 39);
    expect(st.itlSumMs).toBeCloseTo(old.finishedAt - old.firstTokenAt + (young.finishedAt - young.firstTokenAt), 9);
  });

  it('a request cancelled before its first token adds no prefill; one cancelled after it keeps its own', () => {
    const { engine } = testEngine({ maxNumSeqs: 1 });
    const running = engine.submit(req(100, 50), 0);
    const waiting = engine.submit(req(100, 5), 0);
    const after = p.prefillOverheadMs + 100 * p.prefillPerTokenMs + 1;
    engine.advance(after);
    expect(running.generated).toBe(1);
    expect(engine.stats().prefillCount).toBe(1);
    engine.cancel(running, after);
    engine.cancel(waiting, after);
    drain(engine);
    expect(engine.stats()).toMatchObject({ prefillCount: 1, cancelled: 2, ttftCount: 1 });
    expect(engine.stats().prefillSumMs).toBeCloseTo(running.firstTokenAt - running.admittedAt, 9);
  });

  for (const mode of ['closed-form', 'step'] as const) {
    it(`${mode}: under a mixed load with jitter, prefix hits and preemptions, the sums are the requests' own`, () => {
      const engine = new Engine({ preset: 'test', mode, jitter: 0.2, numBlocks: 48, maxNumSeqs: 6, maxWaiting: 1_000, seed: 7 });
      const seqs: Sequence[] = [];
      const shared = Array.from({ length: 4 }, (_, i) => 1_000 + i);
      for (let i = 0; i < 120; i++) {
        const prompt = 40 + ((i * 53) % 200);
        const hashes = i % 3 === 0 ? [...shared, 5_000 + i] : undefined;
        seqs.push(engine.submit(req(prompt, 1 + ((i * 7) % 30), hashes ? { blockHashes: hashes } : {}), i * 15));
      }
      drain(engine, 120 * 15);
      const st = engine.stats();
      const done = seqs.filter((s) => s.state === 'finished');
      expect(done).toHaveLength(120);
      expect(st.preemptions).toBeGreaterThan(0);
      expect(st.prefixHitTokens).toBeGreaterThan(0);
      expect(st.prefillCount).toBe(120);
      expect(st.prefillSumMs).toBeCloseTo(
        done.reduce((sum, s) => sum + (s.firstTokenAt - s.admittedAt), 0),
        6,
      );
      expect(st.ttftSumMs).toBeCloseTo(st.queueSumMs + st.prefillSumMs, 6);
      expect(st.itlCount).toBe(done.reduce((n, s) => n + s.generated - 1, 0));
      expect(st.itlSumMs).toBeCloseTo(
        done.reduce((sum, s) => sum + (s.finishedAt - s.firstTokenAt), 0),
        6,
      );
      for (const s of done) expect(s.firstTokenAt - s.admittedAt).toBeGreaterThan(0);
    });
  }
});
