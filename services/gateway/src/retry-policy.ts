// The route's retry policy as Envoy's router applies it (envoyproxy/envoy, source/common/router/
// retry_state_impl.cc `RetryStateImpl::wouldRetryFromHeaders` / `wouldRetryFromReset`, and
// source/common/common/backoff_strategy.cc `JitteredExponentialBackOffStrategy`). Pure.

/** The retry_on conditions the gateway knows. */
const CONDITIONS = ['5xx', 'gateway-error', 'reset', 'connect-failure'] as const;
export type RetryCondition = (typeof CONDITIONS)[number];
export type RetryOn = ReadonlySet<RetryCondition>;

/** What ended an attempt without a response Envoy would pass on. */
export type AttemptFailure = 'connect-failure' | 'reset' | 'timeout';

/** A retry_on list (`5xx,reset,connect-failure`); an unknown name throws a RangeError naming it. */
export function parseRetryOn(names: readonly string[]): RetryOn {
  const set = new Set<RetryCondition>();
  for (const raw of names) {
    const name = raw.trim();
    if (name === '') continue;
    if (!(CONDITIONS as readonly string[]).includes(name)) {
      throw new RangeError(`unknown retry_on condition ${JSON.stringify(name)} (known: ${CONDITIONS.join(', ')})`);
    }
    set.add(name as RetryCondition);
  }
  return set;
}

/** wouldRetryFromHeaders: 5xx retries any 5xx; gateway-error only 502, 503 and 504. */
export function retriesStatus(retryOn: RetryOn, status: number): boolean {
  if (retryOn.has('5xx') && status >= 500 && status <= 599) return true;
  return retryOn.has('gateway-error') && (status === 502 || status === 503 || status === 504);
}

/**
 * wouldRetryFromReset: any reset with reset, 5xx or gateway-error (a reset counts as a 5xx);
 * a connection failure also with connect-failure. A per-try timeout is retried only under 5xx or
 * gateway-error (Router::Filter::onPerTryTimeout: it is a reset that ends in a 504).
 */
export function retriesFailure(retryOn: RetryOn, failure: AttemptFailure): boolean {
  if (retryOn.has('5xx') || retryOn.has('gateway-error')) return true;
  if (failure === 'timeout') return false;
  if (retryOn.has('reset')) return true;
  return failure === 'connect-failure' && retryOn.has('connect-failure');
}

/** The route's retry_back_off defaults: base 25 ms, maximum 10 x base. */
export const RETRY_BASE_MS = 25;
export const RETRY_MAX_MS = 250;

/**
 * Fully jittered exponential back-off before retry `retry` (1 = the first retry): uniform in
 * [0, (2^retry - 1) x base), capped at the maximum (JitteredExponentialBackOffStrategy::nextBackOffMs).
 */
export function retryBackOffMs(retry: number, random: () => number): number {
  return jitteredBackOffMs(retry, RETRY_BASE_MS, RETRY_MAX_MS, random);
}

/** JitteredExponentialBackOffStrategy with another base and maximum (attempt 1 = the first back-off). */
export function jitteredBackOffMs(attempt: number, baseMs: number, maxMs: number, random: () => number): number {
  const ceiling = (2 ** Math.min(attempt, 30) - 1) * baseMs;
  return Math.min(Math.floor(random() * ceiling), maxMs);
}
