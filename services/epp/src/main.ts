import { runMain } from '@spillway/cli';
import { loadEppConfig } from './config/config.js';
import { EPP_HELP } from './config/flags.js';
import { startEpp } from './app/epp.js';

/** After the drain, close() stops every part promptly; this only guards against a part that hangs anyway. */
const CLOSE_LIMIT_MS = 10_000;

runMain(async () => {
  const config = loadEppConfig(process.argv.slice(2), process.env);
  if (config === undefined) {
    process.stdout.write(EPP_HELP);
    return;
  }
  const epp = await startEpp(config);
  const limitMs = config.flags.drainDelayMs + config.flags.drainTimeoutMs + CLOSE_LIMIT_MS;
  let stopping = false;
  // The first signal drains (app/drain.ts); a second one closes at once.
  const stop = (signal: string) => {
    const exit = (code: number) => () => process.exit(code);
    if (stopping) {
      epp.core.logger.info({ signal }, 'second signal: closing now');
      epp.close().then(exit(0), exit(1));
      return;
    }
    stopping = true;
    epp.core.logger.info({ signal }, 'shutting down');
    setTimeout(() => {
      epp.core.logger.error({ limitMs }, 'shutdown did not finish in time; exiting');
      process.exit(1);
    }, limitMs).unref();
    epp.drain().then(exit(0), exit(1));
  };
  process.on('SIGTERM', () => stop('SIGTERM'));
  process.on('SIGINT', () => stop('SIGINT'));
});
