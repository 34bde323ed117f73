/**
 * What one scrape of one endpoint may cost. A model server is not trusted to be small or quick:
 * a misconfigured or hostile one must not slow the scrapes of every other pod, so each scrape is
 * cut off once it exceeds any of these, and the endpoint is marked failed and backed off.
 */
export interface ScrapeLimits {
  /** Bytes of exposition read before the scrape is abandoned (`too-large`). */
  readonly maxBytes: number;
  /** Characters in one line of the exposition (a line is buffered until its end is seen). */
  readonly maxLineLength: number;
  /** Characters of the lines kept for parsing (only the engine's few families are kept). */
  readonly maxKeptLength: number;
  /** Lines kept for parsing: the parser costs about 5–40 µs a line. */
  readonly maxKeptLines: number;
  /** CPU time spent filtering, parsing and mapping one scrape (`too-slow`). */
  readonly cpuBudgetMs: number;
}

/**
 * Defaults, against real expositions: vLLM serves 5–100 KB (a few hundred KB with many data-parallel
 * ranks and adapters), of which the collector keeps well under a hundred lines; filtering costs about
 * 2 ms of CPU per MiB and a normal scrape well under 5 ms.
 */
export const DEFAULT_SCRAPE_LIMITS: ScrapeLimits = {
  maxBytes: 4 * 1024 * 1024,
  maxLineLength: 64 * 1024,
  maxKeptLength: 256 * 1024,
  maxKeptLines: 2_048,
  cpuBudgetMs: 50,
};

export type BudgetReason = 'too-large' | 'too-slow';

/** A scrape that exceeded one of its limits: the endpoint is failed and backed off at once. */
export class BudgetError extends Error {
  override readonly name = 'BudgetError';
  constructor(
    readonly reason: BudgetReason,
    message: string,
  ) {
    super(message);
  }
}
