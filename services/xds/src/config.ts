/**
 * spillway-xds's configuration: flags over `SPILLWAY_<FLAG>` environment variables over the config
 * file (`--config`, YAML or JSON holding any flag by its camelCase name) over defaults. A bad flag or
 * field throws a CliError naming it (the binary exits 2).
 */
import { z } from 'zod';
import {
  CliError,
  commaList,
  durationMs,
  logLevel,
  parseCommandLine,
  port,
  positiveInt,
  readConfigFile,
  renderHelp,
  type FlagSpecs,
} from '@spillway/cli';
import {
  connectionOptions,
  DEFAULT_STREAM,
  NatsOptionsError,
  natsFlags,
  natsSettingsFromValues,
  streamNameSchema,
  type NatsSettings,
} from '@spillway/bus';
import { DEFAULT_MAX_CLOCK_SKEW_MS, DEFAULT_MAX_PODS_PER_ZONE } from '@spillway/fleet';

const booleanValue = (fallback: boolean) =>
  z.union([z.boolean(), z.enum(['true', 'false']).transform((v) => v === 'true')]).default(fallback);
/** A resource name Envoy and gRPC accept as is: no spaces, not empty, not `*`. */
const resourceName = z
  .string()
  .regex(/^[A-Za-z0-9][A-Za-z0-9._:/-]{0,199}$/, 'letters, digits and . _ : / -, starting with a letter or digit, at most 200');

export const xdsFlags = {
  pool: { description: 'InferencePool (event pool) whose pods the gateways get', schema: z.string().min(1), placeholder: 'NAME' },
  ...natsFlags,
  stream: {
    description: 'JetStream stream to replay (a zone aggregate in multi-zone NATS)',
    schema: streamNameSchema.default(DEFAULT_STREAM),
    placeholder: 'NAME',
  },
  ensureStream: {
    description: 'create the stream when it is missing (turn off when the stream is managed elsewhere)',
    schema: booleanValue(true),
    placeholder: 'true|false',
  },
  host: {
    description: 'address the xDS, health and metrics servers bind to',
    schema: z.string().min(1).default('0.0.0.0'),
    placeholder: 'ADDR',
  },
  port: { description: 'aggregated discovery service (gRPC) port; also serves gRPC health', schema: port(18000), placeholder: 'N' },
  healthPort: { description: 'gRPC health port', schema: port(18001), placeholder: 'N' },
  metricsPort: { description: 'Prometheus /metrics port (also /healthz, /readyz, /debug/nodes)', schema: port(9092), placeholder: 'N' },
  clusterName: {
    description:
      "name of the EDS resource (the gateways' model-server cluster), and of the LDS, RDS and CDS resources a proxyless gRPC client resolves xds:///NAME through",
    schema: resourceName.default('model-servers'),
    placeholder: 'NAME',
  },
  zones: {
    description: 'the zones a node may name in node.locality.zone (default: every zone the pool has a pod in)',
    schema: commaList().default([]),
    placeholder: 'A,B',
  },
  maxNodes: {
    description: 'most connected nodes (xDS streams); a further one is refused with RESOURCE_EXHAUSTED',
    schema: positiveInt().max(100_000).default(2000),
    placeholder: 'N',
  },
  pushDelayMs: {
    description: 'after a readiness change, wait this long for more before pushing (changes in between go out together)',
    schema: durationMs().max(1000).default(100),
    placeholder: 'MS',
  },
  connectionTimeoutMs: {
    description: 'close connections silent this long: gRPC ones that answer no keepalive ping, HTTP ones with no request',
    schema: durationMs().min(100).default(20_000),
    placeholder: 'MS',
  },
  maxClockSkewMs: {
    description: 'refuse events dated more than this after their receive time (a bad clock or a forged event)',
    schema: durationMs().default(DEFAULT_MAX_CLOCK_SKEW_MS),
    placeholder: 'MS',
  },
  maxPodsPerZone: {
    description: 'most pods one zone of the pool may hold; events for further new pods are refused',
    schema: positiveInt().default(DEFAULT_MAX_PODS_PER_ZONE),
    placeholder: 'N',
  },
  config: {
    description: 'YAML or JSON file holding any of these flags by camelCase name',
    schema: z.string().min(1).optional(),
    placeholder: 'FILE',
  },
  logLevel: { description: 'pino log level', schema: logLevel(), placeholder: 'LEVEL' },
} satisfies FlagSpecs;

export type XdsFlagValues = z.output<z.ZodObject<{ [K in keyof typeof xdsFlags]: (typeof xdsFlags)[K]['schema'] }>>;

const flagKeys = Object.keys(xdsFlags) as (keyof typeof xdsFlags)[];
/** The config file: flag values by camelCase name, checked by the flag schemas once merged; nothing else. */
export const xdsConfigFileSchema = z.strictObject(
  Object.fromEntries(flagKeys.filter((k) => k !== 'config').map((key) => [key, z.unknown().optional()])) as Record<
    keyof typeof xdsFlags,
    z.ZodOptional<z.ZodUnknown>
  >,
);

export interface XdsConfig {
  flags: XdsFlagValues;
  nats: NatsSettings;
}

export const XDS_HELP = renderHelp(
  'spillway-xds',
  "Serves Envoy's aggregated discovery service: each gateway's model-server endpoints (EDS, priorities by zone) and its zone-local subset hint (ECDS), from the pool's NATS event stream.",
  xdsFlags,
);

function configPath(argv: readonly string[], env: NodeJS.ProcessEnv): string | undefined {
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i] as string;
    if (arg === '--config') return argv[i + 1];
    if (arg.startsWith('--config=')) return arg.slice('--config='.length);
  }
  return env['SPILLWAY_CONFIG'] || undefined;
}

/** Parses the command line; undefined when `--help` was asked for. Throws CliError naming the bad flag or field. */
export function loadXdsConfig(argv: readonly string[], env: NodeJS.ProcessEnv): XdsConfig | undefined {
  const path = configPath(argv, env);
  const file = path === undefined ? {} : readConfigFile(path, xdsConfigFileSchema).value;
  const base: Record<string, unknown> = {};
  for (const [key, value] of Object.entries(file)) if (value !== undefined) base[key] = value;
  const parsed = parseCommandLine(xdsFlags, argv, env, base);
  if (parsed.help) return undefined;
  const flags = parsed.values as XdsFlagValues;
  // Two servers on one port: name the flag that was given (not the one left at its default).
  const ports = [
    ['port', flags.port, parsed.explicit.has('port')],
    ['health-port', flags.healthPort, parsed.explicit.has('healthPort')],
    ['metrics-port', flags.metricsPort, parsed.explicit.has('metricsPort')],
  ] as const;
  for (const [i, [name, value, given]] of ports.entries()) {
    for (const [other, otherValue, otherGiven] of ports.slice(i + 1)) {
      if (value !== otherValue || value === 0) continue;
      const [blamed, alongside] = given && !otherGiven ? [name, other] : [other, name];
      throw new CliError(`--${blamed}: the same port as --${alongside} (${value})`, blamed);
    }
  }
  const nats = natsSettingsFromValues({ ...flags, natsName: flags.natsName ?? `spillway-xds-${flags.pool}` }, env);
  try {
    // Reads the NATS files (creds, seed, TLS) now, so a missing one is a usage error, not a retry loop.
    connectionOptions(nats);
  } catch (error) {
    if (error instanceof NatsOptionsError) throw new CliError(error.message, error.flag);
    throw error;
  }
  return { flags, nats };
}
