import { DEFAULT_STREAM, natsFlags, natsSettingsFromValues, streamNameSchema, type NatsSettings } from '@spillway/bus';
import { CliError, logLevel, nonNegativeInt, parseCommandLine, port, renderHelp, type FlagSpecs } from '@spillway/cli';
import { ENGINES, type Engine } from '@spillway/events';
import { z } from 'zod';
import { DEFAULT_SCRAPE_LIMITS, type ScrapeLimits } from './budget.js';
import { DEFAULT_RATES_WINDOW_MS } from '@spillway/events';
import { MAX_RANKS_PER_POD } from './kv-map.js';
import { KV_EVENTS_FORMATS, type KvEventsFormat } from './kv-sources.js';

/**
 * The collector's flags (docs/flags.md), for `@spillway/cli`: each is also `SPILLWAY_<FLAG>` (upper
 * case, dashes as underscores) and a flag on the command line wins. Values are validated with zod
 * and a bad one is reported by the flag's name.
 */
const name = z.string().min(1).max(253);
const path = z.string().regex(/^\/\S*$/, 'must be a path starting with /');
const between = (min: number, max: number) => nonNegativeInt().min(min).max(max);

export const collectorFlags = {
  ...natsFlags,
  stream: {
    description: `JetStream stream to ensure (default ${DEFAULT_STREAM})`,
    schema: streamNameSchema.default(DEFAULT_STREAM),
    placeholder: 'NAME',
  },
  pool: { description: 'inference pool name (required)', schema: name, placeholder: 'P' },
  zone: { description: "this collector's zone; the default zone of endpoints (required)", schema: name, placeholder: 'Z' },
  region: { description: 'default region of endpoints', schema: name.optional(), placeholder: 'R' },
  endpoints: {
    description:
      'YAML or JSON list of { pod, address, zone?, region?, engine?, labels? }; re-read when it changes (removed endpoints get a tombstone)',
    schema: z.string().min(1).optional(),
    placeholder: 'FILE',
  },
  endpointsPollMs: {
    description: 'how often FILE is checked for changes (default 500)',
    schema: between(10, 600_000).default(500),
    placeholder: 'N',
  },
  kubeNamespace: { description: 'watch discovery.k8s.io/v1 EndpointSlices in NS', schema: name.optional(), placeholder: 'NS' },
  kubeSelector: {
    description: 'label selector for the slices (e.g. kubernetes.io/service-name=llama)',
    schema: z.string().min(1).optional(),
    placeholder: 'SEL',
  },
  kubePort: { description: "the slice port to use (default: the slice's only port)", schema: name.optional(), placeholder: 'NAME' },
  kubeAllZones: {
    description: 'publish endpoints of every zone (default: only --zone and zoneless)',
    schema: z.boolean().default(false),
    boolean: true,
  },
  kubeconfig: {
    description: 'kubeconfig (default: in-cluster, then $KUBECONFIG, then ~/.kube/config)',
    schema: z.string().min(1).optional(),
    placeholder: 'FILE',
  },
  engine: {
    description: `engine for endpoints that name none: ${ENGINES.join(' | ')} (default: detect from metric names)`,
    schema: z.enum(ENGINES).optional(),
    placeholder: 'ENGINE',
  },
  sampleIntervalMs: {
    description: 'scrape interval per endpoint (default 100)',
    schema: between(10, 600_000).default(100),
    placeholder: 'N',
  },
  scrapeTimeoutMs: { description: 'per-scrape timeout (default 500)', schema: between(10, 600_000).default(500), placeholder: 'N' },
  scrapeFailureThreshold: {
    description:
      'consecutive failures after which an endpoint is backed off: retried after one probe interval, doubling up to --scrape-backoff-max-ms, until it answers again (default 3)',
    schema: between(1, 1_000).default(3),
    placeholder: 'N',
  },
  scrapeBackoffMaxMs: {
    description: 'longest back-off of a failing endpoint (default 30000)',
    schema: between(10, 3_600_000).default(30_000),
    placeholder: 'N',
  },
  scrapeMaxBytes: {
    description: `bytes of exposition read per scrape; a larger one fails (too-large) and is backed off at once (default ${DEFAULT_SCRAPE_LIMITS.maxBytes})`,
    schema: between(64 * 1024, 1024 * 1024 * 1024).default(DEFAULT_SCRAPE_LIMITS.maxBytes),
    placeholder: 'N',
  },
  scrapeCpuBudgetMs: {
    description: `CPU time one scrape may spend filtering, parsing and mapping; beyond it the scrape fails (too-slow) and is backed off at once (default ${DEFAULT_SCRAPE_LIMITS.cpuBudgetMs})`,
    schema: between(1, 10_000).default(DEFAULT_SCRAPE_LIMITS.cpuBudgetMs),
    placeholder: 'N',
  },
  ratesWindowMs: {
    description: `span of the counter deltas behind the service rates in metrics events (default ${DEFAULT_RATES_WINDOW_MS})`,
    schema: between(200, 600_000).default(DEFAULT_RATES_WINDOW_MS),
    placeholder: 'N',
  },
  metricsPath: { description: 'model-server metrics path (default /metrics)', schema: path.default('/metrics'), placeholder: 'PATH' },
  probeIntervalMs: {
    description: 'HTTP health probe interval; 0 disables probing (default 1000)',
    schema: between(0, 600_000).default(1_000),
    placeholder: 'N',
  },
  probeTimeoutMs: { description: 'probe timeout (default 500)', schema: between(10, 600_000).default(500), placeholder: 'N' },
  probePath: { description: 'probe path (default /health)', schema: path.default('/health'), placeholder: 'PATH' },
  probeSuccessThreshold: {
    description: 'consecutive successes to become ready (default 1)',
    schema: between(1, 1_000).default(1),
    placeholder: 'N',
  },
  probeFailureThreshold: {
    description: 'consecutive failures to become not ready (default 2)',
    schema: between(1, 1_000).default(2),
    placeholder: 'N',
  },
  readinessRepublishMs: {
    description: 'readiness re-publish period (default 30000)',
    schema: between(100, 30_000).default(30_000),
    placeholder: 'N',
  },
  metricsPort: {
    description: "port of the collector's own Prometheus /metrics (default 9091; 0 = off)",
    schema: port(9091),
    placeholder: 'N',
  },
  metricsHost: {
    description:
      "address the collector's /metrics listens on (default 0.0.0.0, for Prometheus scraping the pod IP; 127.0.0.1 keeps it local)",
    schema: z.string().min(1).default('0.0.0.0'),
    placeholder: 'ADDR',
  },
  host: {
    description: 'the same as --metrics-host, by the name the other binaries use for their listen address',
    schema: z.string().min(1).optional(),
    placeholder: 'ADDR',
  },
  logLevel: { description: 'pino level (default info)', schema: logLevel(), placeholder: 'LEVEL' },
  kvEventsPort: {
    description:
      "follow every endpoint's KV events (vLLM --kv-events-config) on this port of its address, for endpoints that name none (an endpoints-file kvEvents or an EndpointSlice port named by --kube-kv-events-port)",
    schema: between(1, 65535).optional(),
    placeholder: 'N',
  },
  kvReplayPort: {
    description: 'the KV-event replay (ROUTER) port by the same convention; without one a sequence gap starts the pod afresh',
    schema: between(1, 65535).optional(),
    placeholder: 'N',
  },
  kubeKvEventsPort: {
    description: 'EndpointSlice port naming the KV-event port of each endpoint (default kv-events)',
    schema: name.default('kv-events'),
    placeholder: 'NAME',
  },
  kubeKvReplayPort: {
    description: 'EndpointSlice port naming the KV-event replay port (default kv-replay)',
    schema: name.default('kv-replay'),
    placeholder: 'NAME',
  },
  kvTopic: {
    description: 'ZeroMQ subscription prefix of KV events (default empty: every topic)',
    schema: z.string().max(256).default(''),
    placeholder: 'TOPIC',
  },
  kvSnapshotIntervalMs: {
    description: "how often each pod's KV block set is published into the stream as a kv snapshot (default 10000)",
    schema: between(100, 3_600_000).default(10_000),
    placeholder: 'N',
  },
  kvMaxBytesPerPod: {
    description:
      'bytes of block map (server hash to content key) per pod; past it the oldest blocks are forgotten and relayed as removed (default 8388608)',
    schema: between(64 * 1024, 1024 * 1024 * 1024).default(8 * 1024 * 1024),
    placeholder: 'N',
  },
  kvMaxBatchBytes: {
    description:
      'largest KV-event batch accepted from a server (msgpack, or a TensorRT-LLM JSON answer); larger ones are dropped and the rank started afresh (default 8388608)',
    schema: between(1024, 256 * 1024 * 1024).default(8 * 1024 * 1024),
    placeholder: 'N',
  },
  kvReplayTimeoutMs: {
    description: 'how long a replay request may take before the pod is started afresh instead (default 2000)',
    schema: between(10, 600_000).default(2_000),
    placeholder: 'N',
  },
  kvEventsFormat: {
    description:
      "how servers publish KV events: vllm | sglang (ZeroMQ; SGLang's differences are read from its messages) | trtllm (trtllm-serve's POST /kv_cache_events, polled on each endpoint's address) (default: trtllm for endpoints whose engine is trtllm, else vllm)",
    schema: z.enum(KV_EVENTS_FORMATS).optional(),
    placeholder: 'FORMAT',
  },
  kvDataParallelSize: {
    description:
      'data-parallel ranks per server that names none (vLLM/SGLang --data-parallel-size): rank r publishes on the KV port + r (and the replay port + r); each rank is followed (default 1)',
    schema: between(1, MAX_RANKS_PER_POD).default(1),
    placeholder: 'N',
  },
  kvPollIntervalMs: {
    description: "how often a TensorRT-LLM server's KV-event queue is drained (default 100)",
    schema: between(10, 600_000).default(100),
    placeholder: 'N',
  },
  kvReconnectMaxMs: {
    description: 'longest back-off between reconnects to a dead KV endpoint (first 100 ms, doubling) (default 5000)',
    schema: between(100, 600_000).default(5_000),
    placeholder: 'N',
  },
} satisfies FlagSpecs;

