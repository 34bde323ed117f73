import { readFile } from 'node:fs/promises';
import { ENGINES, parseEndpointAddress } from '@spillway/events';
import { parse as parseYaml } from 'yaml';
import { z } from 'zod';
import type { EndpointSpec } from './endpoint.js';
import { MAX_RANKS_PER_POD } from './kv-map.js';
import { KV_EVENTS_FORMATS } from './kv-sources.js';

const name = z.string().min(1).max(253);
/** A ZeroMQ endpoint the collector connects to. */
const zmqEndpoint = z
  .string()
  .max(300)
  .regex(/^tcp:\/\/(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9.-]+):\d{1,5}$/, 'must be tcp://host:port');
/** TensorRT-LLM's KV-event queue (`trtllm-serve`'s POST /kv_cache_events). */
const httpEndpoint = z
  .string()
  .max(300)
  .regex(/^https?:\/\/(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9.-]+)(:\d{1,5})?\/\S*$/, 'must be tcp://host:port or an http URL');

const entrySchema = z
  .object({
    pod: name,
    address: z.string().refine((a) => parseEndpointAddress(a) !== undefined, 'must be ip:port or [ipv6]:port'),
    zone: name.optional(),
    region: name.optional(),
    engine: z.enum(ENGINES).optional(),
    labels: z.record(z.string().max(253), z.string().max(1024)).optional(),
    /**
     * The server's KV-event PUB endpoint and its replay ROUTER endpoint (vLLM's --kv-events-config),
     * or one per data-parallel rank in rank order; for TensorRT-LLM, its `http://.../kv_cache_events`.
     */
    kvEvents: z.union([zmqEndpoint, httpEndpoint, z.array(zmqEndpoint).min(1).max(MAX_RANKS_PER_POD)]).optional(),
    kvReplay: z.union([zmqEndpoint, z.array(zmqEndpoint).min(1).max(MAX_RANKS_PER_POD)]).optional(),
    /** Ranks on consecutive ports from `kvEvents` (vLLM's rule for --data-parallel-size). */
    kvDataParallelSize: z.number().int().min(1).max(MAX_RANKS_PER_POD).optional(),
    kvEventsFormat: z.enum(KV_EVENTS_FORMATS).optional(),
  })
  .strict()
  .superRefine((entry, ctx) => {
    const events = entry.kvEvents;
    const replay = entry.kvReplay;
    if (Array.isArray(replay) && (!Array.isArray(events) || events.length !== replay.length))
      ctx.addIssue({ code: 'custom', path: ['kvReplay'], message: 'a list of replay endpoints needs a kvEvents list of the same length' });
    if (Array.isArray(events) && entry.kvDataParallelSize !== undefined)
      ctx.addIssue({ code: 'custom', path: ['kvDataParallelSize'], message: 'give a list of kvEvents or kvDataParallelSize, not both' });
  });

/** The rank endpoints of an entry that lists them. */
function ranksOf(events: string | string[] | undefined, replay: string | string[] | undefined) {
  if (!Array.isArray(events)) return undefined;
  return events.map((e, i) => ({ events: e, replay: Array.isArray(replay) ? replay[i] : undefined }));
}

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
    kvEvents: Array.isArray(entry.kvEvents) ? entry.kvEvents[0] : entry.kvEvents,
    kvReplay: Array.isArray(entry.kvReplay) ? entry.kvReplay[0] : entry.kvReplay,
    kvRanks: ranksOf(entry.kvEvents, entry.kvReplay),
    kvDataParallelSize: entry.kvDataParallelSize,
    kvEventsFormat: entry.kvEventsFormat,
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

/**
 * Re-reads the file every `pollMs` and reports its entries when the text changed. Polling the
 * content (not fs.watch) also catches editors' rename-over saves and bind-mounted ConfigMaps,
 * whose symlink swaps fs.watch misses. A file that turns invalid is reported as an error and the
 * last good list stays in force: a typo must not tombstone the whole pool.
 */
export interface WatchOptions {
  path: string;
  defaults: FileDefaults;
  pollMs: number;
  onChange: (endpoints: EndpointSpec[]) => void;
  onError: (error: Error) => void;
  /** The text already loaded (a change is reported only against it). */
  initialText?: string | undefined;
}

export function watchEndpointsFile({ path, defaults, pollMs, onChange, onError, initialText }: WatchOptions): EndpointsFileWatcher {
  let last = initialText;
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
