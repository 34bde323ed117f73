export { DEFAULT_PIECE_CACHE_BYTES, loadTokenizer } from './load.js';
export type { LoadTokenizerOptions, PromptTokenizer } from './load.js';
export { ChatTemplate, messageText } from './chat.js';
export type { ChatMessage, DeferCheck } from './chat.js';
export { TOKENIZER_PRESETS } from './presets.js';
export { parseTokenizerSpec, tokenizerSpecFromFlag, tokenizerSpecSchema, TokenizerSpecError } from './spec.js';
export type { TokenizerSpec } from './spec.js';
