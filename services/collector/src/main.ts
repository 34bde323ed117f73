import { ConfigError, HELP, parseCollectorArgs } from './config.js';
import { EndpointsFileError } from './endpoints-file.js';
import { startCollector } from './app.js';

/** The spillway-collector binary: flags → running collector; exits non-zero naming a bad flag. */
async function main(): Promise<void> {
  let parsed;
  try {
    parsed = parseCollectorArgs(process.argv.slice(2));
  } catch (error) {
    if (error instanceof ConfigError) {
      process.stderr.write(`spillway-collector: ${error.message}\n(see --help)\n`);
      process.exit(2);
    }
    throw error;
  }
  if (parsed.help) {
    process.stdout.write(HELP);
    return;
  }
  let running;
  try {
    running = await startCollector(parsed.config, { defaultMetrics: true });
  } catch (error) {
    if (error instanceof EndpointsFileError) {
      process.stderr.write(`spillway-collector: --endpoints: ${error.message}\n`);
      process.exit(2);
    }
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
}

main().catch((error: unknown) => {
  process.stderr.write(`spillway-collector: ${(error as Error).stack ?? String(error)}\n`);
  process.exit(1);
});
