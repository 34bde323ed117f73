import { runMain } from '@spillway/cli';
import { startSim } from './server.js';
import { HELP, parseSimArgs } from './options.js';

/** The spillway-sim binary: parse flags, start, stop cleanly on SIGINT/SIGTERM. */
runMain(async () => {
  const parsed = parseSimArgs(process.argv.slice(2), process.env);
  if (parsed.help) {
    process.stdout.write(HELP);
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
});
