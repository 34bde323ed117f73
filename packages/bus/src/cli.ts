import { parseArgs } from 'node:util';
import { jetstreamManager, JetStreamApiError } from '@nats-io/jetstream';
import type { NatsConnection } from '@nats-io/nats-core';
import { Fleet } from '@spillway/fleet';
import { z } from 'zod';
import { connectNats } from './connect.js';
import { natsFlagHelp, natsFlagSpec, natsOptionsFromFlags, NatsOptionsError, type Environment, type NatsSettings } from './options.js';
import { startReader } from './reader.js';
import { DEFAULT_STREAM } from './stream.js';
import { fleetRows, renderFleetStatus, renderFleetTable } from './table.js';

export const FLEET_USAGE = [
  'Usage: spillway-fleet --pool P [--nats URL] [--stream NAME] [--once] [options]',
  '',
  'Replays the Spillway event stream for one pool and prints its pods as a table (zone, pod,',
  'address, readiness, queue, running, KV-cache use, metrics age), then follows live and redraws.',
  '',
  'Options:',
  '  --pool P                pool to show (env SPILLWAY_POOL); required',
  `  --stream NAME           JetStream stream (env SPILLWAY_STREAM; default ${DEFAULT_STREAM})`,
  '  --once                  print once after the replay caught up, then exit',
  '  --interval MS           redraw period when following (default 1000)',
  '  --timeout MS            with --once: give up when not caught up after MS (default 15000)',
  '  --stale-after MS        metrics older than this are marked STALE (default 1000)',
  '  -h, --help              this text',
  '',
  'NATS:',
  ...natsFlagHelp,
].join('\n');

const cliSpec = {
  ...natsFlagSpec,
  pool: { type: 'string' },
  stream: { type: 'string' },
  once: { type: 'boolean' },
  interval: { type: 'string' },
  timeout: { type: 'string' },
  'stale-after': { type: 'string' },
  help: { type: 'boolean', short: 'h' },
} as const;

const ms = (flag: string, min: number) =>
  z.coerce
    .number({ error: `--${flag}: must be a number of milliseconds` })
    .int(`--${flag}: must be a whole number of milliseconds`)
    .min(min, `--${flag}: must be at least ${min}`);

const cliSchema = z.object({
  pool: z.string({ error: '--pool is required' }).min(1, '--pool is required'),
  stream: z.string().regex(/^[A-Za-z0-9_-]{1,255}$/, '--stream: letters, digits, _ and - only').default(DEFAULT_STREAM),
  once: z.boolean().default(false),
  interval: ms('interval', 50).default(1000),
  timeout: ms('timeout', 1).default(15_000),
  staleAfter: ms('stale-after', 1).default(1000),
});

export type FleetCliOptions = z.output<typeof cliSchema> & { nats: NatsSettings };

export class UsageError extends Error {}

/** Parses argv (without node and script); throws UsageError naming the bad flag; undefined for --help. */
export function parseFleetArgs(argv: string[], env: Environment): FleetCliOptions | undefined {
  let values: Record<string, string | boolean | undefined>;
  try {
    ({ values } = parseArgs({ args: argv, options: cliSpec, strict: true, allowPositionals: false }));
  } catch (error) {
    throw new UsageError((error as Error).message);
  }
  if (values['help']) return undefined;
  const fromEnv = (flag: string) => {
    const v = values[flag];
    return typeof v === 'string' ? v : env[`SPILLWAY_${flag.toUpperCase().replace(/-/g, '_')}`];
  };
  const parsed = cliSchema.safeParse({
    pool: fromEnv('pool'),
    stream: fromEnv('stream'),
    once: values['once'] === true,
    interval: fromEnv('interval'),
    timeout: fromEnv('timeout'),
    staleAfter: fromEnv('stale-after'),
  });
  if (!parsed.success) throw new UsageError(parsed.error.issues[0]?.message ?? 'invalid arguments');
  try {
    return { ...parsed.data, nats: natsOptionsFromFlags(values, env) };
  } catch (error) {
    if (error instanceof NatsOptionsError) throw new UsageError(error.message);
    throw error;
  }
}