export const HELP = renderHelp(
  'spillway-collector',
  [
    'spillway-collector: scrapes model servers and watches readiness; publishes v1 events to NATS.',
    'Needs --pool, --zone and a readiness source: --endpoints FILE, --kube-namespace NS, or both.',
  ].join('\n'),
  collectorFlags,
);

export interface CollectorConfig {
  nats: NatsSettings;
  stream: string;
  pool: string;
  zone: string;
  region: string | undefined;
  endpointsFile: string | undefined;
  endpointsPollMs: number;
  kube:
    | { namespace: string; selector: string | undefined; port: string | undefined; allZones: boolean; kubeconfig: string | undefined }
    | undefined;
  engine: Engine | undefined;
  sampleIntervalMs: number;
  scrapeTimeoutMs: number;
  scrapeFailureThreshold: number;
  scrapeBackoffMaxMs: number;
  scrapeLimits: ScrapeLimits;
  ratesWindowMs: number;
  metricsPath: string;
  probe: { intervalMs: number; timeoutMs: number; path: string; successThreshold: number; failureThreshold: number };
  readinessRepublishMs: number;
  metricsPort: number;
  metricsHost: string;
  logLevel: string;
  kv: {
    eventsPort: number | undefined;
    replayPort: number | undefined;
    kubeEventsPort: string;
    kubeReplayPort: string;
    topic: string;
    snapshotIntervalMs: number;
    maxBytesPerPod: number;
    maxBatchBytes: number;
    replayTimeoutMs: number;
    reconnectMaxMs: number;
    format: KvEventsFormat | undefined;
    dataParallelSize: number;
    pollIntervalMs: number;
  };
}

