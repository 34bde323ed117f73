// Longer than the ~250 lines a file here keeps to, on purpose: one declaration per metric (name,
// help, labels, buckets), all in one place, so docs/metrics.md reads against a single file.
import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client';
import { BUILD } from './build-info.js';
import { PendingCount } from './pending-count.js';
import { PendingHistogram } from './pending-histogram.js';

/**
 * The EPP's Prometheus metrics (docs/metrics.md). Where the meaning matches the Gateway API
 * Inference Extension's EPP (now in llm-d; the reference EPP below), the name and labels are its, so existing
 * dashboards keep working; Spillway's own zone-aware figures use the `spillway_` prefix.
 */
export type Outcome = 'routed' | '400' | '404' | '413' | '429' | '500' | '503';

/** The reference EPP's input-token buckets (powers of two from 8 to 2^20). */
const TOKEN_BUCKETS = [1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072, 262144, 524288, 1048576];

export class EppMetrics {
  readonly registry = new Registry();
  // Only children with a fixed, small label set are batched, so this never grows with client input.
  private readonly pending: { flush(): void }[] = [];
  private readonly readHooks: (() => void)[] = [];
  private readonly flushPending = (): void => {
    for (const count of this.pending) count.flush();
    for (const hook of this.readHooks) hook();
  };

