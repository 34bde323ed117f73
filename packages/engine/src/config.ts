/**
 * Engine configuration and calibration presets. All times are milliseconds.
 *
 * Two timing modes share one batch, KV and prefix-cache model:
 * - `closed-form`: per-request formulas (llm-d-inference-sim's latency profiles: prefill overhead +
 *   per-token cost, inter-token latency, a linear slowdown with the batch size). Cheap and simple,
 *   but every prefill runs alone and in parallel with the batch, so a cache miss never slows its
 *   neighbours.
 * - `step`: vLLM-style continuous batching. Each engine step computes at most
 *   `maxNumBatchedTokens` tokens: one per running decode, the rest chunks of waiting prefills; it
 *   takes `stepOverheadMs + stepPerTokenMs × tokens + stepPerContextTokenMs × context +
 *   stepPerAttentionPairMs × pairs` where context is the KV the step's sequences attend to and
 *   pairs the (query, key) pairs of its prefill chunks' causal attention. A long uncached prompt
 *   therefore stretches the steps every batch-mate is waiting on, as in vLLM, and prefill
 *   throughput falls as prompts grow (about −40 % at 32k tokens on the 8B presets).
 * The step constants of each preset are calibrated against published vLLM measurements; the
 * sources and the figures reproduced are in the package README and pinned by a test.
 */
export type EngineMode = 'closed-form' | 'step';

export const ENGINE_MODES: readonly EngineMode[] = ['closed-form', 'step'];

export interface LatencyProfile {
  /** Fixed cost of a prefill, before per-token work (closed form). */
  readonly prefillOverheadMs: number;
  /** Cost of each prompt token not found in the prefix cache (closed form). */
  readonly prefillPerTokenMs: number;
  /** Inter-token latency of decode at batch size 1 (closed form). */
  readonly interTokenMs: number;
  /** F in loadFactor = 1 + (F − 1)·(running − 1)/(maxNumSeqs − 1): slowdown of a full batch (closed form). */
  readonly loadFactor: number;
  /** Standard deviation of multiplicative jitter as a fraction of the mean (0 = none, ≤ 0.3). */
  readonly jitter: number;
  /** Token budget of one step: decodes plus prefill chunks (step mode; vLLM's max_num_batched_tokens). */
  readonly maxNumBatchedTokens: number;
  /** Fixed cost of a step: reading the weights once, kernel launches, the scheduler (step mode). */
  readonly stepOverheadMs: number;
  /** Cost of each token the step computes, prefill or decode (step mode). */
  readonly stepPerTokenMs: number;
  /** Cost of each token of KV the step's sequences attend to (step mode). */
  readonly stepPerContextTokenMs: number;
  /**
   * Cost of each (prompt token, earlier token) pair a prefill chunk's attention computes (step
   * mode): the term that grows with the square of the prompt, so prefill slows on long prompts.
   */
  readonly stepPerAttentionPairMs: number;
}

export interface EngineConfig extends LatencyProfile {
  readonly mode: EngineMode;
  readonly maxNumSeqs: number;
  /** KV-cache pool size in blocks. */
  readonly numBlocks: number;
  /** Tokens per KV block. */
  readonly blockSize: number;
  /** Distinct LoRA adapters that may run at once (0 = LoRA disabled). */
  readonly maxLoras: number;
  /** Waiting requests beyond this are rejected. */
  readonly maxWaiting: number;
  /** Seed of the jitter RNG. */
  readonly seed: number;
}

const common = {
  mode: 'closed-form',
  blockSize: 16,
  maxLoras: 4,
  maxWaiting: 1000,
  seed: 1,
  jitter: 0.1,
  maxNumBatchedTokens: 8192,
} as const;

