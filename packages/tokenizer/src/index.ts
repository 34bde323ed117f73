export { loadTokenizer } from './load.js';
export type { PromptTokenizer } from './load.js';
export { ChatTemplate, messageText } from './chat.js';
export type { ChatMessage } from './chat.js';
export { TOKENIZER_PRESETS } from './presets.js';
export { parseTokenizerSpec, tokenizerSpecFromFlag, tokenizerSpecSchema, TokenizerSpecError } from './spec.js';
export type { TokenizerSpec } from './spec.js';
