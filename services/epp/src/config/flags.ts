import { z } from 'zod';
import { commaList, durationMs, logLevel, port, positiveInt, renderHelp, type FlagSpecs } from '@spillway/cli';
import { DEFAULT_STREAM, natsFlags, streamNameSchema } from '@spillway/bus';
import { DEFAULT_MAX_CLOCK_SKEW_MS, DEFAULT_MAX_PODS_PER_ZONE, DEFAULT_MAX_ZONES_PER_POOL } from '@spillway/fleet';
import { schedulerConfigSchema, sharedStateConfigSchema } from '@spillway/scheduler';

import { kvFlags, tokenizersFileSchema } from '../kv/config.js';

/**
 * spillway-epp's configuration: flags over `SPILLWAY_<FLAG>` environment variables over the config
 * file over defaults (docs/flags.md). The config file holds everything the flags hold plus the
 * scheduler's tunables, objectives and model rewrites; it is re-read when it changes
 * (config/reload.ts), and flags and environment still win over it.
 */
const optionalString = z.string().min(1).optional();
const booleanValue = (fallback: boolean) =>
  z.union([z.boolean(), z.enum(['true', 'false']).transform((v) => v === 'true')]).default(fallback);

export const eppFlags = {
  pool: { description: 'InferencePool (event pool) this EPP serves', schema: z.string().min(1), placeholder: 'NAME' },
  zone: { description: "this EPP's zone: the local zone for picking", schema: z.string().min(1), placeholder: 'ZONE' },
  region: {
    description: "this EPP's region: same-region zones are preferred when spilling",
    schema: optionalString,
    placeholder: 'REGION',
  },
  ...natsFlags,
  stream: {
    description: 'JetStream stream to replay (a zone aggregate in multi-zone NATS)',
    schema: streamNameSchema.default(DEFAULT_STREAM),
    placeholder: 'NAME',
  },
  ensureStream: {
    description: 'create the stream when it is missing, at start or deleted later (turn off when the stream is managed elsewhere)',
    schema: booleanValue(true),
    placeholder: 'true|false',
  },
  host: {
    description: 'address the gRPC (ext_proc), health and metrics servers bind to; plaintext ext_proc off loopback is warned about',
    schema: z.string().min(1).default('0.0.0.0'),
    placeholder: 'ADDR',
  },
  grpcPort: { description: 'ext_proc gRPC port (also serves gRPC health)', schema: port(9002), placeholder: 'N' },
  healthPort: { description: 'gRPC health port', schema: port(9003), placeholder: 'N' },
  metricsPort: { description: 'Prometheus /metrics port', schema: port(9090), placeholder: 'N' },
  ui: {
    description: "serve the operators' view, read-only: GET / (a page) and GET /api/state (its JSON), on the metrics port or --ui-port",
    schema: booleanValue(true),
    placeholder: 'true|false',
  },
  uiPort: { description: 'serve the view on this port instead of the metrics port', schema: port().optional(), placeholder: 'N' },
  maxEndpoints: {
    description: 'most endpoints in the destination list (1 for single-address gateways)',
    schema: positiveInt().max(64).optional(),
    placeholder: 'N',
  },
  subsetMode: {
    description: 'strict: pick only inside the subset hint; locality: subset = local preference, spill beyond it',
    schema: z.enum(['strict', 'locality']).optional(),
    placeholder: 'MODE',
  },
  policy: {
    description:
      'cost: price every endpoint in ms of expected time to first token; weighted: the scorers of the Gateway API Inference Extension EPP (now in llm-d)',
    schema: z.enum(['cost', 'weighted']).optional(),
    placeholder: 'POLICY',
  },
  config: { description: 'YAML or JSON config file', schema: optionalString, placeholder: 'FILE' },
  tlsCert: { description: 'serve gRPC over TLS with this certificate (with --tls-key)', schema: optionalString, placeholder: 'FILE' },
  tlsKey: { description: 'private key for --tls-cert', schema: optionalString, placeholder: 'FILE' },
  tlsClientCa: { description: 'require client certificates signed by this CA (mTLS)', schema: optionalString, placeholder: 'FILE' },
  healthTls: {
    description: 'serve the health port over TLS too (same files); plaintext by default, for kubelet probes',
    schema: booleanValue(false),
    placeholder: 'true|false',
  },
  connectionTimeoutMs: {
    description: 'close connections silent this long: gRPC ones that answer no keepalive ping, HTTP ones with no request',
    schema: durationMs().min(100).default(20_000),
    placeholder: 'MS',
  },
  metricsStaleMs: {
    description: "pod metrics older than this are stale: the pod is then estimated from its last sample and this EPP's own picks",
    schema: durationMs().default(1000),
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
  maxZonesPerPool: {
    description: 'most zones the pool may hold; events for pods of further zones are refused',
    schema: positiveInt().default(DEFAULT_MAX_ZONES_PER_POOL),
    placeholder: 'N',
  },
  metricModels: {
    description: 'models named in metric labels besides those of modelRewrites; every other model is counted as "other"',
    schema: commaList().default([]),
    placeholder: 'A,B',
  },
  viewStaleLimitMs: {
    description: 'deprecated, ignored: readiness stays SERVING while NATS is unreachable',
    schema: durationMs().optional(),
    placeholder: 'MS',
  },
  requestTimeoutMs: {
    description: 'a request whose body is not complete by then ends the stream',
    schema: durationMs().default(60_000),
    placeholder: 'MS',
  },
  maxBodyBytes: {
    description: 'largest request body accepted (413 above)',
    schema: positiveInt().default(8 * 1024 * 1024),
    placeholder: 'BYTES',
  },
  maxBufferedBodyBytes: {
    description: 'request-body bytes all open streams may hold together; a body that needs more gets 503',
    schema: positiveInt().default(512 * 1024 * 1024),
    placeholder: 'BYTES',
  },
  drainDelayMs: {
    description:
      "on SIGTERM, report NOT_SERVING and keep serving this long before refusing new connections, so the gateways' health checks notice first (Envoy's EPP cluster: 2 checks, 2 s apart, 1 s timeout); skipped when no gateway is connected or the EPP never reported SERVING",
    schema: durationMs().default(6000),
    placeholder: 'MS',
  },
  drainTimeoutMs: {
    description: 'then let streams in flight (requests waiting for their response headers) finish for at most this long',
    schema: durationMs().default(30_000),
    placeholder: 'MS',
  },
  shareState: {
    description:
      "share picks in flight, prefix placements and penalties with the pool's other EPPs over NATS (on unless false; the config file's sharedState holds its settings)",
    schema: z.union([z.boolean(), z.enum(['true', 'false']).transform((v) => v === 'true')]).optional(),
    placeholder: 'true|false',
  },
  ...kvFlags,
  logLevel: { description: 'pino log level (debug logs one line per decision)', schema: logLevel(), placeholder: 'LEVEL' },
} satisfies FlagSpecs;

const modelRewriteSchema = z.strictObject({
  match: z.string().min(1),
  targets: z.array(z.strictObject({ model: z.string().min(1), weight: z.number().finite().min(0).default(1) })).min(1),
});

/** The config file: the scheduler's tunables at the top level, model rewrites, and any flag by its camelCase name. */
export const flagKeys = Object.keys(eppFlags) as (keyof typeof eppFlags)[];
// Flag values in the file are checked by the flag schemas, once flags and environment are merged.
const flagFields = Object.fromEntries(flagKeys.map((key) => [key, z.unknown().optional()])) as Record<
  keyof typeof eppFlags,
  z.ZodOptional<z.ZodUnknown>
>;
export const eppConfigFileSchema = schedulerConfigSchema
  .omit({ maxEndpoints: true, subsetMode: true, policy: true })
  .extend({
    modelRewrites: z.array(modelRewriteSchema).default([]),
    sharedState: sharedStateConfigSchema.prefault({}),
    tokenizers: tokenizersFileSchema,
    ...flagFields,
  })
  .superRefine((value, ctx) => {
    const seen = new Set<string>();
    value.modelRewrites.forEach((rule, i) => {
      if (seen.has(rule.match))
        ctx.addIssue({ code: 'custom', path: ['modelRewrites', i, 'match'], message: `a second rule for "${rule.match}"` });
      seen.add(rule.match);
    });
  });

export type EppFlagValues = z.output<z.ZodObject<{ [K in keyof typeof eppFlags]: (typeof eppFlags)[K]['schema'] }>>;
export type EppConfigFile = z.output<typeof eppConfigFileSchema>;

export const EPP_HELP = renderHelp(
  'spillway-epp',
  'Zone-aware Endpoint Picker: serves Envoy ext_proc, folds NATS JetStream events into its view of the pool.',
  eppFlags,
);
