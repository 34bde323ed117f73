import type { Engine } from '@spillway/events';
import { ENGINE_FAMILIES, detectEngine, mapExposition, type EngineSample } from './engines.js';
import { ExpositionError, parseExposition, selectFamilies } from './exposition.js';

export type ExtractFailureReason = 'parse' | 'invalid' | 'unknown-engine';

export class ExtractError extends Error {
  override readonly name = 'ExtractError';
  constructor(
    readonly reason: ExtractFailureReason,
    message: string,
  ) {
    super(message);
  }
}

export interface Extracted {
  engine: Engine;
  sample: EngineSample;
}

/**
 * Exposition text → engine sample. The engine is the endpoint's own, else the collector's
 * default, else guessed from the metric names. Only the engine's few families are parsed.
 * Throws ExtractError: `parse` for text the parser rejects, `invalid` for missing gauges or
 * out-of-range values, `unknown-engine` when no engine's metrics are present.
 */
export function extractSample(text: string, engine: Engine | undefined): Extracted {
  const chosen = engine ?? detectEngine(text);
  if (chosen === undefined) throw new ExtractError('unknown-engine', 'no vLLM, SGLang, TensorRT-LLM or Triton metrics in the exposition');
  let exposition;
  try {
    exposition = parseExposition(selectFamilies(text, ENGINE_FAMILIES[chosen]));
  } catch (error) {
    throw new ExtractError('parse', (error as Error).message);
  }
  try {
    return { engine: chosen, sample: mapExposition(chosen, exposition) };
  } catch (error) {
    if (error instanceof ExpositionError) throw new ExtractError('invalid', error.message);
    throw error;
  }
}
