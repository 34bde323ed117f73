import { runMain } from '@spillway/cli';
import { EPP_HELP, loadEppConfig } from './config.js';
import { startEpp } from './epp.js';

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
    epp.close().then(
      () => process.exit(0),
      () => process.exit(1),
    );
  };
  process.once('SIGTERM', () => stop('SIGTERM'));
  process.once('SIGINT', () => stop('SIGINT'));
});
