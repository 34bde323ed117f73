import { CliError, runMain } from '@spillway/cli';
import { HELP, parseCollectorArgs } from './config.js';
import { EndpointsFileError } from './endpoints-file.js';
import { startCollector } from './app.js';

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
    running
      .stop()
      .then(() => process.exit(0))
      .catch(() => process.exit(1));
  };
  process.on('SIGINT', () => shutdown('SIGINT'));
  process.on('SIGTERM', () => shutdown('SIGTERM'));
});
