import type { Engine, EngineStats, LoraInfo } from '@spillway/engine';
import { Counter, Gauge, Histogram, Registry } from 'prom-client';
import type { MetricsFlavor } from './options.js';

/** What the metrics read at scrape time. */
export interface MetricsSource {
  stats(): EngineStats;
  loraInfo(): LoraInfo;
}

/** Observations pushed as requests progress on one engine (data-parallel rank); times in seconds of model time (before --time-scale). */
export interface EngineObserver {
  /** `prefillS`: from when the request was first scheduled until this token (vLLM's request prefill time). */
  firstToken(ttftS: number, queueS: number, prefillS: number): void;
  token(itlS: number): void;
  /** `tpotS`: the request's mean time per output token after the first (vLLM's per-request TPOT). */
  finish(e2eS: number, reason: string, tpotS?: number): void;
}

export interface SimMetrics {
  readonly registry: Registry;
  /** The observer of data-parallel rank `rank` (label `engine`, as vLLM labels each engine's series). */
  engine(rank: number): EngineObserver;
}

// vLLM's own buckets (vllm/v1/metrics/loggers.py), so dashboards built for vLLM read the same.
const TTFT_BUCKETS = [0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10, 20, 40, 80, 160, 640, 2560];
const ITL_BUCKETS = [0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1, 2.5, 5, 7.5, 10, 20, 40, 80];
// vLLM's request_latency_buckets: e2e latency, and the queue, prefill, decode and inference phases.
const E2E_BUCKETS = [0.3, 0.5, 0.8, 1, 1.5, 2, 2.5, 5, 10, 15, 20, 30, 40, 50, 60, 120, 240, 480, 960, 1920, 7680];
// TensorRT-LLM's request_prefill_time_seconds buckets (tensorrt_llm/metrics/collector.py).
const TRTLLM_PREFILL_BUCKETS = [0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 40, 80, 160, 640, 2560];

/**
 * Names per engine: every family the collector reads, gauges and rate counters (the sources of
 * each engine's names are listed in services/collector/src/counters.ts).
 */
interface Names {
  waiting: string;
  running: string;
  kvUsage: string[];
  ttft: string;
  itl: string[];
  /** A per-request mean time per output token (vLLM's request_time_per_output_token_seconds). */
  requestTpot?: string;
  /** Cached prompt tokens (vLLM's prompt_tokens_cached_total). */
  cachedTokens?: string;
  e2e: string;
  queue: string;
  /** Prefill time per request, scheduled → first token (vLLM, newer TensorRT-LLM; SGLang has none). */
  prefill?: { name: string; buckets: number[] };
  promptTokens: string;
  generationTokens: string;
  /** Completed requests: a counter with `finished_reason` (vLLM, TensorRT-LLM) or a plain one mirrored from the engine (SGLang). */
  success: { name: string; finishedReason: boolean };
  /** Prefix-cache hits and lookups, in tokens (vLLM, SGLang: lookups are the prompt tokens) or KV blocks (TensorRT-LLM: hits and misses). */
  prefix:
    | { kind: 'tokens'; hits: string; queries?: string; hitLabels?: Readonly<Record<string, string>> }
    | { kind: 'blocks'; hits: string; misses: string };
  preemptions?: string;
}

