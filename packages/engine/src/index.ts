export { Engine } from './engine.js';
export type { EngineListener, EngineOptions, EngineStats, LoraInfo } from './engine.js';
export { Sequence } from './sequence.js';
export type { EngineRequest, RejectReason, SequenceState } from './sequence.js';
export { ENGINE_MODES, PRESETS, PRESET_NAMES, engineConfig, validateConfig } from './config.js';
export type { EngineConfig, EngineMode, LatencyProfile, PresetName } from './config.js';
export { Rng } from './rng.js';
export { blockHashes, hashBlock, hashString } from './hash.js';
export { CHARS_PER_TOKEN, countTokens, textBlockHashes, tokenize } from './tokenizer.js';
