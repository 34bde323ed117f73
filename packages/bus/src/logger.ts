/**
 * The little the bus logs, in pino's argument order (fields first), so a pino logger can be passed
 * as is. Every method is optional on purpose: the default is to log nothing.
 */
export interface Logger {
  warn(fields: Record<string, unknown>, message: string): void;
  info?(fields: Record<string, unknown>, message: string): void;
}
