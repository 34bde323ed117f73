import type { EngineConfig } from './config.js';
import type { EngineRequest, Sequence } from './sequence.js';

/**
 * The work of one engine step in step mode: which sequences take part and how many tokens each
 * computes (1 for a decode, a chunk for a prefill). Arrays are reused from step to step, so a
 * step allocates nothing; the engine fills it in scheduling order and reads it back at the step's end.
 */
export class StepBatch<R extends EngineRequest> {
  readonly seqs: Sequence<R>[] = [];
  readonly tokens: number[] = [];
  size = 0;
  /** Tokens computed in the step, and tokens of KV its sequences attend to. */
  totalTokens = 0;
  context = 0;
  budget = 0;

  reset(budget: number): void {
    this.size = 0;
    this.totalTokens = 0;
    this.context = 0;
    this.budget = budget;
  }

  /** Adds `s` computing up to `wanted` tokens within the budget; returns the tokens granted. */
  add(s: Sequence<R>, wanted: number): number {
    const granted = Math.min(wanted, this.budget);
    if (granted <= 0) return 0;
    this.seqs[this.size] = s;
    this.tokens[this.size] = granted;
    this.size++;
    this.budget -= granted;
    this.totalTokens += granted;
    // Each new token attends to the KV before it; the step reads each sequence's KV once.
    this.context += s._context + granted;
    return granted;
  }

  /** Drops references so finished sequences can be collected. */
  clear(): void {
    for (let i = 0; i < this.size; i++) this.seqs[i] = undefined as unknown as Sequence<R>;
    this.size = 0;
  }
}

/** The duration of a step before jitter (see EngineConfig). */
export function stepMs(cfg: EngineConfig, tokens: number, context: number): number {
  return cfg.stepOverheadMs + cfg.stepPerTokenMs * tokens + cfg.stepPerContextTokenMs * context;
}
