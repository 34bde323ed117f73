import { Engine } from '../src/index.js';
import type { EngineListener, EngineOptions, EngineRequest, Sequence } from '../src/index.js';

export interface Trace {
  tokens: number;
  finished: Sequence[];
  preempted: Sequence[];
}

/** An engine on the jitter-free test preset that records what happens. */
export function testEngine(options: EngineOptions = {}): { engine: Engine; trace: Trace } {
  const trace: Trace = { tokens: 0, finished: [], preempted: [] };
  const listener: EngineListener<EngineRequest> = {
    onToken: () => void trace.tokens++,
    onFinish: (s) => void trace.finished.push(s),
    onPreempt: (s) => void trace.preempted.push(s),
  };
  return { engine: new Engine({ preset: 'test', ...options }, listener), trace };
}

/** Run virtual time until nothing is left to do; returns the final time. */
export function drain(engine: Engine, from = 0): number {
  let t = from;
  for (let next = engine.nextEventAt(); Number.isFinite(next); next = engine.nextEventAt()) {
    t = next;
    engine.advance(t);
  }
  return t;
}

export function req(promptTokens: number, outputTokens: number, extra: Partial<EngineRequest> = {}): EngineRequest {
  return { promptTokens, outputTokens, ...extra };
}
