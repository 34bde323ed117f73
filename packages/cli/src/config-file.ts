import { readFileSync } from 'node:fs';
import { parse as parseYaml } from 'yaml';
import type { z } from 'zod';
import { CliError } from './flags.js';

/**
 * Reads a YAML or JSON file (JSON is YAML) and validates it, reporting every bad field with its
 * path, so an operator sees `config.yaml: thresholds.kv: must be at most 1` rather than a stack.
 */
export function loadConfigFile<S extends z.ZodType>(path: string, schema: S): z.output<S> {
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (error) {
    throw new CliError(`${path}: cannot read: ${(error as Error).message}`);
  }
  let data: unknown;
  try {
    data = parseYaml(text) ?? {};
  } catch (error) {
    throw new CliError(`${path}: not valid YAML or JSON: ${(error as Error).message}`);
  }
  const result = schema.safeParse(data);
  if (!result.success) {
    const details = result.error.issues.map((i) => `${i.path.join('.') || '(root)'}: ${i.message}`).join('; ');
    throw new CliError(`${path}: ${details}`);
  }
  return result.data;
}
