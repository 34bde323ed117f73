import type { ZoneSpec } from './topology.js';

/** Raw counts a run collects; `summarize` turns them into the reported figures. */
export interface Tally {
  readonly zones: readonly ZoneSpec[];
  /** Every arrival of the run, and how each ended (conservation: arrivals = served + 429 + 503 + aborted). */
  arrivals: number;
  served: number;
  shed429: number;
  unavailable503: number;
  aborted: number;
  /** Arrivals in the measurement window [warmup, duration). */
  measuredArrivals: number;
  readonly measured: {
    served: number;
    shed429: number;
    unavailable503: number;
    aborted: number;
    crossZone: number;
    fallback: number;
    spilled: number;
    retries: number;
    outputTokens: number;
  };
  readonly ttft: number[];
  readonly e2e: number[];
  readonly servedByZone: number[];
  tokensInWindow: number;
  readonly windowMs: number;
  prefixHitTokens: number;
  prefixQueryTokens: number;
  /** Order-sensitive hash of every measured request's TTFT, for determinism checks. */
  digest: number;
}

export interface SimResult {
  readonly strategy: string;
  readonly arrivals: number;
  readonly served: number;
  readonly shed429: number;
  readonly unavailable503: number;
  readonly aborted: number;
  /** Measured window (arrivals in [warmup, duration)). */
  readonly measuredArrivals: number;
  readonly measuredServed: number;
  readonly ttftP50: number;
  readonly ttftP90: number;
  readonly ttftP99: number;
  readonly e2eP90: number;
  /** Output tokens generated per second of the window (all replicas). */
  readonly outputTokensPerSec: number;
  /** Shares of measured arrivals (served ones for crossZone, fallback, spill). */
  readonly crossZoneShare: number;
  readonly fallbackShare: number;
  readonly spillShare: number;
  readonly rate429: number;
  readonly rate503: number;
  readonly abortedShare: number;
  readonly prefixHitRate: number;
  readonly servedByZone: readonly number[];
  readonly digest: number;
}

/** Nearest-rank percentile of an ascending array. */
export function pct(sorted: readonly number[], p: number): number {
  if (sorted.length === 0) return Number.NaN;
  const rank = Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1));
  return sorted[rank] as number;
}

export function summarize(strategy: string, t: Tally): SimResult {
  const ttft = [...t.ttft].sort((a, b) => a - b);
  const e2e = [...t.e2e].sort((a, b) => a - b);
  const m = t.measured;
  const servedAll = Math.max(1, t.servedByZone.reduce((a, b) => a + b, 0));
  const arrivals = Math.max(1, t.measuredArrivals);
  return {
    strategy,
    arrivals: t.arrivals,
    served: t.served,
    shed429: t.shed429,
    unavailable503: t.unavailable503,
    aborted: t.aborted,
    measuredArrivals: t.measuredArrivals,
    measuredServed: m.served,
    ttftP50: pct(ttft, 50),
    ttftP90: pct(ttft, 90),
    ttftP99: pct(ttft, 99),
    e2eP90: pct(e2e, 90),
    outputTokensPerSec: t.tokensInWindow / (t.windowMs / 1000),
    crossZoneShare: m.crossZone / servedAll,
    fallbackShare: m.fallback / servedAll,
    spillShare: m.spilled / servedAll,
    rate429: m.shed429 / arrivals,
    rate503: m.unavailable503 / arrivals,
    abortedShare: m.aborted / arrivals,
    prefixHitRate: t.prefixQueryTokens > 0 ? t.prefixHitTokens / t.prefixQueryTokens : 0,
    servedByZone: t.servedByZone,
    digest: t.digest,
  };
}
