import { jetstreamManager, JetStreamApiError } from '@nats-io/jetstream';
import type { NatsConnection } from '@nats-io/nats-core';
import { CliError, parseCommandLine, renderHelp, type FlagSpecs, type FlagValues } from '@spillway/cli';
import { Fleet } from '@spillway/fleet';
import { z } from 'zod';
import {
  connectNats,
  DEFAULT_STREAM,
  natsFlags,
  natsSettingsFromValues,
  startReader,
  streamNameSchema,
  type Environment,
  type NatsSettings,
} from '@spillway/bus';
import { followInFlight, OPERATOR_ZONE } from './in-flight.js';
import { fleetRows, renderFleetStatus, renderFleetTable } from './table.js';

const ms = (min: number) =>
  z.coerce
    .number({ error: 'must be a number of milliseconds' })
    .int('must be a whole number of milliseconds')
    .min(min, `must be at least ${min}`);

/** spillway-fleet's flags, each also `SPILLWAY_<FLAG>`; the NATS flags come from `natsFlags`. */
export const fleetFlags = {
  pool: { description: 'pool to show (required)', schema: z.string().min(1), placeholder: 'P' },
  stream: {
    description: `JetStream stream (default ${DEFAULT_STREAM})`,
    schema: streamNameSchema.default(DEFAULT_STREAM),
    placeholder: 'NAME',
  },
  once: { description: 'print once after the replay caught up, then exit', schema: z.boolean().default(false), boolean: true },
  interval: { description: 'redraw period when following (default 1000)', schema: ms(50).default(1000), placeholder: 'MS' },
  timeout: {
    description: 'with --once: give up when not caught up after MS (default 15000)',
    schema: ms(1).default(15_000),
    placeholder: 'MS',
  },
  staleAfter: { description: 'metrics older than this are marked STALE (default 1000)', schema: ms(1).default(1000), placeholder: 'MS' },
  inFlight: {
    description:
      "show requests in flight per pod as the pool's EPPs see them together (asks them, then follows their shared state; needs a user that may publish spillway.state subjects); default true",
    schema: z.union([z.boolean(), z.enum(['true', 'false']).transform((v) => v === 'true')]).default(true),
    placeholder: 'true|false',
  },
  zone: {
    description: `with --in-flight: the zone whose spillway.state subjects the NATS user may publish the EPPs' request on; an EPP user (epp-<zone>) may publish only its own zone's (default ${OPERATOR_ZONE}, for an admin user)`,
    schema: z.string().min(1).max(253).optional(),
    placeholder: 'ZONE',
  },
  ...natsFlags,
} satisfies FlagSpecs;

export const FLEET_USAGE = renderHelp(
  'spillway-fleet',
  [
    'Replays the Spillway event stream for one pool and prints its pods as a table (zone, pod,',
    "address, readiness, queue, running, KV-cache use, requests in flight over the pool's EPPs,",
    'metrics age), then follows live and redraws. It never creates the stream; for the requests in',
    'flight it asks the EPPs once, then follows their shared state. -h is short for --help.',
  ].join('\n'),
  fleetFlags,
);

type FleetFlagValues = FlagValues<typeof fleetFlags>;
export type FleetCliOptions = Pick<
  FleetFlagValues,
  'pool' | 'stream' | 'once' | 'interval' | 'timeout' | 'staleAfter' | 'inFlight' | 'zone'
> & {
  nats: NatsSettings;
};

/** Parses argv (without node and script); throws CliError naming the bad flag; undefined for --help (or -h). */
export function parseFleetArgs(argv: readonly string[], env: Environment): FleetCliOptions | undefined {
  const parsed = parseCommandLine(
    fleetFlags,
    argv.map((arg) => (arg === '-h' ? '--help' : arg)),
    env,
  );
  if (parsed.help) return undefined;
  const { pool, stream, once, interval, timeout, staleAfter, inFlight, zone } = parsed.values;
  return { pool, stream, once, interval, timeout, staleAfter, inFlight, zone, nats: natsSettingsFromValues(parsed.values, env) };
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
    // As runMain reports it; returned rather than exiting so the command runs in process too.
    if (!(error instanceof CliError)) throw error;
    io.err(`error: ${error.message}\n`);
    return 2;
  }
  if (!options) {
    io.out(FLEET_USAGE);
    return 0;
  }
  const now = io.now ?? Date.now;
  const deadline = options.once ? sleep(options.timeout).then(() => 'timeout' as const) : new Promise<never>(() => undefined);

  const connecting = connectNats(options.nats, { name: options.nats.name ?? 'spillway-fleet' });
  const nc = await Promise.race([connecting, deadline]).catch((error: Error) => error);
  if (nc === 'timeout' || nc instanceof Error) {
    // A connect still retrying in the background is abandoned; main() exits the process.
    connecting.then((late) => late.close()).catch(() => undefined);
    io.err(
      `spillway-fleet: cannot connect to ${options.nats.servers.join(',')}: ${nc === 'timeout' ? `no connection after ${options.timeout} ms` : nc.message}\n`,
    );
    return 1;
  }
  try {
    return await show(nc, options, io, now, deadline);
  } finally {
    await nc.close().catch(() => undefined);
  }
}

async function show(
  nc: NatsConnection,
  options: FleetCliOptions,
  io: CliIo,
  now: () => number,
  deadline: Promise<'timeout'>,
): Promise<number> {
  // Read-only: an operator tool must not create the stream, so a missing one is an error here.
  const jsm = await jetstreamManager(nc, { checkAPI: false });
  try {
    await jsm.streams.info(options.stream);
  } catch (error) {
    const missing = error instanceof JetStreamApiError && error.code === 10059;
    io.err(
      `spillway-fleet: ${missing ? `stream ${options.stream} not found` : `cannot read stream ${options.stream}: ${(error as Error).message}`}\n`,
    );
    return 1;
  }
  const fleet = new Fleet({ staleAfterMs: options.staleAfter });
  const reader = startReader(nc, { pool: options.pool, stream: options.stream, sink: fleet, jsm, now });
  const inFlight = options.inFlight ? followInFlight(nc, { pool: options.pool, zone: options.zone, now }) : undefined;
  const header = { pool: options.pool, stream: options.stream, server: nc.getServer() };
  const frame = () => {
    const at = now();
    inFlight?.view.prune(at);
    const rows = fleetRows(fleet, options.pool, at, inFlight?.view.byEndpoint());
    const shared =
      inFlight === undefined
        ? undefined
        : { epps: inFlight.view.eppCount, inFlight: inFlight.view.total, started: inFlight.view.started, refused: inFlight.refused };
    return `${renderFleetStatus({ header, status: reader.status, counters: fleet.counters, rows, now: at, shared })}\n\n${renderFleetTable(rows)}\n`;
  };
  try {
    if (options.once) {
      const outcome = await Promise.race([Promise.all([reader.caughtUp, inFlight?.answered]).then(() => 'ok' as const), deadline]);
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
    inFlight?.close();
    await reader.close();
  }
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms).unref());
}
