import { parseArgs } from 'node:util';
import { NatsOptionsError, natsFlagHelp, natsFlagSpec, natsOptionsFromFlags, type NatsSettings } from '@spillway/bus';
import { ENGINES, type Engine } from '@spillway/events';
import { z } from 'zod';

/**
 * The collector's flags (DESIGN §6). Every flag can also be set as `SPILLWAY_<FLAG>` (upper case,
 * dashes as underscores); a flag on the command line wins. Values are validated with zod and a bad
 * one is reported by the flag's name.
 */
export const collectorFlagSpec = {
  help: { type: 'boolean' },
  ...natsFlagSpec,
  stream: { type: 'string' },
  pool: { type: 'string' },
  zone: { type: 'string' },
  region: { type: 'string' },
  endpoints: { type: 'string' },
  'endpoints-poll-ms': { type: 'string' },
  'kube-namespace': { type: 'string' },
  'kube-selector': { type: 'string' },
  'kube-port': { type: 'string' },
  'kube-all-zones': { type: 'boolean' },
  kubeconfig: { type: 'string' },
  engine: { type: 'string' },
  'sample-interval-ms': { type: 'string' },
  'scrape-timeout-ms': { type: 'string' },
  'scrape-failure-threshold': { type: 'string' },
  'metrics-path': { type: 'string' },
  'probe-interval-ms': { type: 'string' },
  'probe-timeout-ms': { type: 'string' },
  'probe-path': { type: 'string' },
  'probe-success-threshold': { type: 'string' },
  'probe-failure-threshold': { type: 'string' },
  'readiness-republish-ms': { type: 'string' },
  'metrics-port': { type: 'string' },
  'log-level': { type: 'string' },
} as const;

export type CollectorFlag = keyof typeof collectorFlagSpec;

export const HELP = `spillway-collector: scrapes model servers and watches readiness; publishes v1 events to NATS

Usage: spillway-collector --pool P --zone Z [--region R] (--endpoints FILE | --kube-namespace NS) [options]

Every flag may also be given as the environment variable SPILLWAY_<FLAG> (for example
SPILLWAY_SAMPLE_INTERVAL_MS=50); the command line wins.

${natsFlagHelp.join('\n')}
  --stream NAME                    JetStream stream to ensure (default SPILLWAY)
  --pool P                         inference pool name (required)
  --zone Z                         this collector's zone; the default zone of endpoints (required)
  --region R                       default region of endpoints
  --endpoints FILE                 YAML or JSON list of { pod, address, zone?, region?, engine?, labels? };
                                   re-read when it changes (removed endpoints get a tombstone)
  --endpoints-poll-ms N            how often FILE is checked for changes (default 500)
  --kube-namespace NS              watch discovery.k8s.io/v1 EndpointSlices in NS
  --kube-selector SEL              label selector for the slices (e.g. kubernetes.io/service-name=llama)
  --kube-port NAME                 the slice port to use (default: the slice's only port)
  --kube-all-zones                 publish endpoints of every zone (default: only --zone and zoneless)
  --kubeconfig FILE                kubeconfig (default: in-cluster, then $KUBECONFIG, then ~/.kube/config)
  --engine vllm|sglang|trtllm|triton  engine for endpoints that name none (default: detect from metric names)
  --sample-interval-ms N           scrape interval per endpoint (default 100)
  --scrape-timeout-ms N            per-scrape timeout (default 500)
  --scrape-failure-threshold N     consecutive failures after which an endpoint is scraped only once per
                                   probe interval until it answers again (default 3)
  --metrics-path PATH              model-server metrics path (default /metrics)
  --probe-interval-ms N            HTTP health probe interval; 0 disables probing (default 1000)
  --probe-timeout-ms N             probe timeout (default 500)
  --probe-path PATH                probe path (default /health)
  --probe-success-threshold N      consecutive successes to become ready (default 1)
  --probe-failure-threshold N      consecutive failures to become not ready (default 2)
  --readiness-republish-ms N       readiness re-publish period (default 30000)
  --metrics-port N                 port of the collector's own Prometheus /metrics (default 9091; 0 = off)
  --log-level LEVEL                pino level (default info)
  --help                           this text
`;

const integer = (min: number, max: number) =>
  z
    .string()
    .regex(/^\d+$/, 'must be a whole number')
    .transform(Number)
    .pipe(z.number().int().min(min).max(max));
const name = z.string().min(1).max(253);
const path = z.string().regex(/^\/\S*$/, 'must be a path starting with /');

