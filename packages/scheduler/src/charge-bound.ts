import type { Endpoint } from '@spillway/fleet';
import type { ChargesConfig } from './config.js';

/** An output limit larger than this is taken as this (no server generates more; it keeps the arithmetic sane). */
const MAX_OUTPUT_TOKENS = 100_000_000;

/**
 * A request's output limit as its body gave it, when usable: a whole number of at least 1 (a
 * negative, fractional or non-numeric limit is the model server's to refuse; here it is as if
 * absent, so the configured default applies), at most MAX_OUTPUT_TOKENS.
 */
export function usableMaxTokens(value: number | undefined): number | undefined {
  if (value === undefined || !Number.isInteger(value) || value < 1) return undefined;
  return Math.min(value, MAX_OUTPUT_TOKENS);
}

/**
 * How long a started request may stay charged to `endpoint` without a completion signal
 * (docs/picking.md, "A request's charge"): `slack` times what it should take there at most — the
 * endpoint's measured queue time, its prompt at the model's prefill rate, its output limit (or the
 * configured default) at the endpoint's measured inter-token time (or the configured one) — within
 * [`minMs`, `maxMs`]. Pure; never NaN.
 */
export function chargeBoundMs(
  config: ChargesConfig,
  endpoint: Endpoint,
  prefillTokensPerS: number,
  promptTokens: number,
  maxTokens: number | undefined,
): number {
  const measured = endpoint.metrics?.rates;
  const outputTokens = usableMaxTokens(maxTokens) ?? config.defaultMaxTokens;
  const prompt = Number.isFinite(promptTokens) && promptTokens > 0 ? promptTokens : 0;
  const expected = (measured?.queueMs ?? 0) + (prompt * 1000) / prefillTokensPerS + outputTokens * (measured?.itlMs ?? config.interTokenMs);
  const bound = config.slack * expected;
  if (!(bound >= config.minMs)) return config.minMs;
  return Math.min(config.maxMs, bound);
}
