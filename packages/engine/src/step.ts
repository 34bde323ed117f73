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
  /** Prefill attention work: (query token, earlier token) pairs of the step's prefill chunks. */
  attentionPairs = 0;
  budget = 0;

  reset(budget: number): void {
    this.size = 0;
    this.totalTokens = 0;
    this.context = 0;
    this.attentionPairs = 0;
    this.budget = budget;
  }

  /**
   * Adds `s` computing up to `wanted` tokens within the budget (a prefill chunk, or one decode);
   * returns the tokens granted.
   */
  add(s: Sequence<R>, wanted: number, prefill: boolean): number {
    const granted = Math.min(wanted, this.budget);
    if (granted <= 0) return 0;
    this.seqs[this.size] = s;
    this.tokens[this.size] = granted;
    this.size++;
    this.budget -= granted;
    this.totalTokens += granted;
    // Each new token attends to the KV before it; the step reads each sequence's KV once.
    this.context += s._context + granted;
    // A prefill chunk's queries attend to everything before them (causal): its attention is compute,
    // growing with the square of the prompt. A decode's one query is the KV read above.
    if (prefill) this.attentionPairs += granted * s._context + (granted * (granted + 1)) / 2;
    return granted;
  }

  /** Drops references so finished sequences can be collected. */
  clear(): void {
    for (let i = 0; i < this.size; i++) this.seqs[i] = undefined as unknown as Sequence<R>;
    this.size = 0;
  }
}

/** The duration of a step before jitter (see EngineConfig). */
export function stepMs(
  cfg: EngineConfig,
  work: { readonly totalTokens: number; readonly context: number; readonly attentionPairs: number },
): number {
  return (
    cfg.stepOverheadMs +
    cfg.stepPerTokenMs * work.totalTokens +
    cfg.stepPerContextTokenMs * work.context +
    cfg.stepPerAttentionPairMs * work.attentionPairs
  );
}