const flagsSchema = z
  .object({
    stream: z.string().regex(/^[A-Za-z0-9_-]{1,255}$/, 'stream names are letters, digits, _ and -').default('SPILLWAY'),
    pool: name,
    zone: name,
    region: name.optional(),
    endpoints: z.string().min(1).optional(),
    'endpoints-poll-ms': integer(10, 600_000).default(500),
    'kube-namespace': name.optional(),
    'kube-selector': z.string().min(1).optional(),
    'kube-port': name.optional(),
    'kube-all-zones': z.boolean().default(false),
    kubeconfig: z.string().min(1).optional(),
    engine: z.enum(ENGINES).optional(),
    'sample-interval-ms': integer(10, 600_000).default(100),
    'scrape-timeout-ms': integer(10, 600_000).default(500),
    'scrape-failure-threshold': integer(1, 1_000).default(3),
    'metrics-path': path.default('/metrics'),
    'probe-interval-ms': integer(0, 600_000).default(1_000),
    'probe-timeout-ms': integer(10, 600_000).default(500),
    'probe-path': path.default('/health'),
    'probe-success-threshold': integer(1, 1_000).default(1),
    'probe-failure-threshold': integer(1, 1_000).default(2),
    'readiness-republish-ms': integer(100, 30_000).default(30_000),
    'metrics-port': integer(0, 65_535).default(9091),
    'log-level': z.enum(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent']).default('info'),
  })
  .superRefine((flags, ctx) => {
    if (flags.endpoints === undefined && flags['kube-namespace'] === undefined) {
      ctx.addIssue({ code: 'custom', path: ['endpoints'], message: 'give --endpoints FILE or --kube-namespace NS (or both)' });
    }
  });

export interface CollectorConfig {
  nats: NatsSettings;
  stream: string;
  pool: string;
  zone: string;
  region: string | undefined;
  endpointsFile: string | undefined;
  endpointsPollMs: number;
  kube: { namespace: string; selector: string | undefined; port: string | undefined; allZones: boolean; kubeconfig: string | undefined } | undefined;
  engine: Engine | undefined;
  sampleIntervalMs: number;
  scrapeTimeoutMs: number;
  scrapeFailureThreshold: number;
  metricsPath: string;
  probe: { intervalMs: number; timeoutMs: number; path: string; successThreshold: number; failureThreshold: number };
  readinessRepublishMs: number;
  metricsPort: number;
  logLevel: string;
}

/** A bad flag or environment value; the message starts with the flag's name. */
export class ConfigError extends Error {
  override readonly name = 'ConfigError';
  constructor(
    readonly flag: string,
    message: string,
  ) {
    super(`--${flag}: ${message}`);
  }
}

export function envName(flag: string): string {
  return `SPILLWAY_${flag.toUpperCase().replace(/-/g, '_')}`;
}

export type ParsedArgs = { help: true } | { help: false; config: CollectorConfig };

/** Parses argv (without node and script) and the environment. Throws ConfigError. */
export function parseCollectorArgs(argv: readonly string[], env: Readonly<Record<string, string | undefined>> = process.env): ParsedArgs {
  let values: Record<string, string | boolean | undefined>;
  try {
    ({ values } = parseArgs({ args: [...argv], options: collectorFlagSpec, strict: true, allowPositionals: false }));
  } catch (error) {
    // node:util names the offending option in its message (unknown option, missing value).
    const message = (error as Error).message;
    const flag = /'(--?[\w-]+)/.exec(message)?.[1]?.replace(/^-+/, '') ?? 'flags';
    throw new ConfigError(flag, message);
  }
  if (values['help'] === true) return { help: true };

  const merged: Record<string, string | boolean | undefined> = {};
  const fromEnvironment = new Set<string>();
  const natsFlags = new Set<string>(Object.keys(natsFlagSpec));
  let nats: NatsSettings;
  try {
    nats = natsOptionsFromFlags(values, env);
  } catch (error) {
    if (error instanceof NatsOptionsError) throw new ConfigError(error.flag, error.message.replace(/^--[\w-]+: /, ''));
    throw error;
  }
  for (const [flag, spec] of Object.entries(collectorFlagSpec)) {
    if (flag === 'help' || natsFlags.has(flag)) continue;
    const fromEnv = env[envName(flag)];
    let value = values[flag];
    if (value === undefined && fromEnv !== undefined && fromEnv !== '') {
      if (spec.type === 'boolean') {
        if (!/^(true|false|1|0)$/i.test(fromEnv)) throw new ConfigError(flag, `${envName(flag)}=${fromEnv} must be true or false`);
        value = /^(true|1)$/i.test(fromEnv);
      } else {
        value = fromEnv;
      }
    }
    if (values[flag] === undefined && value !== undefined) fromEnvironment.add(flag);
    merged[flag] = value;
  }
  const parsed = flagsSchema.safeParse(merged);
  if (!parsed.success) {
    const issue = parsed.error.issues[0];
    const flag = String(issue?.path[0] ?? 'flags');
    const message = issue?.code === 'invalid_type' && merged[flag] === undefined ? 'is required' : (issue?.message ?? 'invalid');
    throw new ConfigError(flag, fromEnvironment.has(flag) ? `${message} (from ${envName(flag)})` : message);
  }
  const f = parsed.data;
  return {
    help: false,
    config: {
      nats,
      stream: f.stream,
      pool: f.pool,
      zone: f.zone,
      region: f.region,
      endpointsFile: f.endpoints,
      endpointsPollMs: f['endpoints-poll-ms'],
      kube:
        f['kube-namespace'] === undefined
          ? undefined
          : { namespace: f['kube-namespace'], selector: f['kube-selector'], port: f['kube-port'], allZones: f['kube-all-zones'], kubeconfig: f.kubeconfig },
      engine: f.engine,
      sampleIntervalMs: f['sample-interval-ms'],
      scrapeTimeoutMs: f['scrape-timeout-ms'],
      scrapeFailureThreshold: f['scrape-failure-threshold'],
      metricsPath: f['metrics-path'],
      probe: {
        intervalMs: f['probe-interval-ms'],
        timeoutMs: f['probe-timeout-ms'],
        path: f['probe-path'],
        successThreshold: f['probe-success-threshold'],
        failureThreshold: f['probe-failure-threshold'],
      },
      readinessRepublishMs: f['readiness-republish-ms'],
      metricsPort: f['metrics-port'],
      logLevel: f['log-level'],
    },
  };
}
