import { spawnSync } from 'node:child_process';

/** What to tell someone whose machine has no nats-server (the demo, the tests, CI). */
export const INSTALL_HINT =
  'nats-server is not on PATH. Install it (Debian/Ubuntu: `apt-get install nats-server`) ' +
  'or set NATS_URL to a running server with JetStream enabled.';

/** Whether a `nats-server` binary runs from PATH. */
export function natsServerAvailable(): boolean {
  const probe = spawnSync('nats-server', ['--version'], { encoding: 'utf8' });
  return probe.status === 0;
}
