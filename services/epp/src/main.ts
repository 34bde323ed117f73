import { runMain } from '@spillway/cli';
import { loadEppConfig } from './config/config.js';
import { EPP_HELP } from './config/flags.js';
import { startEpp } from './app/epp.js';

/** close() stops every part promptly; this only guards against a part that hangs anyway. */
const SHUTDOWN_LIMIT_MS = 10_000;

runMain(async () => {
  const config = loadEppConfig(process.argv.slice(2), process.env);
  if (config === undefined) {
    process.stdout.write(EPP_HELP);
    return;
  }
  const epp = await startEpp(config);
  let stopping = false;
  const stop = (signal: string) => {
    if (stopping) return;
    stopping = true;
    epp.core.logger.info({ signal }, 'shutting down');
    setTimeout(() => {
      epp.core.logger.error({ limitMs: SHUTDOWN_LIMIT_MS }, 'shutdown did not finish in time; exiting');
      process.exit(1);
    }, SHUTDOWN_LIMIT_MS).unref();
    epp.close().then(
      () => process.exit(0),
      () => process.exit(1),
    );
  };
  process.once('SIGTERM', () => stop('SIGTERM'));
  process.once('SIGINT', () => stop('SIGINT'));
});
