import type { Engine, MetricsEvent } from '@spillway/events';
import { ExpositionError, type Exposition, type Sample } from './exposition.js';

/** The engine-independent part of a metrics event: what one scrape of one model server says. */
export type EngineSample = Pick<MetricsEvent, 'waitingRequests' | 'runningRequests' | 'kvCacheUsage' | 'lora' | 'cache'>;

/** A metric family, optionally narrowed to the series whose labels have these values. */
export interface Series {
  readonly name: string;
  readonly match?: Readonly<Record<string, string>>;
}

/**
 * Where one engine keeps each signal (the metric names each engine exports, as the Gateway API
 * Inference Extension's EPP, now in llm-d and called the reference EPP below, reads them).
 * `kv` lists names in order of preference (vLLM renamed its gauge in v0.10).
 */
interface EngineSpec {
  readonly engine: Engine;
  readonly waiting: Series;
  readonly running: Series;
  readonly kv: readonly Series[];
  /** vLLM's `lora_requests_info`: newest series wins, adapters in labels. */
  readonly lora?: Series;
  readonly cache:
    | { readonly kind: 'labels'; readonly series: Series; readonly blockSize: string; readonly numBlocks: string }
    | { readonly kind: 'gauges'; readonly blockSize: Series; readonly numBlocks: Series };
}

export const ENGINE_SPECS: Readonly<Record<Engine, EngineSpec>> = {
  vllm: {
    engine: 'vllm',
    waiting: { name: 'vllm:num_requests_waiting' },
    running: { name: 'vllm:num_requests_running' },
    kv: [{ name: 'vllm:kv_cache_usage_perc' }, { name: 'vllm:gpu_cache_usage_perc' }],
    lora: { name: 'vllm:lora_requests_info' },
    cache: { kind: 'labels', series: { name: 'vllm:cache_config_info' }, blockSize: 'block_size', numBlocks: 'num_gpu_blocks' },
  },
  sglang: {
    engine: 'sglang',
    waiting: { name: 'sglang:num_queue_reqs' },
    running: { name: 'sglang:num_running_reqs' },
    kv: [{ name: 'sglang:token_usage' }],
    cache: { kind: 'labels', series: { name: 'sglang:cache_config_info' }, blockSize: 'page_size', numBlocks: 'num_pages' },
  },
  trtllm: {
    engine: 'trtllm',
    waiting: { name: 'trtllm_num_requests_waiting' },
    running: { name: 'trtllm_num_requests_running' },
    kv: [{ name: 'trtllm_kv_cache_utilization' }],
    cache: { kind: 'gauges', blockSize: { name: 'trtllm_kv_cache_tokens_per_block' }, numBlocks: { name: 'trtllm_kv_cache_max_blocks' } },
  },
  triton: {
    engine: 'triton',
    waiting: { name: 'nv_trt_llm_request_metrics', match: { request_type: 'waiting' } },
    running: { name: 'nv_trt_llm_request_metrics', match: { request_type: 'scheduled' } },
    kv: [{ name: 'nv_trt_llm_kv_cache_block_metrics', match: { kv_cache_block_type: 'fraction' } }],
    cache: {
      kind: 'gauges',
      blockSize: { name: 'nv_trt_llm_kv_cache_block_metrics', match: { kv_cache_block_type: 'tokens_per' } },
      numBlocks: { name: 'nv_trt_llm_kv_cache_block_metrics', match: { kv_cache_block_type: 'max' } },
    },
  },
};

/** The metric families the gauge mapping of `spec` reads. */
export function gaugeFamilies(spec: EngineSpec): string[] {
  const all: Series[] = [spec.waiting, spec.running, ...spec.kv];
  if (spec.lora) all.push(spec.lora);
  if (spec.cache.kind === 'labels') all.push(spec.cache.series);
  else all.push(spec.cache.blockSize, spec.cache.numBlocks);
  return [...new Set(all.map((s) => s.name))];
}

/**
 * Guesses the engine from the text of an exposition: the first engine whose waiting-queue family
 * appears. Works on raw text so it costs one substring search per engine, before any parsing.
 */
export function detectEngine(text: string): Engine | undefined {
  for (const spec of Object.values(ENGINE_SPECS)) {
    if (text.includes(`${spec.waiting.name}{`) || text.includes(`${spec.waiting.name} `)) return spec.engine;
  }
  return undefined;
}

/**
 * The samples of `series.name` whose labels match `series.match`. As in PromQL, a label a sample
 * lacks equals "": `{ cache_source: '' }` matches the series without that label.
 */
export function matching(exposition: Exposition, series: Series): readonly Sample[] {
  const samples = exposition.get(series.name) ?? [];
  const match = series.match;
  if (!match) return samples;
  return samples.filter((s) => Object.entries(match).every(([k, v]) => (s.labels[k] ?? '') === v));
}

