import { readFile } from 'node:fs/promises';
import { ENGINES, parseEndpointAddress } from '@spillway/events';
import { parse as parseYaml } from 'yaml';
import { z } from 'zod';
import type { EndpointSpec } from './endpoint.js';

const name = z.string().min(1).max(253);
/** A ZeroMQ endpoint the collector connects to. */
const zmqEndpoint = z
  .string()
  .max(300)
  .regex(/^tcp:\/\/(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9.-]+):\d{1,5}$/, 'must be tcp://host:port');

const entrySchema = z
  .object({
    pod: name,
    address: z.string().refine((a) => parseEndpointAddress(a) !== undefined, 'must be ip:port or [ipv6]:port'),
    zone: name.optional(),
    region: name.optional(),
    engine: z.enum(ENGINES).optional(),
    labels: z.record(z.string().max(253), z.string().max(1024)).optional(),
    /** The server's KV-event PUB endpoint and its replay ROUTER endpoint (vLLM's --kv-events-config). */
    kvEvents: zmqEndpoint.optional(),
    kvReplay: zmqEndpoint.optional(),
  })
  .strict();

// A bare list, or `{ endpoints: [...] }` so the file can grow other keys later.
// (Unwrapped first rather than with a union, so errors keep their path: `3.address`, not `(root)`.)
const fileSchema = z
  .preprocess(
    (raw) =>
      raw !== null && typeof raw === 'object' && !Array.isArray(raw) && 'endpoints' in raw
        ? (raw as { endpoints: unknown }).endpoints
        : raw,
    z.array(entrySchema),
  )
  .superRefine((entries, ctx) => {
    const seen = new Set<string>();
    entries.forEach((entry, index) => {
      if (seen.has(entry.pod)) ctx.addIssue({ code: 'custom', path: [index, 'pod'], message: `duplicate pod ${entry.pod}` });
      seen.add(entry.pod);
    });
  });

export class EndpointsFileError extends Error {
  override readonly name = 'EndpointsFileError';
}

export interface FileDefaults {
  zone: string;
  region: string | undefined;
}

/** Parses the endpoints file's text (YAML is a superset of JSON, so one parser reads both). */
export function parseEndpointsFile(text: string, defaults: FileDefaults): EndpointSpec[] {
  let raw: unknown;
  try {
    raw = parseYaml(text);
  } catch (error) {
    throw new EndpointsFileError(`not YAML or JSON: ${(error as Error).message}`);
  }
  const parsed = fileSchema.safeParse(raw ?? []);
  if (!parsed.success) {
    const issue = parsed.error.issues[0];
    const where = issue?.path.length ? issue.path.join('.') : '(root)';
    throw new EndpointsFileError(`${where}: ${issue?.message ?? 'invalid'}`);
  }
  return parsed.data.map((entry) => ({
    pod: entry.pod,
    // Canonical spelling, so the EPP matches it against the gateway's subset hint.
    address: parseEndpointAddress(entry.address)?.key ?? entry.address,
    zone: entry.zone ?? defaults.zone,
    region: entry.region ?? defaults.region,
    engine: entry.engine,
    labels: entry.labels,
    sourceReady: true,
    kvEvents: entry.kvEvents,
    kvReplay: entry.kvReplay,
  }));
}

export async function loadEndpointsFile(path: string, defaults: FileDefaults): Promise<EndpointSpec[]> {
  let text: string;
  try {
    text = await readFile(path, 'utf8');
  } catch (error) {
    throw new EndpointsFileError(`cannot read ${path}: ${(error as Error).message}`);
  }
  return parseEndpointsFile(text, defaults);
}

export interface EndpointsFileWatcher {
  stop(): void;
}

export interface EndpointsFileWatch {
  readonly path: string;
  readonly defaults: FileDefaults;
  readonly pollMs: number;
  /** The file's entries, each time its text changed. */
  onChange(endpoints: EndpointSpec[]): void;
  /** The file could not be read or is invalid; the last good list stays. */
  onError(error: Error): void;
  /** The text already loaded: unchanged, it is not reported again. */
  readonly initialText?: string | undefined;
}

/**
 * Re-reads the file every `pollMs` and reports its entries when the text changed. Polling the
 * content (not fs.watch) also catches editors' rename-over saves and bind-mounted ConfigMaps,
 * whose symlink swaps fs.watch misses. A file that turns invalid is reported as an error and the
 * last good list stays in force: a typo must not tombstone the whole pool.
 */
export function watchEndpointsFile(watch: EndpointsFileWatch): EndpointsFileWatcher {
  const { path, defaults, pollMs, onChange, onError } = watch;
  let last = watch.initialText;
  let stopped = false;
  let running = false;
  const timer = setInterval(() => {
    if (running || stopped) return;
    running = true;
    readFile(path, 'utf8')
      .then((text) => {
        if (stopped || text === last) return;
        last = text;
        onChange(parseEndpointsFile(text, defaults));
      })
      .catch((error: Error) => {
        if (!stopped) onError(error instanceof EndpointsFileError ? error : new EndpointsFileError(error.message));
      })
      .finally(() => {
        running = false;
      });
  }, pollMs);
  timer.unref();
  return {
    stop() {
      stopped = true;
      clearInterval(timer);
    },
  };
}
