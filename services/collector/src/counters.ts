import type { Counters, Engine, Moments } from '@spillway/events';
import { describe, matching, type Series } from './engines.js';
import type { Exposition } from './exposition.js';

/**
 * The cumulative counters a model server exposes, read at one scrape: what service rates are
 * computed from (`rates.ts`). Each field is absent when the server does not expose it.
 */
/** A histogram read through its `_sum` and `_count` series; `msPerUnit` converts the sum. */
interface HistogramSeries {
  readonly name: string;
  readonly msPerUnit: number;
  /** Its `_sum` and `_count` series, named once here rather than on every scrape. */
  readonly sum: Series;
  readonly count: Series;
}

/**
 * Where each engine keeps the counters; each field lists alternatives in order of preference
 * (the first one present is read). Sources, checked against each project's code:
 * - vLLM: `vllm/v1/metrics/loggers.py` (the v1 engine, `PrometheusStatLogger`; one series per
 *   data-parallel engine, label `engine`). Renames followed: `time_per_output_token_seconds` is
 *   the pre-0.10 name of `inter_token_latency_seconds` (today `request_time_per_output_token_seconds`
 *   is a per-request mean, not read); `gpu_prefix_cache_queries`/`_hits` became
 *   `prefix_cache_queries`/`_hits` (token counts, `_total` in the exposition).
 *   `request_prefill_time_seconds` is observed when a request finishes: its first token's time
 *   minus when it was first scheduled (preemptions included).
 * - SGLang: `python/sglang/srt/metrics/collector.py` (TokenizerMetricsCollector: counters bumped
 *   when a request finishes; `cached_tokens_total` is only created at the first hit, so the hit
 *   rate is left out until then; SchedulerMetricsCollector: `queue_time_seconds`; older releases
 *   named the ITL histogram `time_per_output_token_seconds`). Since HiCache's cache-hit breakdown
 *   (2026), `cached_tokens_total` has one series per tier, label `cache_source`: `device` (the
 *   GPU's radix cache), `host` (HiCache's CPU memory), `storage_<backend>` (its L3 store). Only
 *   `device` is a prefix hit here: the others are loads the request waited for (docs/events.md).
 *   Releases before the label count every tier in one series, read as it is. No prefill time:
 *   SGLang's only per-request stage timing, `per_stage_req_latency_seconds{stage}`, times the
 *   stages of prefill/decode disaggregation (bootstrap, waiting, forward, transfer), not a
 *   request's scheduled → first token, so `prefill` is left out for SGLang.
 * - TensorRT-LLM `trtllm-serve` (served on `/prometheus/metrics`: set `--metrics-path`):
 *   `tensorrt_llm/metrics/collector.py`, prefix `trtllm_`; its per-output-token histogram is
 *   observed once per request (a per-request mean); prefix reuse is counted in tokens
 *   (`prompt_cached_tokens_total`, newer releases) or, before that, in KV blocks reused and missed.
 *   Newer releases also observe `request_prefill_time_seconds` (first token − first scheduled, at
 *   the request's end); older ones have none, and `prefill` is left out.
 * - Triton with the TensorRT-LLM backend: only token-length histograms
 *   (`inflight_batcher_llm/src/custom_metrics_reporter` in triton-inference-server/tensorrtllm_backend):
 *   their `_sum` counts tokens and `_count` requests. Triton has no TTFT, ITL or prefix counters
 *   for it (its queue time is per model of an ensemble, not per request), so those are left out,
 *   and so is prefill time.
 */
interface CounterSpec {
  readonly promptTokens: readonly Series[];
  readonly generationTokens: readonly Series[];
  readonly requests: readonly Series[];
  readonly ttft: readonly HistogramSeries[];
  readonly queue: readonly HistogramSeries[];
  readonly itl: readonly HistogramSeries[];
  /** Prefill time per request (scheduled → first token); empty where the engine exports none. */
  readonly prefill: readonly HistogramSeries[];
  /** Prefix-cache hits with what they are out of: lookups, or (when only misses are counted) hits + misses; the first whose hits are present is read. */
  readonly prefix: readonly PrefixSource[];
}

type PrefixSource = { readonly hits: Series; readonly queries: Series } | { readonly hits: Series; readonly misses: Series };

const seconds = (name: string): HistogramSeries => ({
  name,
  msPerUnit: 1000,
  sum: { name: `${name}_sum` },
  count: { name: `${name}_count` },
});
const one = (name: string, match?: Record<string, string>): Series[] => [match ? { name, match } : { name }];

