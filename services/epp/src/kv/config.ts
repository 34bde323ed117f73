import { z } from 'zod';
import { CliError, commaList, positiveInt } from '@spillway/cli';
import {
  loadTokenizer,
  TOKENIZER_PRESETS,
  tokenizerSpecFromFlag,
  tokenizerSpecSchema,
  TokenizerSpecError,
  type PromptTokenizer,
  type TokenizerSpec,
} from '@spillway/tokenizer';

/**
 * The EPP's KV settings (docs/kv-events.md, "In the EPP"): whether it follows the KV events, which
 * tokenizer each model's prompts go through, and the bounds of the request path's tokenization.
 */
export const kvFlags = {
  kvEvents: {
    description:
      "follow the model servers' KV-cache block events (spillway.kv.<pool>.>) and the stream's KV snapshots for precise prefix-cache routing",
    schema: z.union([z.boolean(), z.enum(['true', 'false']).transform((v) => v === 'true')]).default(true),
    placeholder: 'true|false',
  },
  tokenizer: {
    description: `tokenize prompts for precise prefix-cache routing: MODEL=PRESET (${TOKENIZER_PRESETS.join(', ')}) or MODEL=PATH of a tokenizer.json, comma-separated; MODEL * for every other model (the config file's tokenizers take chat templates too)`,
    schema: commaList().default([]),
    placeholder: 'M=SPEC,...',
  },
  tokenCacheBytes: {
    description: 'bytes of prompt-prefix token ids kept, so a shared context is tokenized once',
    schema: positiveInt().default(64 * 1024 * 1024),
    placeholder: 'BYTES',
  },
  tokenizeMaxChars: {
    description: 'prompts longer than this many characters are not tokenized (the approximate prefix index prices them)',
    schema: positiveInt().default(256 * 1024),
    placeholder: 'N',
  },
} as const;

/** The config file's `tokenizers`: model name (after rewrites; `*` for any other) to @spillway/tokenizer's spec. */
export const tokenizersFileSchema = z.record(z.string().min(1), tokenizerSpecSchema).default({});

/**
 * The tokenizer of each model: the file's entries, with `--tokenizer MODEL=SPEC` over them (a spec
 * naming a preset is that preset, anything else a tokenizer.json path). Each distinct spec is loaded
 * once, now, so a bad file is a usage error naming it rather than a failure on the request path.
 */
export function loadTokenizers(file: Readonly<Record<string, TokenizerSpec>>, flag: readonly string[]): Map<string, PromptTokenizer> {
  const specs = new Map<string, { spec: TokenizerSpec; source: string }>(
    Object.entries(file).map(([model, spec]) => [model, { spec, source: `tokenizers.${model}` }]),
  );
  for (const entry of flag) {
    const eq = entry.indexOf('=');
    const model = entry.slice(0, eq).trim();
    const value = entry.slice(eq + 1).trim();
    if (eq <= 0 || model === '' || value === '')
      throw new CliError(`--tokenizer: expected MODEL=PRESET or MODEL=PATH, got ${JSON.stringify(entry)}`, 'tokenizer');
    // A chat template given in the file for the same model stays.
    const chatTemplate = file[model]?.chatTemplate;
    specs.set(model, {
      spec: { ...tokenizerSpecFromFlag(value, TOKENIZER_PRESETS), ...(chatTemplate !== undefined && { chatTemplate }) },
      source: '--tokenizer',
    });
  }
  const loaded = new Map<string, PromptTokenizer>();
  const tokenizers = new Map<string, PromptTokenizer>();
  for (const [model, { spec, source }] of specs) {
    const id = JSON.stringify(spec);
    let tokenizer = loaded.get(id);
    if (tokenizer === undefined) {
      try {
        // The chat template's periodic checks run after the request's destination is sent (chat.ts).
        tokenizer = loadTokenizer(spec, { deferCheck: (check) => setImmediate(check) });
      } catch (error) {
        if (error instanceof TokenizerSpecError) throw new CliError(`${source}: ${model}: ${error.message}`, 'tokenizer');
        throw error;
      }
      loaded.set(id, tokenizer);
    }
    tokenizers.set(model, tokenizer);
  }
  return tokenizers;
}
