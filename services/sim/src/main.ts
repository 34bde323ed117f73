import { startSim } from './server.js';
import { HELP, UsageError, parseSimArgs } from './options.js';
import type { ParsedArgs } from './options.js';

/** The spillway-sim binary: parse flags, start, stop cleanly on SIGINT/SIGTERM. */
async function main(): Promise<void> {
  let parsed: ParsedArgs;
  try {
    parsed = parseSimArgs(process.argv.slice(2), process.env);
  } catch (err) {
    if (!(err instanceof UsageError)) throw err;
    process.stderr.write(`spillway-sim: ${err.message}\n\n${HELP}\n`);
    process.exit(2);
  }
  if (parsed.help) {
    process.stdout.write(`${HELP}\n`);
    return;
  }
  const sim = await startSim({
    ...parsed.options,
    onCrash: () => {
      process.stderr.write('spillway-sim: injected crash (--crash-after-ms)\n');
      process.exit(70);
    },
  });
  const stop = (): void => {
    void sim.close().then(() => process.exit(0));
  };
  process.once('SIGINT', stop);
  process.once('SIGTERM', stop);
}

main().catch((err: unknown) => {
  process.stderr.write(`spillway-sim: ${err instanceof Error ? err.message : String(err)}\n`);
  process.exit(1);
});
