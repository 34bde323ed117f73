import { runMain } from '@spillway/cli';
import { runProvisionCli } from './provision-cli.js';

/** `spillway-provision`: wires the command to the process (argv, env, stdout, exit code). */
runMain(async () => {
  const code = await runProvisionCli(process.argv.slice(2), {
    env: process.env,
    out: (text) => process.stdout.write(text),
    err: (text) => process.stderr.write(text),
  });
  // Exit explicitly: an abandoned connect attempt (unreachable server) would keep the process alive.
  process.exitCode = code;
  process.stdout.write('', () => process.exit(code));
});
