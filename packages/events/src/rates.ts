import { compileSchema, REJECTED } from './precompile.js';
import { serviceRatesSchema, type ServiceRates } from './schema.js';

/**
 * A model server's cumulative counters at one moment, as far as it exposes them: what the
 * optional `rates` of a metrics event are computed from (the collector reads them from the
 * server's Prometheus exposition; the routing simulation from its engine model).
 */
export interface Counters {
  promptTokens?: number;
  generationTokens?: number;
  /** Requests completed. */
  requests?: number;
  ttft?: Moments;
  queue?: Moments;
  itl?: Moments;
  /**
   * Prefill time per request: from when it was first scheduled until its first token (vLLM's
   * `request_prefill_time_seconds`; preemptions during the prefill included).
   */
  prefill?: Moments;
  /** Prompt tokens (or KV blocks) found in the prefix cache, and looked up there. */
  prefixHits?: number;
  prefixQueries?: number;
}

/** A histogram's `_sum` (in ms) and `_count`. */
export interface Moments {
  sumMs: number;
  count: number;
}

/**
 * Default span of the deltas behind a rate. Samples come every 100 ms; a rate over one interval
 * would count the handful of requests that happened to finish in it (at 10 req/s, one or two), so
 * the deltas span about two seconds: smooth enough to price an endpoint, recent enough to follow a
 * load change within a couple of seconds.
 */
export const DEFAULT_RATES_WINDOW_MS = 2_000;

/** Snapshots kept per endpoint at most, whatever the sample interval: bounded memory. */
const MAX_SNAPSHOTS = 256;

interface Snapshot {
  at: number;
  counters: Counters;
}

export interface RateUpdate {
  /** The rates over the window, when there is enough history and every value is in range. */
  rates?: ServiceRates;
  /** A counter went down (a restarted server): the history was dropped. */
  reset?: boolean;
  /** The computed rates failed the event schema (an absurd counter jump): left out. */
  outOfRange?: boolean;
}

/**
 * Service rates of one endpoint from its counters, over a sliding window: each update adds the
 * counters of a scrape taken at `atMs` (a monotonic clock) and compares them with the oldest
 * snapshot still covering the window. Pure: no clock of its own.
 *
 * - The three throughputs (prompt and generation tokens, completed requests per second) come
 *   together or not at all; means (TTFT, queue, ITL) are Δsum / Δcount of the server's histograms
 *   and are left out when nothing was observed in the window; the prefix hit rate is Δhits /
 *   Δlookups. A counter the server does not expose leaves its field out.
 * - Prefill (`prefillMs`, `prefillTokensPerS`) comes from the prefill-time histogram: its mean, and
 *   the window's uncached prompt tokens (prompt tokens × (1 − the window's prefix hit rate), all
 *   prompt tokens without hit data) per second of prefill time. Both need Δcount > 0 and Δsum > 0.
 *   That histogram going down while nothing else does is no restart but a broken series (a
 *   negative observation: vLLM's prefill time is a difference of two timestamps); it costs only
 *   these two fields, for as long as the window spans the decrease, not the whole history.
 * - Nothing is reported until the history spans at least half the window.
 * - A counter that goes down (server restart) drops the history; a gap longer than the window
 *   (failed scrapes, a pod that was not ready) starts it afresh, so a rate never averages over a gap.
 * - Every rate is validated with the event schema's `rates` part before it is returned: a reader
 *   drops a whole event with one invalid field, so an invalid rate must never be published.
 */
export class RateWindow {
  private readonly history: Snapshot[] = [];
  /** When the prefill moments last went down from one snapshot to the next (see the class note). */
  private prefillDownAt = Number.NEGATIVE_INFINITY;

  constructor(private readonly windowMs: number = DEFAULT_RATES_WINDOW_MS) {}

  update(atMs: number, counters: Counters): RateUpdate {
    const newest = this.history.at(-1);
    let reset = false;
    if (newest !== undefined && (atMs - newest.at > this.windowMs || atMs <= newest.at || wentDown(newest.counters, counters))) {
      reset = wentDown(newest.counters, counters);
      this.history.length = 0;
    }
    if (newest !== undefined && decreased(newest.counters.prefill, counters.prefill)) this.prefillDownAt = atMs;
    this.history.push({ at: atMs, counters });
    // Keep the newest snapshot at or before the window's start as the base, and none older.
    while (this.history.length > MAX_SNAPSHOTS || (this.history.length > 1 && (this.history[1] as Snapshot).at <= atMs - this.windowMs)) {
      this.history.shift();
    }
    const base = this.history[0] as Snapshot;
    const span = atMs - base.at;
    if (span < this.windowMs / 2) return reset ? { reset } : {};
    const rates = ratesBetween(base.counters, counters, span, base.at >= this.prefillDownAt);
    if (rates === undefined) return reset ? { reset } : {};
    const checked = acceptRates(rates);
    return checked !== REJECTED ? { rates: checked } : { outOfRange: true };
  }
}