export interface CliIo {
  env: Environment;
  out(text: string): void;
  err(text: string): void;
  /** Whether `out` is a terminal (redraw in place) or a pipe (print frames one after another). */
  tty?: boolean;
  now?: () => number;
  /** Resolves when the user asks to stop (Ctrl-C); follow mode only. */
  interrupted?: Promise<void>;
}

/** The whole command. Returns the exit code: 0 ok, 1 runtime failure, 2 usage error. */
export async function runFleetCli(argv: string[], io: CliIo): Promise<number> {
  let options: FleetCliOptions | undefined;
  try {
    options = parseFleetArgs(argv, io.env);
  } catch (error) {
    if (!(error instanceof UsageError)) throw error;
    io.err(`spillway-fleet: ${error.message}\nRun spillway-fleet --help for usage.\n`);
    return 2;
  }
  if (!options) {
    io.out(`${FLEET_USAGE}\n`);
    return 0;
  }
  const now = io.now ?? Date.now;
  const deadline = options.once ? sleep(options.timeout).then(() => 'timeout' as const) : new Promise<never>(() => undefined);

  const connecting = connectNats(options.nats, { name: options.nats.name ?? 'spillway-fleet' });
  const nc = await Promise.race([connecting, deadline]).catch((error: Error) => error);
  if (nc === 'timeout' || nc instanceof Error) {
    // A connect still retrying in the background is abandoned; main() exits the process.
    connecting.then((late) => late.close()).catch(() => undefined);
    io.err(`spillway-fleet: cannot connect to ${options.nats.servers.join(',')}: ${nc === 'timeout' ? `no connection after ${options.timeout} ms` : nc.message}\n`);
    return 1;
  }
  try {
    return await show(nc, options, io, now, deadline);
  } finally {
    await nc.close().catch(() => undefined);
  }
}

async function show(nc: NatsConnection, options: FleetCliOptions, io: CliIo, now: () => number, deadline: Promise<'timeout'>): Promise<number> {
  // Read-only: an operator tool must not create the stream, so a missing one is an error here.
  const jsm = await jetstreamManager(nc, { checkAPI: false });
  try {
    await jsm.streams.info(options.stream);
  } catch (error) {
    const missing = error instanceof JetStreamApiError && error.code === 10059;
    io.err(`spillway-fleet: ${missing ? `stream ${options.stream} not found` : `cannot read stream ${options.stream}: ${(error as Error).message}`}\n`);
    return 1;
  }
  const fleet = new Fleet({ staleAfterMs: options.staleAfter });
  const reader = startReader(nc, { pool: options.pool, stream: options.stream, sink: fleet, jsm, now });
  const header = { pool: options.pool, stream: options.stream, server: nc.getServer() };
  const frame = () => {
    const at = now();
    const rows = fleetRows(fleet, options.pool, at);
    return `${renderFleetStatus(header, reader.status, fleet.counters, rows, at)}\n\n${renderFleetTable(rows)}\n`;
  };
  try {
    if (options.once) {
      const outcome = await Promise.race([reader.caughtUp.then(() => 'ok' as const), deadline]);
      if (outcome === 'timeout') {
        io.err(`spillway-fleet: replay of ${options.stream} did not catch up within ${options.timeout} ms\n`);
        return 1;
      }
      io.out(frame());
      return 0;
    }
    const stop = io.interrupted ?? new Promise<void>(() => undefined);
    let stopped = false;
    void stop.then(() => (stopped = true));
    while (!stopped) {
      io.out(io.tty ? `\x1b[H\x1b[2J${frame()}` : `${frame()}\n`);
      await Promise.race([sleep(options.interval), stop]);
    }
    return 0;
  } finally {
    await reader.close();
  }
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms).unref());
}