  readonly requests = new Counter({
    name: 'spillway_requests_total',
    help: 'Requests handled, by outcome (routed, 400, 429, 503, ...).',
    labelNames: ['outcome'] as const,
    registers: [this.registry],
    collect: this.flushPending,
  });
  readonly objectiveRequests = new Counter({
    name: 'inference_objective_request_total',
    help: '[ALPHA] Counter of inference objective requests broken out for each model and target model.',
    labelNames: ['model_name', 'target_model_name', 'priority'] as const,
    registers: [this.registry],
    collect: this.flushPending,
  });
  readonly objectiveErrors = new Counter({
    name: 'inference_objective_request_error_total',
    help: '[ALPHA] Counter of inference objective requests errors broken out for each model and target model.',
    labelNames: ['model_name', 'target_model_name', 'error_code'] as const,
    registers: [this.registry],
  });
  readonly runningRequests = new Gauge({
    name: 'inference_objective_running_requests',
    help: '[ALPHA] Inference objective number of running requests in each model.',
    labelNames: ['model_name'] as const,
    registers: [this.registry],
    collect: this.flushPending,
  });
  readonly requestSizes = new Histogram({
    name: 'inference_objective_request_sizes',
    help: '[ALPHA] Inference objective requests size distribution in bytes for each model and target model.',
    labelNames: ['model_name', 'target_model_name'] as const,
    buckets: [64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216],
    registers: [this.registry],
    collect: this.flushPending,
  });
  readonly requestDuration = new Histogram({
    name: 'inference_objective_request_duration_seconds',
    help: '[ALPHA] Inference objective response latency distribution in seconds for each model and target model.',
    labelNames: ['model_name', 'target_model_name'] as const,
    buckets: [
      0.005, 0.025, 0.05, 0.1, 0.2, 0.4, 0.6, 0.8, 1, 1.25, 1.5, 2, 3, 4, 5, 6, 8, 10, 15, 20, 30, 45, 60, 120, 180, 240, 300, 360, 480,
      600, 900, 1200, 1800, 2700, 3600,
    ],
    registers: [this.registry],
    collect: this.flushPending,
  });
  // Token figures exist only when the gateway streams response bodies to the EPP (docs/metrics.md).
  readonly responseSizes = new Histogram({
    name: 'inference_objective_response_sizes',
    help: '[ALPHA] Inference objective responses size distribution in bytes for each model and target model.',
    labelNames: ['model_name', 'target_model_name'] as const,
    buckets: [1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768, 65536],
    registers: [this.registry],
  });
  readonly inputTokens = new Histogram({
    name: 'inference_objective_input_tokens',
    help: '[ALPHA] Inference objective input token count distribution for requests in each model.',
    labelNames: ['model_name', 'target_model_name'] as const,
    buckets: TOKEN_BUCKETS,
    registers: [this.registry],
  });
  readonly outputTokens = new Histogram({
    name: 'inference_objective_output_tokens',
    help: '[ALPHA] Inference objective output token count distribution for requests in each model.',
    labelNames: ['model_name', 'target_model_name'] as const,
    buckets: TOKEN_BUCKETS.filter((b) => b <= 8192),
    registers: [this.registry],
  });
  readonly cachedTokens = new Histogram({
    name: 'inference_objective_prompt_cached_tokens',
    help: '[ALPHA] Inference objective prompt cached token count distribution for requests in each model.',
    labelNames: ['model_name', 'target_model_name'] as const,
    buckets: TOKEN_BUCKETS,
    registers: [this.registry],
  });
  readonly normalizedTimePerOutputToken = new Histogram({
    name: 'inference_objective_normalized_time_per_output_token_seconds',
    help: '[ALPHA] Inference objective latency divided by number of output tokens in seconds for each model and target model.',
    labelNames: ['model_name', 'target_model_name'] as const,
    buckets: [0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10],
    registers: [this.registry],
  });
  readonly schedulerDuration = new Histogram({
    name: 'inference_extension_scheduler_e2e_duration_seconds',
    help: '[ALPHA] Scheduling latency distribution in seconds: the time to pick the endpoint list.',
    buckets: [0.00001, 0.00002, 0.00005, 0.0001, 0.0002, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1],
    registers: [this.registry],
    collect: this.flushPending,
  });
  readonly requestPhases = new Histogram({
    name: 'spillway_request_phase_seconds',
    help: "Where the EPP's time per request goes, by phase: receive (first request-body chunk to the end of the body), parse (body to request), tokenize (prompt to token ids, when its model has a tokenizer), pick, answer (the pick's end to the destination and body written), decide (the end of the body to the destination written: parse, tokenize, pick and answer).",
    labelNames: ['phase'] as const,
    // 1-2-5 steps from 5 µs to 10 s: a pick takes tens of µs, receiving a large body over a slow client seconds.
    buckets: [
      0.000005, 0.00001, 0.00002, 0.00005, 0.0001, 0.0002, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10,
    ],
    registers: [this.registry],
    collect: this.flushPending,
  });
  readonly schedulerAttempts = new Counter({
    name: 'inference_extension_scheduler_attempts_total',
    help: '[ALPHA] Number of scheduling attempts by status (success, failure).',
    labelNames: ['status'] as const,
    registers: [this.registry],
    collect: this.flushPending,
  });
  readonly listLength = new Histogram({
    name: 'spillway_destination_list_length',
    help: 'Number of endpoints in the returned destination list.',
    buckets: [1, 2, 3, 4, 5, 8],
    registers: [this.registry],
    collect: this.flushPending,
  });
  readonly listEntries = new Counter({
    name: 'spillway_destination_entries_total',
    help: 'Entries of returned destination lists by reason (local-best, local, spill, cross-zone-fallback, last-resort).',
    labelNames: ['reason'] as const,
    registers: [this.registry],
    collect: this.flushPending,
  });
  readonly spills = new Counter({
    name: 'spillway_spills_total',
    help: 'Requests whose primary endpoint is in another zone because the local zone was overloaded.',
    registers: [this.registry],
    collect: this.flushPending,
  });
  readonly servedElsewhere = new Counter({
    name: 'spillway_served_fallback_total',
    help: 'Requests the gateway served from an endpoint other than the primary (a fallback was used).',
    registers: [this.registry],
  });
  readonly primaryFailed = new Counter({
    name: 'spillway_primary_failed_total',
    help: 'Responses whose primary endpoint answered 5xx or could not be reached (the primary was penalised).',
    registers: [this.registry],
  });
  readonly subsetEntriesIgnored = new Counter({
    name: 'spillway_subset_entries_ignored_total',
    help: 'Malformed, oversized or surplus entries in the gateway subset hint, ignored.',
    registers: [this.registry],
  });
  readonly subsetEntriesUnmatched = new Counter({
    name: 'spillway_subset_entries_unmatched_total',
    help: 'Well-formed entries of the gateway subset hint that named no routable pod of the pool (a stale hint: pods rescheduled, not ready, or unknown to this EPP).',
    registers: [this.registry],
  });
  readonly gatewayZoneUnknown = new Counter({
    name: 'spillway_gateway_zone_unknown_total',
    help: 'Requests whose gateway named a zone (x-spillway-gateway-zone) that no pod of the pool is in (unknown) or that is not a zone name (malformed); they were picked for this EPP zone.',
    labelNames: ['reason'] as const,
    registers: [this.registry],
  });
  readonly zoneReadyPods = new Gauge({
    name: 'spillway_zone_ready_pods',
    help: 'Ready pods per zone in this EPP view.',
    labelNames: ['zone'] as const,
    registers: [this.registry],
  });
  readonly zoneSaturatedPods = new Gauge({
    name: 'spillway_zone_saturated_pods',
    help: 'Ready pods per zone past a hard limit: full (KV cache full with a queue, or the queue at its limit) under the cost policy, saturated (queue or KV over threshold) under the weighted policy.',
    labelNames: ['zone'] as const,
    registers: [this.registry],
  });
  readonly zoneStalePods = new Gauge({
    name: 'spillway_zone_stale_pods',
    help: 'Ready pods per zone whose metrics are stale.',
    labelNames: ['zone'] as const,
    registers: [this.registry],
  });
  readonly poolReadyPods = new Gauge({
    name: 'inference_pool_ready_pods',
    help: '[ALPHA] The number of ready pods in the inference server pool.',
    labelNames: ['name'] as const,
    registers: [this.registry],
  });
  readonly poolAverageKv = new Gauge({
    name: 'inference_pool_average_kv_cache_utilization',
    help: '[ALPHA] The average kv cache utilization for an inference server pool.',
    labelNames: ['name'] as const,
    registers: [this.registry],
  });
  readonly poolAverageQueue = new Gauge({
    name: 'inference_pool_average_queue_size',
    help: '[ALPHA] The average number of requests pending in the model server queue.',
    labelNames: ['name'] as const,
    registers: [this.registry],
  });
  readonly poolAverageRunning = new Gauge({
    name: 'inference_pool_average_running_requests',
    help: '[ALPHA] The average number of running requests in the model server.',
    labelNames: ['name'] as const,
    registers: [this.registry],
  });
  readonly events = new Counter({
    name: 'spillway_events_total',
    help: 'Events from the stream: applied to the view, ignored as older than the view, rejected as malformed, refused as dated in the future or as a new pod of a full zone (future, over-capacity).',
    labelNames: ['result'] as const,
    registers: [this.registry],
  });
  readonly natsConnected = new Gauge({
    name: 'spillway_nats_connected',
    help: '1 while connected to NATS.',
    registers: [this.registry],
  });
  readonly viewStaleSeconds = new Gauge({
    name: 'spillway_view_stale_seconds',
    help: 'Seconds since the event view stopped following the stream (0 while live): how old the view may be.',
    registers: [this.registry],
  });
  readonly caughtUp = new Gauge({
    name: 'spillway_view_caught_up',
    help: '1 once the replay of the stream has caught up.',
    registers: [this.registry],
  });
  readonly info = new Gauge({
    name: 'inference_extension_info',
    help: '[ALPHA] General information of the current build of Inference Extension.',
    labelNames: ['commit', 'build_ref'] as const,
    registers: [this.registry],
  });
  readonly configInfo = new Gauge({
    name: 'spillway_config_info',
    help: 'The config file version in force: 1 for its SHA-256 (hash label; "none" without a file).',
    labelNames: ['hash'] as const,
    registers: [this.registry],
  });
  readonly configReloads = new Counter({
    name: 'spillway_config_reloads_total',
    help: 'Config file changes seen while running, by result: applied, or rejected (unreadable or invalid; the running config is kept).',
    labelNames: ['result'] as const,
    registers: [this.registry],
  });
  readonly configLastReloadSuccessful = new Gauge({
    name: 'spillway_config_last_reload_successful',
    help: '1 when the config file on disk is the version in force, 0 while it holds a change that was rejected.',
    registers: [this.registry],
  });
  /** Registered only when the EPP serves TLS (registerTls). */
  tlsReloads: Counter<'result'> | undefined;
  tlsCertificateExpiry: Gauge | undefined;