export type ParsedArgs = { help: true } | { help: false; config: CollectorConfig };

/** Parses argv (without node and script) and the environment. Throws CliError naming the bad flag. */
export function parseCollectorArgs(argv: readonly string[], env: NodeJS.ProcessEnv = process.env): ParsedArgs {
  const parsed = parseCommandLine(collectorFlags, argv, env);
  if (parsed.help) return { help: true };
  const f = parsed.values;
  if (f.endpoints === undefined && f.kubeNamespace === undefined) {
    throw new CliError('--endpoints: give --endpoints FILE or --kube-namespace NS (or both)', 'endpoints');
  }
  if (f.host !== undefined && parsed.explicit.has('metricsHost') && f.host !== f.metricsHost) {
    throw new CliError('--host: --host and --metrics-host name the same address; give one', 'host');
  }
  const nats: NatsSettings = natsSettingsFromValues(f, env);
  return {
    help: false,
    config: {
      nats,
      stream: f.stream,
      pool: f.pool,
      zone: f.zone,
      region: f.region,
      endpointsFile: f.endpoints,
      endpointsPollMs: f.endpointsPollMs,
      kube:
        f.kubeNamespace === undefined
          ? undefined
          : { namespace: f.kubeNamespace, selector: f.kubeSelector, port: f.kubePort, allZones: f.kubeAllZones, kubeconfig: f.kubeconfig },
      engine: f.engine,
      sampleIntervalMs: f.sampleIntervalMs,
      scrapeTimeoutMs: f.scrapeTimeoutMs,
      scrapeFailureThreshold: f.scrapeFailureThreshold,
      scrapeBackoffMaxMs: f.scrapeBackoffMaxMs,
      scrapeLimits: { ...DEFAULT_SCRAPE_LIMITS, maxBytes: f.scrapeMaxBytes, cpuBudgetMs: f.scrapeCpuBudgetMs },
      ratesWindowMs: f.ratesWindowMs,
      metricsPath: f.metricsPath,
      probe: {
        intervalMs: f.probeIntervalMs,
        timeoutMs: f.probeTimeoutMs,
        path: f.probePath,
        successThreshold: f.probeSuccessThreshold,
        failureThreshold: f.probeFailureThreshold,
      },
      readinessRepublishMs: f.readinessRepublishMs,
      metricsPort: f.metricsPort,
      metricsHost: f.host ?? f.metricsHost,
      logLevel: f.logLevel,
      kv: {
        eventsPort: f.kvEventsPort,
        replayPort: f.kvReplayPort,
        kubeEventsPort: f.kubeKvEventsPort,
        kubeReplayPort: f.kubeKvReplayPort,
        topic: f.kvTopic,
        snapshotIntervalMs: f.kvSnapshotIntervalMs,
        maxBytesPerPod: f.kvMaxBytesPerPod,
        maxBatchBytes: f.kvMaxBatchBytes,
        replayTimeoutMs: f.kvReplayTimeoutMs,
        reconnectMaxMs: f.kvReconnectMaxMs,
        format: f.kvEventsFormat,
        dataParallelSize: f.kvDataParallelSize,
        pollIntervalMs: f.kvPollIntervalMs,
      },
    },
  };
}
