import { z } from 'zod';
import { CliError, commaList, positiveInt } from '@spillway/cli';

/**
 * The EPP's KV settings (docs/kv-events.md, "In the EPP"): which tokenizer each model's prompts go
 * through, and the bounds of the request path's tokenization.
 */
export const tokenizerSpecSchema = z.strictObject({
  /** A tokenizer shipped with @spillway/tokenizer, by name. */
  preset: z.string().min(1).optional(),
  /** A Hugging Face tokenizer.json. */
  tokenizerJson: z.string().min(1).optional(),
  /** A Jinja chat template: a file path, or the template itself. */
  chatTemplate: z.string().min(1).optional(),
});
export type TokenizerSpecValue = z.output<typeof tokenizerSpecSchema>;

export const kvFlags = {
  tokenizer: {
    description: "tokenize prompts for precise prefix-cache routing: MODEL=PRESET or MODEL=PATH/tokenizer.json, comma-separated; MODEL * for every other model (the config file's tokenizers hold chat templates too)",
    schema: commaList().default([]),
    placeholder: 'M=SPEC,...',
  },
  tokenCacheBytes: { description: "bytes of prompt-prefix token ids kept, so a shared context is tokenized once", schema: positiveInt().default(64 * 1024 * 1024), placeholder: 'BYTES' },
  tokenizeMaxChars: { description: 'prompts longer than this many characters are not tokenized (priced by the approximate prefix index)', schema: positiveInt().default(256 * 1024), placeholder: 'N' },
  kvEvents: { description: "follow the model servers' KV-cache block events (spillway.kv.<pool>.>) and the stream's KV snapshots", schema: z.union([z.boolean(), z.enum(['true', 'false']).transform((v) => v === 'true')]).default(true), placeholder: 'true|false' },
} as const;

/** The config file's `tokenizers`: model name (after rewrites; `*` for any other) to tokenizer. */
export const tokenizersFileSchema = z.record(z.string().min(1), tokenizerSpecSchema).default({});

/**
 * The tokenizer of each model: the file's entries, with `--tokenizer MODEL=SPEC` over them (a spec
 * naming a file, by a `/` or a `.json` ending, is a tokenizer.json; anything else a preset).
 */
export function tokenizerSpecs(file: Readonly<Record<string, TokenizerSpecValue>>, flag: readonly string[]): Map<string, TokenizerSpecValue> {
  const specs = new Map<string, TokenizerSpecValue>(Object.entries(file));
  for (const entry of flag) {
    const eq = entry.indexOf('=');
    const model = entry.slice(0, eq).trim();
    const spec = entry.slice(eq + 1).trim();
    if (eq <= 0 || model === '' || spec === '') throw new CliError(`--tokenizer: expected MODEL=PRESET or MODEL=PATH, got ${JSON.stringify(entry)}`, 'tokenizer');
    const isFile = spec.includes('/') || spec.endsWith('.json');
    // A chat template from the file's entry for the same model stays.
    const chatTemplate = file[model]?.chatTemplate;
    specs.set(model, { ...(isFile ? { tokenizerJson: spec } : { preset: spec }), ...(chatTemplate !== undefined && { chatTemplate }) });
  }
  for (const [model, spec] of specs) {
    if (spec.preset === undefined && spec.tokenizerJson === undefined) throw new CliError(`tokenizers.${model}: needs a preset or a tokenizerJson`, 'tokenizer');
  }
  return specs;
}
