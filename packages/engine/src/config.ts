/**
 * Engine configuration and calibration presets. Latency numbers are the middle of the ranges in
 * llm-d-inference-sim's latency profiles (FP16, batch 1); see shared/reference/landscape.md §(d).
 * All times are milliseconds.
 */
export interface LatencyProfile {
  /** Fixed cost of a prefill, before per-token work. */
  readonly prefillOverheadMs: number;
  /** Cost of each prompt token not found in the prefix cache. */
  readonly prefillPerTokenMs: number;
  /** Inter-token latency of decode at batch size 1. */
  readonly interTokenMs: number;
  /** F in loadFactor = 1 + (F − 1)·(running − 1)/(maxNumSeqs − 1): slowdown of a full batch. */
  readonly loadFactor: number;
  /** Standard deviation of multiplicative jitter as a fraction of the mean (0 = none, ≤ 0.3). */
  readonly jitter: number;
}

export interface EngineConfig extends LatencyProfile {
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

const common = { blockSize: 16, maxLoras: 4, maxWaiting: 1000, seed: 1, jitter: 0.1 } as const;

export const PRESETS = {
  // Llama-3-8B: ~128 KB of KV per token; ~60 GB free on an 80 GB GPU ≈ 28k blocks.
  'llama-8b-h100': {
    ...common, prefillOverheadMs: 32, prefillPerTokenMs: 0.22, interTokenMs: 12, loadFactor: 2,
    maxNumSeqs: 256, numBlocks: 28_000,
  },
  'llama-8b-a100': {
    ...common, prefillOverheadMs: 32, prefillPerTokenMs: 0.42, interTokenMs: 20, loadFactor: 2,
    maxNumSeqs: 256, numBlocks: 26_000,
  },
  // Qwen3-32B TP2: measured 307k–461k tokens per pod on llm-d.
  'qwen-32b-tp2-h100': {
    ...common, prefillOverheadMs: 65, prefillPerTokenMs: 0.4, interTokenMs: 25, loadFactor: 2.5,
    maxNumSeqs: 256, numBlocks: 24_000,
  },
  // Llama-3-70B TP4: ~320 KB/token, ~150 GB free over four GPUs ≈ 470k tokens.
  'llama-70b-tp4-h100': {
    ...common, prefillOverheadMs: 90, prefillPerTokenMs: 0.75, interTokenMs: 32, loadFactor: 2.5,
    maxNumSeqs: 256, numBlocks: 29_000,
  },
  // Small and jitter-free, so tests can reason about exact timings and fill the cache quickly.
  test: {
    ...common, prefillOverheadMs: 10, prefillPerTokenMs: 0.1, interTokenMs: 5, loadFactor: 2,
    maxNumSeqs: 4, numBlocks: 64, maxLoras: 2, maxWaiting: 16, jitter: 0,
  },
} as const satisfies Record<string, EngineConfig>;

export type PresetName = keyof typeof PRESETS;

export const PRESET_NAMES = Object.keys(PRESETS) as PresetName[];

export function isPresetName(name: string): name is PresetName {
  return Object.hasOwn(PRESETS, name);
}

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
  const positiveInts = ['maxNumSeqs', 'numBlocks', 'blockSize'] as const;
  for (const k of positiveInts) {
    if (!Number.isInteger(cfg[k]) || cfg[k] < 1) throw new RangeError(`engine config: ${k} must be an integer >= 1, got ${cfg[k]}`);
  }
  for (const k of ['maxLoras', 'maxWaiting'] as const) {
    if (!Number.isInteger(cfg[k]) || cfg[k] < 0) throw new RangeError(`engine config: ${k} must be an integer >= 0, got ${cfg[k]}`);
  }
  for (const k of ['prefillOverheadMs', 'prefillPerTokenMs', 'interTokenMs'] as const) {
    if (!Number.isFinite(cfg[k]) || cfg[k] < 0) throw new RangeError(`engine config: ${k} must be >= 0, got ${cfg[k]}`);
  }
  if (!Number.isFinite(cfg.loadFactor) || cfg.loadFactor < 1) throw new RangeError(`engine config: loadFactor must be >= 1, got ${cfg.loadFactor}`);
  if (!(cfg.jitter >= 0 && cfg.jitter <= 0.3)) throw new RangeError(`engine config: jitter must be in [0, 0.3], got ${cfg.jitter}`);
  if (!Number.isFinite(cfg.seed)) throw new RangeError(`engine config: seed must be a number, got ${cfg.seed}`);
}