export const COUNTER_SPECS: Readonly<Record<Engine, CounterSpec>> = {
  vllm: {
    promptTokens: one('vllm:prompt_tokens_total'),
    generationTokens: one('vllm:generation_tokens_total'),
    requests: [{ name: 'vllm:request_success_total' }, { name: 'vllm:e2e_request_latency_seconds_count' }],
    ttft: [seconds('vllm:time_to_first_token_seconds')],
    queue: [seconds('vllm:request_queue_time_seconds')],
    itl: [seconds('vllm:inter_token_latency_seconds'), seconds('vllm:time_per_output_token_seconds')],
    prefill: [seconds('vllm:request_prefill_time_seconds')],
    prefix: [
      { hits: { name: 'vllm:prefix_cache_hits_total' }, queries: { name: 'vllm:prefix_cache_queries_total' } },
      { hits: { name: 'vllm:gpu_prefix_cache_hits_total' }, queries: { name: 'vllm:gpu_prefix_cache_queries_total' } },
    ],
  },
  sglang: {
    promptTokens: one('sglang:prompt_tokens_total'),
    generationTokens: one('sglang:generation_tokens_total'),
    requests: [{ name: 'sglang:num_requests_total' }, { name: 'sglang:e2e_request_latency_seconds_count' }],
    ttft: [seconds('sglang:time_to_first_token_seconds')],
    queue: [seconds('sglang:queue_time_seconds')],
    itl: [seconds('sglang:inter_token_latency_seconds'), seconds('sglang:time_per_output_token_seconds')],
    prefill: [],
    prefix: [
      { hits: { name: 'sglang:cached_tokens_total', match: { cache_source: 'device' } }, queries: { name: 'sglang:prompt_tokens_total' } },
      { hits: { name: 'sglang:cached_tokens_total', match: { cache_source: '' } }, queries: { name: 'sglang:prompt_tokens_total' } },
    ],
  },
  trtllm: {
    promptTokens: one('trtllm_prompt_tokens_total'),
    generationTokens: one('trtllm_generation_tokens_total'),
    requests: [{ name: 'trtllm_request_success_total' }, { name: 'trtllm_e2e_request_latency_seconds_count' }],
    ttft: [seconds('trtllm_time_to_first_token_seconds')],
    queue: [seconds('trtllm_request_queue_time_seconds')],
    itl: [seconds('trtllm_time_per_output_token_seconds')],
    prefill: [seconds('trtllm_request_prefill_time_seconds')],
    prefix: [
      { hits: { name: 'trtllm_prompt_cached_tokens_total' }, queries: { name: 'trtllm_prompt_tokens_total' } },
      { hits: { name: 'trtllm_kv_cache_reused_blocks_total' }, misses: { name: 'trtllm_kv_cache_missed_blocks_total' } },
    ],
  },
  triton: {
    promptTokens: one('nv_llm_input_token_len_sum', { response_metric_type: 'total_input_tokens' }),
    generationTokens: one('nv_llm_output_token_len_sum', { response_metric_type: 'total_output_tokens' }),
    requests: one('nv_llm_output_token_len_count', { response_metric_type: 'total_output_tokens' }),
    ttft: [],
    queue: [],
    itl: [],
    prefill: [],
    prefix: [],
  },
};

/** The metric families the counters of `spec` are read from (histograms by their `_sum`/`_count`). */
export function counterFamilies(spec: CounterSpec): string[] {
  const histograms = [...spec.ttft, ...spec.queue, ...spec.itl, ...spec.prefill].flatMap((h) => [h.sum.name, h.count.name]);
  const series = [
    ...spec.promptTokens,
    ...spec.generationTokens,
    ...spec.requests,
    ...spec.prefix.flatMap((p) => ('queries' in p ? [p.hits, p.queries] : [p.hits, p.misses])),
  ];
  return [...new Set([...series.map((s) => s.name), ...histograms])];
}

/** What reading the counters of one exposition gave, and which series were unusable. */
export interface CounterReading {
  counters: Counters;
  /** Series present but holding a value that is not a count (NaN, ±Inf, negative). */
  invalid: string[];
}

/**
 * Reads an engine's counters. Data-parallel ranks and label splits (`finished_reason`) are summed.
 * A missing family leaves its field out; so does a bad value (NaN, ±Inf, negative), which is also
 * reported in `invalid`: rates are an optional extra and never cost the pod its gauges.
 */
export function readCounters(engine: Engine, exposition: Exposition): CounterReading {
  const spec = COUNTER_SPECS[engine];
  const invalid: string[] = [];
  const total = (alternatives: readonly Series[]): number | undefined => {
    for (const series of alternatives) {
      const samples = matching(exposition, series);
      if (samples.length === 0) continue;
      let sum = 0;
      for (const s of samples) {
        if (!Number.isFinite(s.value) || s.value < 0) {
          invalid.push(describe(series));
          return undefined;
        }
        sum += s.value;
      }
      return sum;
    }
    return undefined;
  };
  const moments = (alternatives: readonly HistogramSeries[]): Moments | undefined => {
    for (const h of alternatives) {
      const sum = total([h.sum]);
      const count = total([h.count]);
      if (sum !== undefined && count !== undefined) return { sumMs: sum * h.msPerUnit, count };
    }
    return undefined;
  };
  const counters: Counters = {};
  const set = <K extends keyof Counters>(key: K, value: Counters[K] | undefined): void => {
    if (value !== undefined) counters[key] = value;
  };
  set('promptTokens', total(spec.promptTokens));
  set('generationTokens', total(spec.generationTokens));
  set('requests', total(spec.requests));
  set('ttft', moments(spec.ttft));
  set('queue', moments(spec.queue));
  set('itl', moments(spec.itl));
  set('prefill', moments(spec.prefill));
  for (const source of spec.prefix) {
    const hits = total([source.hits]);
    if (hits === undefined) continue;
    set('prefixHits', hits);
    if ('queries' in source) set('prefixQueries', total([source.queries]));
    else {
      const misses = total([source.misses]);
      set('prefixQueries', misses === undefined ? undefined : hits + misses);
    }
    break;
  }
  return { counters, invalid };
}
