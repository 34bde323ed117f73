import type { Engine, EngineStats, LoraInfo } from '@spillway/engine';
import { Counter, Gauge, Histogram, Registry } from 'prom-client';
import type { MetricsFlavor } from './options.js';

/** What the metrics read at scrape time. */
export interface MetricsSource {
  stats(): EngineStats;
  loraInfo(): LoraInfo;
}

/** Observations pushed as requests progress; times in seconds of model time (before --time-scale). */
export interface SimMetrics {
  readonly registry: Registry;
  firstToken(ttftS: number, queueS: number): void;
  token(itlS: number): void;
  finish(e2eS: number, reason: string): void;
}

// vLLM's own buckets (vllm/v1/metrics/loggers.py), so dashboards built for vLLM read the same.
const TTFT_BUCKETS = [0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10, 20, 40, 80, 160, 640, 2560];
const ITL_BUCKETS = [0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1, 2.5, 5, 7.5, 10, 20, 40, 80];
const E2E_BUCKETS = [0.3, 0.5, 0.8, 1, 1.5, 2, 2.5, 5, 10, 15, 20, 30, 40, 50, 60, 120, 240, 480, 960, 1920, 7680];

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
  e2e: string;
  queue: string;
  promptTokens: string;
  generationTokens: string;
  /** Completed requests: a counter with `finished_reason` (vLLM, TensorRT-LLM) or a plain one mirrored from the engine (SGLang). */
  success: { name: string; finishedReason: boolean };
  /** Prefix-cache hits and lookups, in tokens (vLLM, SGLang: lookups are the prompt tokens) or KV blocks (TensorRT-LLM: hits and misses). */
  prefix: { kind: 'tokens'; hits: string; queries?: string } | { kind: 'blocks'; hits: string; misses: string };
  preemptions?: string;
}

const NAMES: Record<MetricsFlavor, Names> = {
  vllm: {
    waiting: 'vllm:num_requests_waiting',
    running: 'vllm:num_requests_running',
    // The old name is still read by older scrapers (deprecated in vLLM 0.10).
    kvUsage: ['vllm:kv_cache_usage_perc', 'vllm:gpu_cache_usage_perc'],
    ttft: 'vllm:time_to_first_token_seconds',
    itl: ['vllm:inter_token_latency_seconds', 'vllm:time_per_output_token_seconds'],
    e2e: 'vllm:e2e_request_latency_seconds',
    queue: 'vllm:request_queue_time_seconds',
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
    prefix: { kind: 'tokens', hits: 'sglang:cached_tokens_total' },
  },
  trtllm: {
    waiting: 'trtllm_num_requests_waiting',
    running: 'trtllm_num_requests_running',
    kvUsage: ['trtllm_kv_cache_utilization'],
    ttft: 'trtllm_time_to_first_token_seconds',
    itl: ['trtllm_time_per_output_token_seconds'],
    e2e: 'trtllm_e2e_request_latency_seconds',
    queue: 'trtllm_request_queue_time_seconds',
    promptTokens: 'trtllm_prompt_tokens_total',
    generationTokens: 'trtllm_generation_tokens_total',
    success: { name: 'trtllm_request_success_total', finishedReason: true },
    prefix: { kind: 'blocks', hits: 'trtllm_kv_cache_reused_blocks_total', misses: 'trtllm_kv_cache_missed_blocks_total' },
  },
};

/** A counter that mirrors an engine counter at scrape time (prom-client counters cannot be set). */
function mirroredCounter(registry: Registry, name: string, help: string, model: string, read: () => number): void {
  new Counter({
    name,
    help,
    labelNames: ['model_name', 'engine'],
    registers: [registry],
    collect() {
      this.reset();
      this.inc({ model_name: model, engine: '0' }, read());
    },
  });
}

function gauge(registry: Registry, name: string, help: string, labels: Record<string, string>, read: () => number): void {
  new Gauge({
    name,
    help,
    labelNames: Object.keys(labels),
    registers: [registry],
    collect() {
      this.set(labels, read());
    },
  });
}

