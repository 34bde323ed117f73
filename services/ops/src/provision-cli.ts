import { jetstreamManager } from '@nats-io/jetstream';
import type { NatsConnection } from '@nats-io/nats-core';
import { CliError, commaList, parseCommandLine, renderHelp, type FlagSpecs, type FlagValues } from '@spillway/cli';
import {
  AGGREGATE_STREAM,
  assertZoneName,
  connectNats,
  natsFlags,
  natsSettingsFromValues,
  provisionZoneStreams,
  streamNameSchema,
  type Environment,
  type NatsSettings,
  type ProvisionResult,
} from '@spillway/bus';
import { z } from 'zod';
import type { CliIo } from './fleet-cli.js';

/** spillway-provision's flags, each also `SPILLWAY_<FLAG>`; the NATS flags come from `natsFlags`. */
export const provisionFlags = {
  zone: { description: 'the zone whose server this is (its JetStream domain) (required)', schema: z.string().min(1), placeholder: 'Z' },
  zones: {
    description: 'every zone of the topology, this one included (required)',
    schema: commaList().pipe(z.array(z.string()).min(1, 'name at least one zone')),
    placeholder: 'a,b,c',
  },
  aggregateStream: {
    description: `name of the local aggregate the EPPs read (default ${AGGREGATE_STREAM})`,
    schema: streamNameSchema.default(AGGREGATE_STREAM),
    placeholder: 'NAME',
  },
  timeout: {
    description: 'give up when the server has not accepted the streams after MS (default 120000)',
    schema: z.coerce.number({ error: 'must be a number of milliseconds' }).int().min(1).default(120_000),
    placeholder: 'MS',
  },
  ...natsFlags,
} satisfies FlagSpecs;

export const PROVISION_USAGE = renderHelp(
  'spillway-provision',
  [
    "Creates one zone's streams in the per-zone NATS topology (a JetStream domain per zone, leaf nodes",
    "to a hub): the zone stream SPILLWAY_<ZONE> (this zone's subjects) and the local aggregate that",
    "sources every zone's stream. Existing streams are left alone, so it is safe to run again. Connect",
    "as the zone's admin user (--nats-user/--nats-password or NATS_USER/NATS_PASSWORD). It retries",
    'until the server answers or --timeout passes (a Job may start before NATS). -h is short for --help.',
  ].join('\n'),
  provisionFlags,
);

export type ProvisionCliOptions = Pick<FlagValues<typeof provisionFlags>, 'zone' | 'zones' | 'aggregateStream' | 'timeout'> & {
  nats: NatsSettings;
};

/** Parses argv (without node and script); throws CliError naming the bad flag; undefined for --help (or -h). */
export function parseProvisionArgs(argv: readonly string[], env: Environment): ProvisionCliOptions | undefined {
  const parsed = parseCommandLine(
    provisionFlags,
    argv.map((arg) => (arg === '-h' ? '--help' : arg)),
    env,
  );
  if (parsed.help) return undefined;
  const { zone, zones, aggregateStream, timeout } = parsed.values;
  for (const [flag, name] of [['zone', zone], ...zones.map((z) => ['zones', z] as const)] as const) {
    try {
      assertZoneName(name);
    } catch (error) {
      throw new CliError(`--${flag}: ${(error as Error).message}`, flag);
    }
  }
  if (!zones.includes(zone)) throw new CliError(`--zones: must include --zone ${zone}`, 'zones');
  return { zone, zones, aggregateStream, timeout, nats: natsSettingsFromValues(parsed.values, env) };
}

/** The whole command. Returns the exit code: 0 ok, 1 runtime failure, 2 usage error. */
export async function runProvisionCli(argv: string[], io: Pick<CliIo, 'env' | 'out' | 'err'>): Promise<number> {
  let options: ProvisionCliOptions | undefined;
  try {
    options = parseProvisionArgs(argv, io.env);
  } catch (error) {
    if (!(error instanceof CliError)) throw error;
    io.err(`error: ${error.message}\n`);
    return 2;
  }
  if (!options) {
    io.out(PROVISION_USAGE);
    return 0;
  }
  const deadline = Date.now() + options.timeout;
  const expired = sleep(options.timeout).then(() => 'timeout' as const);
  const connecting = connectNats(options.nats, { name: options.nats.name ?? 'spillway-provision' });
  const nc = await Promise.race([connecting, expired]).catch((error: Error) => error);
  if (nc === 'timeout' || nc instanceof Error) {
    connecting.then((late) => late.close()).catch(() => undefined);
    io.err(
      `spillway-provision: cannot connect to ${options.nats.servers.join(',')}: ${nc === 'timeout' ? `no connection after ${options.timeout} ms` : nc.message}\n`,
    );
    return 1;
  }
  try {
    const result = await provisionUntil(nc, options, deadline, io);
    io.out(`${options.zone}: created [${result.created.join(', ')}], existing [${result.existing.join(', ')}]\n`);
    return 0;
  } catch (error) {
    io.err(`spillway-provision: ${options.zone}: ${(error as Error).message}\n`);
    return 1;
  } finally {
    await nc.close().catch(() => undefined);
  }
}

/**
 * JetStream answers a moment after the server accepts clients, so a failed attempt is retried
 * (every second) until the deadline; a permissions error is final, since retrying cannot fix it.
 */
async function provisionUntil(
  nc: NatsConnection,
  options: ProvisionCliOptions,
  deadline: number,
  io: Pick<CliIo, 'err'>,
): Promise<ProvisionResult> {
  for (let attempt = 1; ; attempt++) {
    try {
      const jsm = await jetstreamManager(nc);
      return await provisionZoneStreams(jsm, options.zone, options.zones, options.aggregateStream);
    } catch (error) {
      const message = (error as Error).message;
      if (/permissions violation/i.test(message) || Date.now() + 1000 > deadline) throw error;
      if (attempt === 1)
        io.err(`spillway-provision: ${options.zone}: not yet (${message}); retrying until ${options.timeout} ms have passed\n`);
      await sleep(1000);
    }
  }
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms).unref());
}