/**
 * The `rates` schema's compiled accept-check (precompile.ts: zod's verdict and value, held to zod
 * by its property test): the collector updates a window on every scrape, thousands a second, and
 * zod's safeParse cost more than computing the rates.
 */
const acceptRates = compileSchema(serviceRatesSchema);

const COUNTS = ['promptTokens', 'generationTokens', 'requests', 'prefixHits', 'prefixQueries'] as const;
// Not `prefill`: a restart takes every counter down, and prefill going down alone is handled apart.
const MOMENTS = ['ttft', 'queue', 'itl'] as const;

/** Whether any counter present in both snapshots decreased. */
function wentDown(before: Counters, after: Counters): boolean {
  for (const key of COUNTS) {
    const [a, b] = [before[key], after[key]];
    if (a !== undefined && b !== undefined && b < a) return true;
  }
  for (const key of MOMENTS) if (decreased(before[key], after[key])) return true;
  return false;
}

function decreased(a: Moments | undefined, b: Moments | undefined): boolean {
  return a !== undefined && b !== undefined && (b.count < a.count || b.sumMs < a.sumMs);
}

const prefillMsSchema = serviceRatesSchema.shape.prefillMs;
const prefillTokensPerSSchema = serviceRatesSchema.shape.prefillTokensPerS;

/**
 * The window's prefill fields, each checked against its bounds on its own: an absurd prefill
 * histogram leaves these two out, never the rest of the rates.
 */
function addPrefill(rates: ServiceRates, before: Moments | undefined, after: Moments | undefined, promptTokens: number): void {
  if (before === undefined || after === undefined) return;
  const count = after.count - before.count;
  const sumMs = after.sumMs - before.sumMs;
  if (!(count > 0 && sumMs > 0)) return;
  const prefillMs = sumMs / count;
  if (!prefillMsSchema.safeParse(prefillMs).success) return;
  rates.prefillMs = prefillMs;
  const uncached = promptTokens * (1 - (rates.prefixHitRate ?? 0));
  const perS = (uncached * 1000) / sumMs;
  // No uncached token in the window (every prompt cached): no rate rather than 0 tokens/s.
  if (uncached > 0 && prefillTokensPerSSchema.safeParse(perS).success) rates.prefillTokensPerS = perS;
}

function delta(before: number | undefined, after: number | undefined): number | undefined {
  return before === undefined || after === undefined ? undefined : after - before;
}

/** Δsum / Δcount, or undefined when nothing was observed in between. */
function mean(before: Moments | undefined, after: Moments | undefined): number | undefined {
  if (before === undefined || after === undefined) return undefined;
  const count = after.count - before.count;
  return count > 0 ? (after.sumMs - before.sumMs) / count : undefined;
}

function ratesBetween(before: Counters, after: Counters, spanMs: number, prefillComparable: boolean): ServiceRates | undefined {
  const prompt = delta(before.promptTokens, after.promptTokens);
  const generation = delta(before.generationTokens, after.generationTokens);
  const requests = delta(before.requests, after.requests);
  if (prompt === undefined || generation === undefined || requests === undefined) return undefined;
  const perSecond = (n: number): number => (n * 1000) / spanMs;
  const rates: ServiceRates = {
    windowMs: Math.max(1, Math.round(spanMs)),
    promptTokensPerS: perSecond(prompt),
    generationTokensPerS: perSecond(generation),
    requestsPerS: perSecond(requests),
  };
  const ttft = mean(before.ttft, after.ttft);
  const queue = mean(before.queue, after.queue);
  const itl = mean(before.itl, after.itl);
  if (ttft !== undefined) rates.ttftMs = ttft;
  if (queue !== undefined) rates.queueMs = queue;
  if (itl !== undefined) rates.itlMs = itl;
  const hits = delta(before.prefixHits, after.prefixHits);
  const queries = delta(before.prefixQueries, after.prefixQueries);
  // A server counting more hits than lookups is inconsistent: no hit rate rather than a wrong one.
  if (hits !== undefined && queries !== undefined && queries > 0 && hits <= queries) rates.prefixHitRate = hits / queries;
  if (prefillComparable) addPrefill(rates, before.prefill, after.prefill, prompt);
  return rates;
}