/**
 * A request count. Data-parallel servers export one series per engine rank; the pod's count is
 * their sum. Fractional values are truncated as the reference EPP does; NaN, ±Inf or negative
 * values make the exposition malformed.
 */
function count(exposition: Exposition, series: Series): number {
  const samples = matching(exposition, series);
  if (samples.length === 0) throw new ExpositionError(`missing ${describe(series)}`);
  let total = 0;
  for (const s of samples) {
    if (!Number.isFinite(s.value) || s.value < 0) throw new ExpositionError(`${describe(series)} = ${s.value} is not a count`);
    total += Math.trunc(s.value);
  }
  return total;
}

/** KV-cache use as a fraction; the mean over engine ranks (equal-sized ranks: the pod's share). */
function fraction(exposition: Exposition, candidates: readonly Series[]): number {
  for (const series of candidates) {
    const samples = matching(exposition, series);
    if (samples.length === 0) continue;
    let sum = 0;
    for (const s of samples) {
      if (!(s.value >= 0 && s.value <= 1)) throw new ExpositionError(`${describe(series)} = ${s.value} is outside 0..1`);
      sum += s.value;
    }
    return sum / samples.length;
  }
  throw new ExpositionError(`missing ${candidates.map(describe).join(' or ')}`);
}

export function describe(series: Series): string {
  const match = series.match
    ? `{${Object.entries(series.match)
        .map(([k, v]) => `${k}="${v}"`)
        .join(',')}}`
    : '';
  return `${series.name}${match}`;
}

function adapterList(text: string | undefined): string[] {
  return (text ?? '')
    .split(',')
    .map((name) => name.trim())
    .filter((name) => name.length > 0);
}

const INTEGER = /^\d+$/;

/**
 * vLLM's LoRA gauge: one series per state change, valued with its creation time, so the series
 * with the largest value is the current state (as the reference EPP reads it).
 */
function lora(exposition: Exposition, series: Series): EngineSample['lora'] {
  const samples = matching(exposition, series);
  let newest: Sample | undefined;
  for (const s of samples) if (newest === undefined || s.value > newest.value) newest = s;
  if (!newest) return undefined;
  const max = newest.labels['max_lora'];
  if (max === undefined || !INTEGER.test(max))
    throw new ExpositionError(`${series.name}: max_lora ${JSON.stringify(max ?? '')} is not an integer`);
  return {
    running: adapterList(newest.labels['running_lora_adapters']),
    waiting: adapterList(newest.labels['waiting_lora_adapters']),
    max: Number(max),
  };
}

/**
 * Block size and pool size. Optional: an engine still profiling reports `num_gpu_blocks="None"`,
 * and that must not cost the pod its queue and KV signals, so unreadable values leave it out.
 */
function cache(exposition: Exposition, spec: EngineSpec['cache']): EngineSample['cache'] {
  let blockSize: number | undefined;
  let numBlocks: number | undefined;
  if (spec.kind === 'labels') {
    const first = matching(exposition, spec.series)[0];
    const size = first?.labels[spec.blockSize];
    const blocks = first?.labels[spec.numBlocks];
    if (size !== undefined && INTEGER.test(size)) blockSize = Number(size);
    if (blocks !== undefined && INTEGER.test(blocks)) numBlocks = Number(blocks);
  } else {
    const size = matching(exposition, spec.blockSize)[0]?.value;
    const blocks = matching(exposition, spec.numBlocks).reduce((sum, s) => sum + s.value, 0);
    if (size !== undefined && Number.isInteger(size)) blockSize = size;
    if (matching(exposition, spec.numBlocks).length > 0 && Number.isInteger(blocks)) numBlocks = blocks;
  }
  if (blockSize === undefined || numBlocks === undefined || blockSize < 1 || numBlocks < 0) return undefined;
  return { blockSize, numBlocks };
}

/**
 * Maps a parsed exposition to the engine-independent sample. Throws ExpositionError when a
 * required gauge is missing or a value is out of range; such a scrape is never published.
 */
export function mapExposition(engine: Engine, exposition: Exposition): EngineSample {
  const spec = ENGINE_SPECS[engine];
  const sample: EngineSample = {
    waitingRequests: count(exposition, spec.waiting),
    runningRequests: count(exposition, spec.running),
    kvCacheUsage: fraction(exposition, spec.kv),
  };
  const loraState = spec.lora ? lora(exposition, spec.lora) : undefined;
  if (loraState) sample.lora = loraState;
  const cacheState = cache(exposition, spec.cache);
  if (cacheState) sample.cache = cacheState;
  return sample;
}