export function createMetrics(flavor: MetricsFlavor, model: string, engine: Engine | MetricsSource): SimMetrics {
  const registry = new Registry();
  const n = NAMES[flavor];
  const labels = { model_name: model, engine: '0' };
  // One stats() per scrape would be nicer, but collect callbacks run independently; stats() is cheap.
  const stats = (): EngineStats => engine.stats();

  gauge(registry, n.waiting, 'Number of requests waiting to be processed.', labels, () => stats().waiting);
  gauge(registry, n.running, 'Number of requests in model execution batches.', labels, () => stats().running);
  for (const name of n.kvUsage) gauge(registry, name, 'KV-cache usage. 1 means 100 percent usage.', labels, () => stats().kvUsage);
  mirroredCounter(registry, n.promptTokens, 'Number of prefill tokens processed.', model, () => stats().promptTokens);
  mirroredCounter(registry, n.generationTokens, 'Number of generation tokens processed.', model, () => stats().generationTokens);
  if (n.prefix.kind === 'tokens') {
    mirroredCounter(
      registry,
      n.prefix.hits,
      'Prefix cache hits, in terms of number of cached tokens.',
      model,
      () => stats().prefixHitTokens,
    );
    if (n.prefix.queries)
      mirroredCounter(
        registry,
        n.prefix.queries,
        'Prefix cache queries, in terms of number of queried tokens.',
        model,
        () => stats().prefixQueryTokens,
      );
  } else {
    // Whole blocks of the looked-up prompt tokens, as TensorRT-LLM counts reuse.
    const { blockSize: size } = engine.stats();
    mirroredCounter(registry, n.prefix.hits, 'Cumulative number of KV cache blocks reused (cache hits)', model, () =>
      Math.floor(stats().prefixHitTokens / size),
    );
    mirroredCounter(
      registry,
      n.prefix.misses,
      'Cumulative number of KV cache blocks missed (cache misses)',
      model,
      () => Math.floor(stats().prefixQueryTokens / size) - Math.floor(stats().prefixHitTokens / size),
    );
  }
  if (!n.success.finishedReason) mirroredCounter(registry, n.success.name, 'Number of requests processed.', model, () => stats().finished);
  if (n.preemptions)
    mirroredCounter(registry, n.preemptions, 'Cumulative number of preemption from the engine.', model, () => stats().preemptions);

  const { blockSize, numBlocks } = engine.stats();
  if (flavor === 'vllm') {
    gauge(
      registry,
      'vllm:cache_config_info',
      'Information of the LLMEngine CacheConfig',
      {
        model_name: model,
        block_size: String(blockSize),
        num_gpu_blocks: String(numBlocks),
        enable_prefix_caching: 'True',
      },
      () => 1,
    );
    new Gauge({
      name: 'vllm:lora_requests_info',
      help: 'Running stats on lora requests.',
      labelNames: ['model_name', 'max_lora', 'running_lora_adapters', 'waiting_lora_adapters'],
      registers: [registry],
      collect() {
        // vLLM's value is the time of the last update; consumers pick the series with the largest value.
        const info = engine.loraInfo();
        this.reset();
        this.set(
          {
            model_name: model,
            max_lora: String(info.max),
            running_lora_adapters: info.running.join(','),
            waiting_lora_adapters: info.waiting.join(','),
          },
          Date.now() / 1000,
        );
      },
    });
  } else if (flavor === 'sglang') {
    gauge(
      registry,
      'sglang:cache_config_info',
      'Cache configuration.',
      {
        model_name: model,
        page_size: String(blockSize),
        num_pages: String(numBlocks),
      },
      () => 1,
    );
    gauge(registry, 'sglang:num_used_tokens', 'The number of used tokens.', { model_name: model }, () => stats().usedBlocks * blockSize);
  } else {
    gauge(registry, 'trtllm_kv_cache_tokens_per_block', 'Tokens per KV-cache block.', { model_name: model }, () => blockSize);
    gauge(registry, 'trtllm_kv_cache_max_blocks', 'Maximum KV-cache blocks.', { model_name: model }, () => numBlocks);
  }

  const hist = (name: string, help: string, buckets: number[]): Histogram<string> =>
    new Histogram({ name, help, buckets, labelNames: ['model_name', 'engine'], registers: [registry] });
  const ttft = hist(n.ttft, 'Histogram of time to first token in seconds.', TTFT_BUCKETS).labels(labels);
  const itl = n.itl.map((name) => hist(name, 'Histogram of inter-token latency in seconds.', ITL_BUCKETS).labels(labels));
  const e2e = hist(n.e2e, 'Histogram of end to end request latency in seconds.', E2E_BUCKETS).labels(labels);
  const queue = hist(n.queue, 'Histogram of time spent in WAITING phase for request.', TTFT_BUCKETS).labels(labels);
  const success = n.success.finishedReason
    ? new Counter({
        name: n.success.name,
        help: 'Count of successfully processed requests.',
        labelNames: ['model_name', 'engine', 'finished_reason'],
        registers: [registry],
      })
    : undefined;

  return {
    registry,
    firstToken(ttftS, queueS) {
      ttft.observe(ttftS);
      queue.observe(queueS);
    },
    token(itlS) {
      for (const h of itl) h.observe(itlS);
    },
    finish(e2eS, reason) {
      e2e.observe(e2eS);
      success?.inc({ ...labels, finished_reason: reason });
    },
  };
}
