import { createHash } from 'node:crypto';
import { closeSync, openSync, readSync } from 'node:fs';
import { open } from 'node:fs/promises';
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

/**
 * The most a config file may hold. Real ones are a few kilobytes; this leaves room for long model
 * lists while a mistaken or hostile file (the review read and applied one of 50 MB) is refused
 * before it is read in full, parsed or validated.
 */
export const MAX_CONFIG_FILE_BYTES = 1024 * 1024;

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
  const bytes = readConfigBytes(path);
  return { value: parseConfigText(bytes.toString('utf8'), path, schema), hash: configHash(bytes) };
}

/**
 * A config file's bytes, at most MAX_CONFIG_FILE_BYTES: a larger file is refused with a CliError
 * naming it, having read no more than one byte past the cap (whatever its size says: it may grow).
 */
export function readConfigBytes(path: string): Buffer {
  const buffer = Buffer.allocUnsafe(MAX_CONFIG_FILE_BYTES + 1);
  let length = 0;
  let fd: number | undefined;
  try {
    fd = openSync(path, 'r');
    for (let n = -1; n !== 0 && length < buffer.length; length += n) n = readSync(fd, buffer, length, buffer.length - length, null);
  } catch (error) {
    throw new CliError(`${path}: cannot read: ${(error as Error).message}`);
  } finally {
    if (fd !== undefined) closeSync(fd);
  }
  return checkedSize(path, buffer, length);
}

/** readConfigBytes without blocking the event loop (live reloads). */
export async function readConfigBytesAsync(path: string): Promise<Buffer> {
  const buffer = Buffer.allocUnsafe(MAX_CONFIG_FILE_BYTES + 1);
  let length = 0;
  try {
    const file = await open(path, 'r');
    try {
      for (let n = -1; n !== 0 && length < buffer.length; length += n)
        ({ bytesRead: n } = await file.read(buffer, length, buffer.length - length, null));
    } finally {
      await file.close();
    }
  } catch (error) {
    throw new CliError(`${path}: cannot read: ${(error as Error).message}`);
  }
  return checkedSize(path, buffer, length);
}

function checkedSize(path: string, buffer: Buffer, length: number): Buffer {
  if (length > MAX_CONFIG_FILE_BYTES)
    throw new CliError(`${path}: larger than ${MAX_CONFIG_FILE_BYTES} bytes, the most a config file may hold`);
  // A copy of the bytes read, not a view into the cap-sized buffer.
  return Buffer.from(buffer.subarray(0, length));
}

/** Validates a config file's text (YAML or JSON); `path` only names it in errors. At most MAX_CONFIG_FILE_BYTES. */
export function parseConfigText<S extends z.ZodType>(text: string, path: string, schema: S): z.output<S> {
  // A UTF-16 unit takes at most 3 bytes in UTF-8: count the bytes only when the text could be over.
  if (text.length > MAX_CONFIG_FILE_BYTES / 3 && Buffer.byteLength(text, 'utf8') > MAX_CONFIG_FILE_BYTES)
    throw new CliError(`${path}: larger than ${MAX_CONFIG_FILE_BYTES} bytes, the most a config file may hold`);
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