const NAMES: Record<MetricsFlavor, Names> = {
  vllm: {
    waiting: 'vllm:num_requests_waiting',
    running: 'vllm:num_requests_running',
    // The current names (vllm/v1/metrics/loggers.py, PrometheusStatLogger): gpu_cache_usage_perc and
    // time_per_output_token_seconds, deprecated in 0.10, are gone; the collector still reads them from older servers.
    kvUsage: ['vllm:kv_cache_usage_perc'],
    ttft: 'vllm:time_to_first_token_seconds',
    itl: ['vllm:inter_token_latency_seconds'],
    requestTpot: 'vllm:request_time_per_output_token_seconds',
    cachedTokens: 'vllm:prompt_tokens_cached_total',
    e2e: 'vllm:e2e_request_latency_seconds',
    queue: 'vllm:request_queue_time_seconds',
    prefill: { name: 'vllm:request_prefill_time_seconds', buckets: E2E_BUCKETS },
    promptTokens: 'vllm:prompt_tokens_total',
    generationTokens: 'vllm:generation_tokens_total',
    success: { name: 'vllm:request_success_total', finishedReason: true },
    prefix: { kind: 'tokens', hits: 'vllm:prefix_cache_hits_total', queries: 'vllm:prefix_cache_queries_total' },
    preemptions: 'vllm:num_preemptions_total',
  },
  sglang: {
    waiting: 'sglang:num_queue_reqs',
    running: 'sglang:num_running_reqs',
    kvUsage: ['sglang:token_usage'],
    ttft: 'sglang:time_to_first_token_seconds',
    itl: ['sglang:inter_token_latency_seconds'],
    e2e: 'sglang:e2e_request_latency_seconds',
    queue: 'sglang:queue_time_seconds',
    promptTokens: 'sglang:prompt_tokens_total',
    generationTokens: 'sglang:generation_tokens_total',
    success: { name: 'sglang:num_requests_total', finishedReason: false },
    // Current SGLang labels cached tokens by the tier that served them (`cache_source`: device,
    // host, storage_<backend>); the engine model has one tier, the GPU's radix cache.
    prefix: { kind: 'tokens', hits: 'sglang:cached_tokens_total', hitLabels: { cache_source: 'device' } },
  },
  trtllm: {
    waiting: 'trtllm_num_requests_waiting',
    running: 'trtllm_num_requests_running',
    kvUsage: ['trtllm_kv_cache_utilization'],
    ttft: 'trtllm_time_to_first_token_seconds',
    itl: ['trtllm_time_per_output_token_seconds'],
    e2e: 'trtllm_e2e_request_latency_seconds',
    queue: 'trtllm_request_queue_time_seconds',
    prefill: { name: 'trtllm_request_prefill_time_seconds', buckets: TRTLLM_PREFILL_BUCKETS },
    promptTokens: 'trtllm_prompt_tokens_total',
    generationTokens: 'trtllm_generation_tokens_total',
    success: { name: 'trtllm_request_success_total', finishedReason: true },
    prefix: { kind: 'blocks', hits: 'trtllm_kv_cache_reused_blocks_total', misses: 'trtllm_kv_cache_missed_blocks_total' },
  },
};

/** One series per engine (data-parallel rank): its labels and what it reads at scrape time. */
interface PerEngine {
  labels: (rank: number) => Record<string, string>;
  read: (stats: EngineStats, rank: number) => number;
}

/** A counter that mirrors each engine's counter at scrape time (prom-client counters cannot be set). */
function mirroredCounter(registry: Registry, meta: { name: string; help: string }, stats: () => EngineStats[], series: PerEngine): void {
  new Counter({
    name: meta.name,
    help: meta.help,
    labelNames: Object.keys(series.labels(0)),
    registers: [registry],
    collect() {
      this.reset();
      stats().forEach((s, rank) => this.inc(series.labels(rank), series.read(s, rank)));
    },
  });
}

function gauge(registry: Registry, meta: { name: string; help: string }, stats: () => EngineStats[], series: PerEngine): void {
  new Gauge({
    name: meta.name,
    help: meta.help,
    labelNames: Object.keys(series.labels(0)),
    registers: [registry],
    collect() {
      this.reset();
      stats().forEach((s, rank) => this.set(series.labels(rank), series.read(s, rank)));
    },
  });
}

/**
 * The exposition of one simulated server, in `flavor`'s names, with one series per engine
 * (data-parallel rank) labelled `engine` as vLLM labels them; the collector sums (counts) or
 * averages (KV use) them per pod.
 */
