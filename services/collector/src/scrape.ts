import { StringDecoder } from 'node:string_decoder';
import type { Engine } from '@spillway/events';
import { BudgetError, DEFAULT_SCRAPE_LIMITS, type ScrapeLimits } from './budget.js';
import { readCounters, type CounterReading } from './counters.js';
import { detectEngine, mapExposition, type EngineSample } from './engines.js';
import { ALL_FAMILIES, ENGINE_FAMILIES } from './families.js';
import { ExpositionError, FamilyFilter, KeptParser, parseKept, type Exposition } from './exposition.js';

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
  /** The server's cumulative counters, for service rates. */
  counters: CounterReading;
}

/** Wall time a scrape's work may take before its CPU time is metered exactly (see ScrapeReader.metered). */
const PRECISE_AFTER_MS = 1;

/**
 * One scrape's body, read as it arrives: bytes → text → the lines of the engine's families,
 * parsed as they are found (KeptParser) → mapped at the end. While the endpoint's engine is still
 * to be detected, the lines of every engine's families are kept as text instead, for detectEngine
 * to search, and parsed at the end (parseKept): the same reading, once per endpoint. CPU
 * spent in this work is counted against `cpuBudgetMs`, and the filter bounds what is kept, so a
 * huge or pathological exposition fails this scrape (BudgetError) instead of stalling the others.
 */
export class ScrapeReader {
  private readonly decoder = new StringDecoder('utf8');
  private readonly filter: FamilyFilter;
  /** Parses the kept lines as they come, once the engine is known. */
  private readonly parser: KeptParser | undefined;
  private cpuMicros = 0;
  private wallMs = 0;
  private readonly preciseAfterMs: number;

  constructor(
    private readonly engine: Engine | undefined,
    private readonly limits: ScrapeLimits = DEFAULT_SCRAPE_LIMITS,
  ) {
    this.preciseAfterMs = Math.min(PRECISE_AFTER_MS, limits.cpuBudgetMs / 4);
    if (engine === undefined) this.filter = new FamilyFilter(ALL_FAMILIES, limits);
    else {
      this.parser = new KeptParser();
      this.filter = new FamilyFilter(ENGINE_FAMILIES[engine], limits, this.parser);
    }
  }

  push(chunk: Buffer): void {
    this.metered(() => this.filter.push(this.decoder.write(chunk)));
  }

  /** Parses and maps what was kept. Throws ExtractError or BudgetError. */
  finish(): Extracted {
    return this.metered(() => {
      this.filter.push(this.decoder.end());
      const kept = this.filter.finish();
      const { engine, parser } = this;
      if (engine === undefined || parser === undefined) return extractFiltered(kept, this.engine);
      return mapped(engine, () => parser.finish());
    });
  }

  private metered<T>(work: () => T): T {
    // Reading the process's CPU time is a system call (getrusage), and at hundreds of scrapes per
    // sample interval two of them per chunk were an eighth of the collector's CPU. Work done in one
    // synchronous call uses at most its wall time of this thread's CPU, so while a scrape's work has
    // taken less wall time than `preciseAfterMs` (a normal scrape takes ~0.1 ms) it cannot be over
    // budget, and performance.now() is enough. Past that, each piece is metered in CPU time — not
    // wall time: a busy machine that preempts the collector must not fail its scrapes. A scrape's
    // CPU is thus bounded by the budget plus preciseAfterMs.
    if (this.wallMs < this.preciseAfterMs) {
      const start = performance.now();
      const result = work();
      this.wallMs += performance.now() - start;
      return result;
    }
    const before = process.cpuUsage();
    const result = work();
    const used = process.cpuUsage(before);
    this.cpuMicros += used.user + used.system;
    if (this.cpuMicros > this.limits.cpuBudgetMs * 1000) {
      throw new BudgetError('too-slow', `reading the exposition took more than ${this.limits.cpuBudgetMs} ms of CPU`);
    }
    return result;
  }
}

/**
 * Exposition text → engine sample. The engine is the endpoint's own, else the collector's
 * default, else guessed from the metric names. Only the engine's few families are parsed (by
 * parseKept, which gives what the general parser would).
 * Throws ExtractError: `parse` for text the parser rejects, `invalid` for missing gauges or
 * out-of-range values, `unknown-engine` when no engine's metrics are present; BudgetError when
 * the text exceeds the default scrape limits.
 */
export function extractSample(text: string, engine: Engine | undefined): Extracted {
  const reader = new ScrapeReader(engine);
  reader.push(Buffer.from(text, 'utf8'));
  return reader.finish();
}

/** Maps the already-filtered lines of an exposition. */
function extractFiltered(kept: string, engine: Engine | undefined): Extracted {
  const chosen = engine ?? detectEngine(kept);
  if (chosen === undefined) throw new ExtractError('unknown-engine', 'no vLLM, SGLang, TensorRT-LLM or Triton metrics in the exposition');
  return mapped(chosen, () => parseKept(kept));
}

/** The engine's sample and counters from the exposition `parse` gives; its errors are `parse`, the mapping's `invalid`. */
function mapped(engine: Engine, parse: () => Exposition): Extracted {
  let exposition;
  try {
    exposition = parse();
  } catch (error) {
    throw new ExtractError('parse', (error as Error).message);
  }
  try {
    return { engine, sample: mapExposition(engine, exposition), counters: readCounters(engine, exposition) };
  } catch (error) {
    if (error instanceof ExpositionError) throw new ExtractError('invalid', error.message);
    throw error;
  }
}
