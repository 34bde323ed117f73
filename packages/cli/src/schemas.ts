import { z } from 'zod';

/** Flag value schemas shared by every binary; they accept strings (flags, env) and typed values (config files). */
export const port = (fallback?: number) => {
  const schema = z.coerce.number().int().min(0).max(65535);
  return fallback === undefined ? schema : schema.default(fallback);
};
export const positiveInt = () => z.coerce.number().int().positive();
export const nonNegativeInt = () => z.coerce.number().int().nonnegative();
export const durationMs = () => z.coerce.number().finite().nonnegative();
/** `a,b,c` (flags) or a list (config files) to a list of non-empty trimmed strings. */
export const commaList = () =>
  z
    .union([z.string(), z.array(z.string())])
    .transform((value) => (Array.isArray(value) ? value : value.split(',')).map((s) => s.trim()).filter((s) => s.length > 0));

/** pino's levels: the one `--log-level` schema of every binary. */
export const LOG_LEVELS = ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'] as const;
export type LogLevel = (typeof LOG_LEVELS)[number];
export const logLevel = (fallback: LogLevel = 'info') => z.enum(LOG_LEVELS).default(fallback);
