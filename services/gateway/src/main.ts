// The spillway-gateway binary: flags -> running gateway; a bad flag exits 2 naming it.
import { renderHelp, runMain } from '@spillway/cli';
import { SUMMARY, gatewayFlags, parseGatewayArgs } from './flags.js';
import { startGateway } from './gateway.js';

runMain(async () => {
  const parsed = parseGatewayArgs(process.argv.slice(2), process.env);
  if (parsed.help) {
    process.stdout.write(renderHelp('spillway-gateway', SUMMARY, gatewayFlags));
    return;
  }
  let gateway;
  try {
    gateway = await startGateway(parsed.options);
  } catch (error) {
    // A configuration the flags could not catch (duplicate endpoints, a taken port).
    process.stderr.write(`spillway-gateway: ${(error as Error).message}\n`);
    process.exit(1);
  }
  const stop = (): void => {
    void gateway.close().then(() => process.exit(0));
  };
  process.once('SIGINT', stop);
  process.once('SIGTERM', stop);
});
