import { CliError } from './flags.js';

/**
 * Runs a binary's main function: a CliError prints its message and exits 2 (bad usage); anything
 * else prints the error and exits 1. Keeps every binary's failure behaviour the same.
 */
export function runMain(main: () => Promise<void>): void {
  main().catch((error: unknown) => {
    if (error instanceof CliError) {
      process.stderr.write(`error: ${error.message}\n`);
      process.exit(2);
    }
    process.stderr.write(`fatal: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}\n`);
    process.exit(1);
  });
}
