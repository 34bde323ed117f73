import { CliError, runMain } from '@spillway/cli';
import { HELP, parseCollectorArgs } from './config.js';
import { EndpointsFileError } from './endpoints-file.js';
import { startCollector } from './app.js';

/** How long stopping may take before the binary exits anyway (readiness publishes retry for up to 10 s while NATS is up). */
const STOP_GUARD_MS = 15_000;

/** The spillway-collector binary: flags → running collector; exits 2 naming a bad flag. */
runMain(async () => {
  const parsed = parseCollectorArgs(process.argv.slice(2), process.env);
  if (parsed.help) {
    process.stdout.write(HELP);
    return;
  }
  let running;
  try {
    running = await startCollector(parsed.config, { defaultMetrics: true });
  } catch (error) {
    if (error instanceof EndpointsFileError) throw new CliError(`--endpoints: ${error.message}`, 'endpoints');
    throw error;
  }
  let stopping = false;
  const shutdown = (signal: string): void => {
    if (stopping) return;
    stopping = true;
    process.stderr.write(`spillway-collector: ${signal}, stopping\n`);
    // Every part stops promptly (a lost NATS included); should one hang anyway, exit rather than wait for SIGKILL.
    setTimeout(() => {
      process.stderr.write(`spillway-collector: not stopped after ${STOP_GUARD_MS} ms, exiting\n`);
      process.exit(1);
    }, STOP_GUARD_MS).unref();
    running
      .stop()
      .then(() => process.exit(0))
      .catch(() => process.exit(1));
  };
  process.on('SIGINT', () => shutdown('SIGINT'));
  process.on('SIGTERM', () => shutdown('SIGTERM'));
});
