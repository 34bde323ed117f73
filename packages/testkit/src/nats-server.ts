import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { freePort, INSTALL_HINT, natsServerAvailable, waitForPort } from '@spillway/proc';

/**
 * A private nats-server for one test file: its own port and temporary JetStream store,
 * so tests are isolated and may kill and restart it. `NATS_URL` points tests at an existing server
 * instead; then kill/restart are unavailable and say so.
 */
export interface NatsServerHandle {
  readonly url: string;
  readonly port: number;
  /** True when this handle owns the process (false when NATS_URL was used). */
  readonly owned: boolean;
  /** SIGKILL the server, as a crash would. The store directory is kept. */
  kill(): Promise<void>;
  /** Start the server again on the same port with the same store. */
  restart(): Promise<void>;
  /** Stop the server and remove its store. */
  stop(): Promise<void>;
}

export interface NatsServerOptions {
  /** Extra lines for the server's config file (for example accounts or leaf nodes). */
  extraConfig?: string;
  /** Use this port instead of a free one. */
  port?: number;
  /** Ignore NATS_URL and always start a private server (fault tests need their own). */
  forcePrivate?: boolean;
}

export async function startNatsServer(options: NatsServerOptions = {}): Promise<NatsServerHandle> {
  const external = process.env['NATS_URL'];
  if (external && !options.forcePrivate) return externalHandle(external);
  if (!natsServerAvailable()) throw new Error(INSTALL_HINT);

  const storeDir = mkdtempSync(join(tmpdir(), 'spillway-nats-'));
  const configPath = join(storeDir, 'server.conf');
  let port = options.port ?? (await freePort());
  const writeConfig = (): void =>
    writeFileSync(
      configPath,
      [`listen: "127.0.0.1:${port}"`, `jetstream { store_dir: "${join(storeDir, 'js')}" }`, options.extraConfig ?? ''].join('\n'),
    );
  writeConfig();

  let child: ChildProcess | undefined;
  // Ready when this process says so: a connection to the port could reach another server that took
  // the port between freePort() and the bind.
  const launch = async (): Promise<void> => {
    const started = spawn('nats-server', ['-c', configPath], { stdio: ['ignore', 'ignore', 'pipe'] });
    child = started;
    let stderr = '';
    const ready = new Promise<void>((resolve) =>
      started.stderr?.on('data', (chunk: Buffer) => {
        stderr = (stderr + chunk.toString()).slice(-4000);
        if (stderr.includes('Server is ready')) resolve();
      }),
    );
    const exited = new Promise<never>((_, reject) =>
      started.once('exit', (code) => reject(new Error(`nats-server exited with ${code}: ${stderr}`))),
    );
    exited.catch(() => undefined);
    const timeout = new Promise<never>((_, reject) =>
      setTimeout(() => reject(new Error(`nats-server not ready within 10 s: ${stderr}`)), 10_000).unref(),
    );
    await Promise.race([ready, exited, timeout]);
    await waitForPort(port, 10_000);
  };
  // A free port may be taken before the server binds it; pick another (unless one was asked for).
  for (let attempt = 1; ; attempt++) {
    try {
      await launch();
      break;
    } catch (error) {
      child = undefined;
      if (options.port !== undefined || attempt >= 5 || !/address already in use/.test(String(error))) throw error;
      port = await freePort();
      writeConfig();
    }
  }
  const halt = async (signal: NodeJS.Signals): Promise<void> => {
    const running = child;
    child = undefined;
    if (!running || running.exitCode !== null || running.signalCode !== null) return;
    const gone = new Promise<void>((resolve) => running.once('exit', () => resolve()));
    running.kill(signal);
    await gone;
  };

  return {
    url: `nats://127.0.0.1:${port}`,
    port,
    owned: true,
    kill: () => halt('SIGKILL'),
    restart: async () => {
      await halt('SIGTERM');
      await launch();
    },
    stop: async () => {
      await halt('SIGTERM');
      rmSync(storeDir, { recursive: true, force: true });
    },
  };
}

function externalHandle(url: string): NatsServerHandle {
  const unsupported = (): Promise<void> => Promise.reject(new Error('kill/restart need a private nats-server; unset NATS_URL'));
  return {
    url,
    port: Number(new URL(url.replace(/^nats:/, 'http:')).port || 4222),
    owned: false,
    kill: unsupported,
    restart: unsupported,
    stop: () => Promise.resolve(),
  };
}
