import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { Engine } from '../src/index.js';
import type { EngineRequest, Sequence } from '../src/index.js';

type Op =
  | { kind: 'submit'; prompt: number; output: number; prefix: number; lora: number; dt: number }
  | { kind: 'cancel'; pick: number; dt: number }
  | { kind: 'advance'; dt: number };

const op: fc.Arbitrary<Op> = fc.oneof(
  {
    weight: 6,
    arbitrary: fc.record({
      kind: fc.constant('submit' as const),
      prompt: fc.integer({ min: 1, max: 300 }),
      output: fc.integer({ min: 1, max: 120 }),
      prefix: fc.integer({ min: 0, max: 3 }),
      lora: fc.integer({ min: 0, max: 3 }),
      dt: fc.integer({ min: 0, max: 50 }),
    }),
  },
  { weight: 1, arbitrary: fc.record({ kind: fc.constant('cancel' as const), pick: fc.nat(), dt: fc.integer({ min: 0, max: 50 }) }) },
  { weight: 2, arbitrary: fc.record({ kind: fc.constant('advance' as const), dt: fc.integer({ min: 0, max: 500 }) }) },
);

/** Hashes from one of a few shared "system prompts", so prefix hits and evictions happen. */
function hashesFor(prefix: number, prompt: number): number[] {
  return Array.from({ length: Math.floor(prompt / 16) }, (_, i) => prefix * 1000 + i + 1);
}

describe.each(['closed-form', 'step'] as const)('engine (%s): conservation (property)', (mode) => {
  it('every request finishes, is rejected or is cancelled; blocks are never leaked', () => {
    fc.assert(
      fc.property(
        fc.array(op, { maxLength: 80 }),
        fc.record({
          maxNumSeqs: fc.integer({ min: 1, max: 6 }),
          numBlocks: fc.integer({ min: 8, max: 60 }),
          maxWaiting: fc.integer({ min: 0, max: 10 }),
          maxLoras: fc.integer({ min: 0, max: 2 }),
        }),
        (ops, cfg) => {
          const live = new Set<Sequence>();
          const done = new Set<Sequence>();
          const engine = new Engine<EngineRequest>(
            { preset: 'test', mode, ...cfg, jitter: 0.3, seed: 3 },
            {
              onFinish: (s) => {
                expect(live.delete(s)).toBe(true);
                done.add(s);
              },
            },
          );
          const all: Sequence[] = [];
          let t = 0;
          const checkBlocks = (): void => {
            // Cached blocks may be shared between sequences: count each once.
            let held = 0;
            const shared = new Set<object>();
            for (const s of live) {
              if (s.state !== 'running') continue;
              held += s._anonBlocks;
              for (const b of s._blocks) shared.add(b);
            }
            held += shared.size;
            const st = engine.stats();
            expect(st.usedBlocks).toBe(held);
            expect(st.running).toBeLessThanOrEqual(cfg.maxNumSeqs);
            expect(st.usedBlocks).toBeLessThanOrEqual(cfg.numBlocks);
          };
          for (const o of ops) {
            t += o.dt;
            if (o.kind === 'submit') {
              const r: EngineRequest = {
                promptTokens: o.prompt,
                outputTokens: o.output,
                blockHashes: hashesFor(o.prefix, o.prompt),
                ...(o.lora > 0 ? { lora: `l${o.lora}` } : {}),
              };
              const s = engine.submit(r, t);
              all.push(s);
              if (s.state !== 'rejected') live.add(s);
            } else if (o.kind === 'cancel') {
              const s = all[o.pick % Math.max(1, all.length)];
              if (s && engine.cancel(s, t)) live.delete(s);
            } else {
              engine.advance(t);
            }
            checkBlocks();
          }
          for (let next = engine.nextEventAt(); Number.isFinite(next); next = engine.nextEventAt()) {
            engine.advance(next);
            checkBlocks();
          }
          const st = engine.stats();
          expect(live.size).toBe(0);
          expect(st.submitted).toBe(all.length);
          expect(st.finished + st.rejected + st.cancelled).toBe(st.submitted);
          expect(st.finished).toBe(done.size);
          expect(engine.idle).toBe(true);
          expect(st.usedBlocks).toBe(0);
          for (const s of done) expect(s.generated).toBe(s.request.outputTokens);
        },
      ),
      { numRuns: 150, seed: 20240601 },
    );
  });
});
