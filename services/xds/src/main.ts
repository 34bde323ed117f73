import { runMain } from '@spillway/cli';
import { loadXdsConfig, XDS_HELP } from './config.js';
import { startXds } from './xds.js';

/** close() stops every part promptly; this only guards against a part that hangs anyway. */
const SHUTDOWN_LIMIT_MS = 10_000;

runMain(async () => {
  const config = loadXdsConfig(process.argv.slice(2), process.env);
  if (config === undefined) {
    process.stdout.write(XDS_HELP);
    return;
  }
  const xds = await startXds(config);
  let stopping = false;
  const stop = (signal: string): void => {
    if (stopping) return;
    stopping = true;
    setTimeout(() => process.exit(1), SHUTDOWN_LIMIT_MS).unref();
    process.stderr.write(`spillway-xds: ${signal}, shutting down\n`);
    xds.close().then(
      () => process.exit(0),
      () => process.exit(1),
    );
  };
  process.once('SIGTERM', () => stop('SIGTERM'));
  process.once('SIGINT', () => stop('SIGINT'));
});
