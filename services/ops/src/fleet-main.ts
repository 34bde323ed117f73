import { runMain } from '@spillway/cli';
import { runFleetCli } from './fleet-cli.js';

/** `spillway-fleet`: wires the command to the process (argv, env, stdout, signals, exit code). */
runMain(async () => {
  const interrupted = new Promise<void>((resolve) => {
    process.once('SIGINT', () => resolve());
    process.once('SIGTERM', () => resolve());
  });
  const code = await runFleetCli(process.argv.slice(2), {
    env: process.env,
    out: (text) => process.stdout.write(text),
    err: (text) => process.stderr.write(text),
    tty: process.stdout.isTTY === true,
    interrupted,
  });
  // Exit explicitly: an abandoned connect attempt (unreachable server) would keep the process alive.
  process.exitCode = code;
  process.stdout.write('', () => process.exit(code));
});