export function createMetrics(flavor: MetricsFlavor, model: string, engines: ReadonlyArray<Engine | MetricsSource>): SimMetrics {
  const registry = new Registry();
  const n = NAMES[flavor];
  const engineLabels = (rank: number) => ({ model_name: model, engine: String(rank) });
  const modelLabels = () => ({ model_name: model });
  // One stats() per engine per family per scrape: cheap, and collect callbacks run independently.
  const stats = (): EngineStats[] => engines.map((e) => e.stats());
  const per = (read: (s: EngineStats) => number, labels: (rank: number) => Record<string, string> = engineLabels): PerEngine => ({
    labels,
    read,
  });

  gauge(
    registry,
    { name: n.waiting, help: 'Number of requests waiting to be processed.' },
    stats,
    per((s) => s.waiting),
  );
  gauge(
    registry,
    { name: n.running, help: 'Number of requests in model execution batches.' },
    stats,
    per((s) => s.running),
  );
  for (const name of n.kvUsage)
    gauge(
      registry,
      { name, help: 'KV-cache usage. 1 means 100 percent usage.' },
      stats,
      per((s) => s.kvUsage),
    );
  mirroredCounter(
    registry,
    { name: n.promptTokens, help: 'Number of prefill tokens processed.' },
    stats,
    per((s) => s.promptTokens),
  );
  mirroredCounter(
    registry,
    { name: n.generationTokens, help: 'Number of generation tokens processed.' },
    stats,
    per((s) => s.generationTokens),
  );
  if (n.cachedTokens)
    mirroredCounter(
      registry,
      { name: n.cachedTokens, help: 'Number of cached prompt tokens (local + external).' },
      stats,
      per((s) => s.prefixHitTokens),
    );
  if (n.prefix.kind === 'tokens') {
    const hitLabels = n.prefix.hitLabels ?? {};
    mirroredCounter(
      registry,
      { name: n.prefix.hits, help: 'Prefix cache hits, in terms of number of cached tokens.' },
      stats,
      per(
        (s) => s.prefixHitTokens,
        (rank) => ({ ...engineLabels(rank), ...hitLabels }),
      ),
    );
    if (n.prefix.queries)
      mirroredCounter(
        registry,
        { name: n.prefix.queries, help: 'Prefix cache queries, in terms of number of queried tokens.' },
        stats,
        per((s) => s.prefixQueryTokens),
      );
  } else {
    // Whole blocks of the looked-up prompt tokens, as TensorRT-LLM counts reuse.
    mirroredCounter(
      registry,
      { name: n.prefix.hits, help: 'Cumulative number of KV cache blocks reused (cache hits)' },
      stats,
      per((s) => Math.floor(s.prefixHitTokens / s.blockSize)),
    );
    mirroredCounter(
      registry,
      { name: n.prefix.misses, help: 'Cumulative number of KV cache blocks missed (cache misses)' },
      stats,
      per((s) => Math.floor(s.prefixQueryTokens / s.blockSize) - Math.floor(s.prefixHitTokens / s.blockSize)),
    );
  }
  if (!n.success.finishedReason)
    mirroredCounter(
      registry,
      { name: n.success.name, help: 'Number of requests processed.' },
      stats,
      per((s) => s.finished),
    );
  if (n.preemptions)
    mirroredCounter(
      registry,
      { name: n.preemptions, help: 'Cumulative number of preemption from the engine.' },
      stats,
      per((s) => s.preemptions),
    );

  if (flavor === 'vllm') {
    gauge(
      registry,
      { name: 'vllm:cache_config_info', help: 'Information of the LLMEngine CacheConfig' },
      stats,
      per(
        () => 1,
        (rank) => {
          const { blockSize, numBlocks } = (engines[rank] as Engine | MetricsSource).stats();
          return { block_size: String(blockSize), num_gpu_blocks: String(numBlocks), enable_prefix_caching: 'True', engine: String(rank) };
        },
      ),
    );
    const first = engines[0] as Engine | MetricsSource;
    new Gauge({
      name: 'vllm:lora_requests_info',
      help: 'Running stats on lora requests.',
      labelNames: ['max_lora', 'running_lora_adapters', 'waiting_lora_adapters'],
      registers: [registry],
      collect() {
        // vLLM's value is the time of the last update; consumers pick the series with the largest
        // value. vLLM warns this gauge is misleading with data parallelism: it shows one engine's.
        const info = first.loraInfo();
        this.reset();
        this.set(
          { max_lora: String(info.max), running_lora_adapters: info.running.join(','), waiting_lora_adapters: info.waiting.join(',') },
          Date.now() / 1000,
        );
      },
    });
  } else if (flavor === 'sglang') {
    gauge(
      registry,
      { name: 'sglang:cache_config_info', help: 'Cache configuration.' },
      stats,
      per(
        () => 1,
        (rank) => {
          const { blockSize, numBlocks } = (engines[rank] as Engine | MetricsSource).stats();
          return { model_name: model, engine: String(rank), page_size: String(blockSize), num_pages: String(numBlocks) };
        },
      ),
    );
    gauge(
      registry,
      { name: 'sglang:num_used_tokens', help: 'The number of used tokens.' },
      stats,
      per((s) => s.usedBlocks * s.blockSize),
    );
  } else {
    gauge(
      registry,
      { name: 'trtllm_kv_cache_tokens_per_block', help: 'Tokens per KV-cache block.' },
      stats,
      per((s) => s.blockSize, modelLabels),
    );
    gauge(
      registry,
      { name: 'trtllm_kv_cache_max_blocks', help: 'Maximum KV-cache blocks.' },
      stats,
      per((s) => s.numBlocks, modelLabels),
    );
  }

  const hist = (name: string, help: string, buckets: number[]): Histogram<string> =>
    new Histogram({ name, help, buckets, labelNames: ['model_name', 'engine'], registers: [registry] });
  const ttft = hist(n.ttft, 'Histogram of time to first token in seconds.', TTFT_BUCKETS);
  const itl = n.itl.map((name) => hist(name, 'Histogram of inter-token latency in seconds.', ITL_BUCKETS));
  const tpot = n.requestTpot ? hist(n.requestTpot, 'Histogram of time_per_output_token_seconds per request.', ITL_BUCKETS) : undefined;
  const e2e = hist(n.e2e, 'Histogram of end to end request latency in seconds.', E2E_BUCKETS);
  const queue = hist(n.queue, 'Histogram of time spent in WAITING phase for request.', TTFT_BUCKETS);
  const prefill = n.prefill ? hist(n.prefill.name, 'Histogram of time spent in PREFILL phase for request.', n.prefill.buckets) : undefined;
  const success = n.success.finishedReason
    ? new Counter({
        name: n.success.name,
        help: 'Count of successfully processed requests.',
        labelNames: ['model_name', 'engine', 'finished_reason'],
        registers: [registry],
      })
    : undefined;

  const observers = engines.map((_, rank): EngineObserver => {
    const labels = engineLabels(rank);
    const ttftR = ttft.labels(labels);
    const queueR = queue.labels(labels);
    const prefillR = prefill?.labels(labels);
    const itlR = itl.map((h) => h.labels(labels));
    const tpotR = tpot?.labels(labels);
    const e2eR = e2e.labels(labels);
    return {
      firstToken(ttftS, queueS, prefillS) {
        ttftR.observe(ttftS);
        queueR.observe(queueS);
        prefillR?.observe(prefillS);
      },
      token(itlS) {
        for (const h of itlR) h.observe(itlS);
      },
      finish(e2eS, reason, tpotS) {
        e2eR.observe(e2eS);
        if (tpotS !== undefined) tpotR?.observe(tpotS);
        success?.inc({ ...labels, finished_reason: reason });
      },
    };
  });
  return { registry, engine: (rank) => observers[rank] as EngineObserver };
}
