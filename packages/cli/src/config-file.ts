import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import type * as Yaml from 'yaml';
import type { z } from 'zod';
import { CliError } from './flags.js';

/**
 * The YAML parser, loaded on first use: most processes start without a config file, and loading
 * the library is a measurable part of a start.
 */
let yaml: typeof Yaml | undefined;
function parseYaml(text: string): unknown {
  yaml ??= createRequire(import.meta.url)('yaml') as typeof Yaml;
  return yaml.parse(text);
}

/** A config file as read: its validated values and the SHA-256 of its bytes (hex), which names the version. */
export interface ConfigFileVersion<T> {
  readonly value: T;
  readonly hash: string;
}

/**
 * Reads a YAML or JSON file (JSON is YAML) and validates it, reporting every bad field with its
 * path, so an operator sees `config.yaml: thresholds.kv: must be at most 1` rather than a stack.
 */
export function loadConfigFile<S extends z.ZodType>(path: string, schema: S): z.output<S> {
  return readConfigFile(path, schema).value;
}

/** loadConfigFile, with the hash of the bytes that were validated (for live reloads and an info metric). */
export function readConfigFile<S extends z.ZodType>(path: string, schema: S): ConfigFileVersion<z.output<S>> {
  let bytes: Buffer;
  try {
    bytes = readFileSync(path);
  } catch (error) {
    throw new CliError(`${path}: cannot read: ${(error as Error).message}`);
  }
  return { value: parseConfigText(bytes.toString('utf8'), path, schema), hash: configHash(bytes) };
}

/** Validates a config file's text (YAML or JSON); `path` only names it in errors. */
export function parseConfigText<S extends z.ZodType>(text: string, path: string, schema: S): z.output<S> {
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

/** SHA-256 of a config file's bytes, hex: equal bytes, equal version. */
export function configHash(bytes: Uint8Array): string {
  return createHash('sha256').update(bytes).digest('hex');
}