  /** The TLS metrics, for an EPP serving TLS: reloads of its certificate files, and the certificate's expiry. */
  registerTls(): { reloads: Counter<'result'>; expiry: Gauge } {
    const reloads = new Counter({
      name: 'spillway_tls_reloads_total',
      help: 'Changes of the TLS files (--tls-cert, --tls-key, --tls-client-ca) seen while running, by result: applied (new connections get them), or rejected (not usable together; the material in force stays).',
      labelNames: ['result'] as const,
      registers: [this.registry],
    });
    reloads.inc({ result: 'applied' }, 0);
    reloads.inc({ result: 'rejected' }, 0);
    const expiry = new Gauge({
      name: 'spillway_tls_certificate_expiry_timestamp_seconds',
      help: 'When the server certificate in force expires (Unix time, seconds).',
      registers: [this.registry],
    });
    this.tlsReloads = reloads;
    this.tlsCertificateExpiry = expiry;
    return { reloads, expiry };
  }

  /**
   * A batched child of `requests`, `schedulerAttempts`, `listEntries` or `spills` (metrics that
   * flush on read), flushed here on every read. Call once per label set, at startup.
   */
  batched(child: { inc(value: number): void }): PendingCount {
    const count = new PendingCount(child);
    this.pending.push(count);
    return count;
  }

  /**
   * A batched series of `requestSizes`, `requestDuration`, `schedulerDuration`, `requestPhases` or `listLength`
   * (histograms that flush on read), flushed here on every read. Call once per label set: the label
   * values must come from a fixed, small set (configured models, never client input as is).
   */
  batchedHistogram(histogram: Histogram<string>, labels: Record<string, string> = {}): PendingHistogram {
    const series = new PendingHistogram(histogram, labels);
    this.pending.push(series);
    return series;
  }

  /**
   * Runs `hook` before any batched metric (those above plus `objectiveRequests` and
   * `runningRequests`) is read: for pending counts whose owner flushes them itself.
   */
  onRead(hook: () => void): void {
    this.readHooks.push(hook);
  }

  constructor() {
    collectDefaultMetrics({ register: this.registry });
    this.info.set({ commit: BUILD.commit, build_ref: BUILD.ref }, 1);
    this.configLastReloadSuccessful.set(1);
    this.configReloads.inc({ result: 'applied' }, 0);
    this.configReloads.inc({ result: 'rejected' }, 0);
  }
}