export const PRESETS = {
  // Llama-3-8B BF16 on one H100 80GB: ~128 KB of KV per token; ~60 GB free ≈ 28k blocks.
  // Step mode calibrated in the README (vLLM PR #4600 and LambdaLabsML/vllm-benchmark).
  'llama-8b-h100': {
    ...common,
    prefillOverheadMs: 32,
    prefillPerTokenMs: 0.22,
    interTokenMs: 12,
    loadFactor: 2,
    stepOverheadMs: 6.5,
    stepPerTokenMs: 0.04,
    stepPerContextTokenMs: 0.00004,
    stepPerAttentionPairMs: 1.75e-6,
    maxNumSeqs: 256,
    numBlocks: 28_000,
  },
  // Llama-3-8B BF16 on one A100 80GB (calibrated: LambdaLabsML/vllm-benchmark).
  'llama-8b-a100': {
    ...common,
    prefillOverheadMs: 32,
    prefillPerTokenMs: 0.42,
    interTokenMs: 20,
    loadFactor: 2,
    stepOverheadMs: 11,
    stepPerTokenMs: 0.085,
    stepPerContextTokenMs: 0.000064,
    stepPerAttentionPairMs: 3.72e-6,
    maxNumSeqs: 256,
    numBlocks: 26_000,
  },
  // Qwen3-32B TP2: measured 307k–461k tokens per pod on llm-d. Step constants scaled from the 8B
  // H100 calibration (4× the weights and FLOPs per token over 2 GPUs), not fitted to a published run.
  'qwen-32b-tp2-h100': {
    ...common,
    prefillOverheadMs: 65,
    prefillPerTokenMs: 0.4,
    interTokenMs: 25,
    loadFactor: 2.5,
    stepOverheadMs: 12,
    stepPerTokenMs: 0.09,
    stepPerContextTokenMs: 0.00004,
    stepPerAttentionPairMs: 2.41e-6,
    maxNumSeqs: 256,
    numBlocks: 24_000,
  },
  // Llama-3-70B TP4: ~320 KB/token, ~150 GB free over four GPUs ≈ 470k tokens. Step constants
  // scaled like the 32B preset (8.75× the 8B's work over 4 GPUs), not fitted to a published run.
  'llama-70b-tp4-h100': {
    ...common,
    prefillOverheadMs: 90,
    prefillPerTokenMs: 0.75,
    interTokenMs: 32,
    loadFactor: 2.5,
    stepOverheadMs: 14,
    stepPerTokenMs: 0.1,
    stepPerContextTokenMs: 0.000025,
    stepPerAttentionPairMs: 2.5e-6,
    maxNumSeqs: 256,
    numBlocks: 29_000,
  },
  // Small and jitter-free, so tests can reason about exact timings and fill the cache quickly.
  test: {
    ...common,
    prefillOverheadMs: 10,
    prefillPerTokenMs: 0.1,
    interTokenMs: 5,
    loadFactor: 2,
    maxNumBatchedTokens: 64,
    stepOverheadMs: 5,
    stepPerTokenMs: 0.1,
    stepPerContextTokenMs: 0.001,
    // No attention term: the step tests reason about exact step times.
    stepPerAttentionPairMs: 0,
    maxNumSeqs: 4,
    numBlocks: 64,
    maxLoras: 2,
    maxWaiting: 16,
    jitter: 0,
  },
} as const satisfies Record<string, EngineConfig>;

export type PresetName = keyof typeof PRESETS;

export const PRESET_NAMES = Object.keys(PRESETS) as PresetName[];

/** A preset with some fields replaced; throws on values the engine cannot run with. */
export function engineConfig(preset: PresetName = 'llama-8b-h100', overrides: Partial<EngineConfig> = {}): EngineConfig {
  const cfg: EngineConfig = { ...PRESETS[preset], ...stripUndefined(overrides) };
  validateConfig(cfg);
  return cfg;
}

function stripUndefined<T extends object>(o: T): Partial<T> {
  return Object.fromEntries(Object.entries(o).filter(([, v]) => v !== undefined)) as Partial<T>;
}

export function validateConfig(cfg: EngineConfig): void {
  if (!ENGINE_MODES.includes(cfg.mode))
    throw new RangeError(`engine config: mode must be one of ${ENGINE_MODES.join(', ')}, got ${String(cfg.mode)}`);
  const positiveInts = ['maxNumSeqs', 'numBlocks', 'blockSize', 'maxNumBatchedTokens'] as const;
  for (const k of positiveInts) {
    if (!Number.isInteger(cfg[k]) || cfg[k] < 1) throw new RangeError(`engine config: ${k} must be an integer >= 1, got ${cfg[k]}`);
  }
  for (const k of ['maxLoras', 'maxWaiting'] as const) {
    if (!Number.isInteger(cfg[k]) || cfg[k] < 0) throw new RangeError(`engine config: ${k} must be an integer >= 0, got ${cfg[k]}`);
  }
  for (const k of [
    'prefillOverheadMs',
    'prefillPerTokenMs',
    'interTokenMs',
    'stepOverheadMs',
    'stepPerTokenMs',
    'stepPerContextTokenMs',
    'stepPerAttentionPairMs',
  ] as const) {
    if (!Number.isFinite(cfg[k]) || cfg[k] < 0) throw new RangeError(`engine config: ${k} must be >= 0, got ${cfg[k]}`);
  }
  if (cfg.mode === 'step' && cfg.stepOverheadMs + cfg.stepPerTokenMs <= 0) {
    throw new RangeError('engine config: stepOverheadMs + stepPerTokenMs must be > 0 in step mode (a step must take time)');
  }
  // vLLM requires this too: otherwise some running decodes could never be scheduled.
  if (cfg.mode === 'step' && cfg.maxNumBatchedTokens < cfg.maxNumSeqs) {
    throw new RangeError(
      `engine config: maxNumBatchedTokens (${cfg.maxNumBatchedTokens}) must be >= maxNumSeqs (${cfg.maxNumSeqs}) in step mode`,
    );
  }
  if (!Number.isFinite(cfg.loadFactor) || cfg.loadFactor < 1)
    throw new RangeError(`engine config: loadFactor must be >= 1, got ${cfg.loadFactor}`);
  if (!(cfg.jitter >= 0 && cfg.jitter <= 0.3)) throw new RangeError(`engine config: jitter must be in [0, 0.3], got ${cfg.jitter}`);
  if (!Number.isFinite(cfg.seed)) throw new RangeError(`engine config: seed must be a number, got ${cfg.seed}`);
}
