import { encode } from '@msgpack/msgpack';
import { MsgpackError, MsgpackReader } from './msgpack-reader.js';
import { z } from 'zod';
import { escapeToken, unescapeToken } from './token.js';
import { VLLM_MEDIUM_GPU } from './vllm-kv.js';

/**
 * KV-cache block events relayed from the model servers (precise prefix-cache routing). They are
 * high-rate deltas, so they travel on core NATS subjects outside the stream's `spillway.v1.>`:
 * `spillway.kv.<pool>.<zone>.<pod>`, one subject per pod, published by that zone's collector
 * (per-zone permissions bound what a collector can say, as for v1 events).
 *
 * Blocks are keyed by their **content**, not by the server's own block hashes (vLLM seeds those
 * with PYTHONHASHSEED, which nobody else can reproduce): the key of a full block of `blockSize`
 * token ids is a 53-bit hash chained over its parent block's key, so equal keys mean equal token
 * prefixes. The collector turns the server's `BlockStored` events (which carry the token ids) into
 * content keys and remembers server hash -> key per pod, so `BlockRemoved` (server hashes only)
 * can be relayed as keys too. An EPP computes a request's keys from its tokenized prompt with the
 * same function (`kvBlockKeys`), and looks them up in its index.
 */
export const KV_SUBJECT_ROOT = 'spillway.kv';

export interface KvSubjectParts {
  pool: string;
  zone: string;
  pod: string;
}

export function kvSubjectFor(parts: KvSubjectParts): string {
  return `${KV_SUBJECT_ROOT}.${escapeToken(parts.pool)}.${escapeToken(parts.zone)}.${escapeToken(parts.pod)}`;
}

/** Every pod's KV events of one pool (what an EPP subscribes to). */
export function kvPoolFilter(pool: string): string {
  return `${KV_SUBJECT_ROOT}.${escapeToken(pool)}.>`;
}

/** One zone's KV subjects (for per-zone permissions). */
export function kvZoneFilter(pool: string, zone: string): string {
  return `${KV_SUBJECT_ROOT}.${escapeToken(pool)}.${escapeToken(zone)}.>`;
}

export function parseKvSubject(subject: string): KvSubjectParts | undefined {
  const tokens = subject.split('.');
  if (tokens.length !== 5 || tokens[0] !== 'spillway' || tokens[1] !== 'kv') return undefined;
  const pool = unescapeToken(tokens[2] ?? '');
  const zone = unescapeToken(tokens[3] ?? '');
  const pod = unescapeToken(tokens[4] ?? '');
  if (!pool || !zone || !pod) return undefined;
  return { pool, zone, pod };
}

// ---- content keys ---------------------------------------------------------------------------

const TWO_32 = 4294967296;
const MAX_KEY = Number.MAX_SAFE_INTEGER;

/**
 * A seed for the keys of one adapter's blocks (vLLM keeps a LoRA's cached blocks apart from the
 * base model's): 0 for the base model, a 32-bit string hash of the adapter's name otherwise.
 */
export function kvKeySeed(lora?: string | undefined): number {
  if (lora === undefined || lora === '') return 0;
  let h = 0x811c9dc5;
  for (let i = 0; i < lora.length; i++) h = Math.imul(h ^ lora.charCodeAt(i), 0x01000193);
  return h >>> 0 || 1;
}

/**
 * The content key of the block `tokens[start..end)` whose parent block has key `parent`
 * (undefined for the first block of a sequence): two 32-bit multiply-rotate lanes over the parent
 * key, the seed and the token ids, folded into 53 bits — an exact JavaScript number, so it keys a
 * Map without a BigInt. Non-cryptographic; a collision makes one prefix match look longer.
 */
export function kvBlockKey(parent: number | undefined, tokens: ArrayLike<number>, start: number, end: number, seed = 0): number {
  const p = parent ?? 0;
  let h1 = 0x9e3779b9 ^ seed;
  let h2 = 0x85ebca6b ^ (parent === undefined ? 0x27d4eb2f : 0);
  // The mixing step is written out at each use (no closure): this runs per token on the request path.
  let word = p >>> 0;
  h1 = Math.imul(h1 ^ word, 2654435761);
  h1 = (h1 << 15) | (h1 >>> 17);
  h2 = Math.imul(h2 ^ word, 1597334677);
  h2 = (h2 << 13) | (h2 >>> 19);
  word = Math.floor(p / TWO_32) >>> 0;
  h1 = Math.imul(h1 ^ word, 2654435761);
  h1 = (h1 << 15) | (h1 >>> 17);
  h2 = Math.imul(h2 ^ word, 1597334677);
  h2 = (h2 << 13) | (h2 >>> 19);
  for (let i = start; i < end; i++) {
    word = (tokens[i] as number) >>> 0;
    h1 = Math.imul(h1 ^ word, 2654435761);
    h1 = (h1 << 15) | (h1 >>> 17);
    h2 = Math.imul(h2 ^ word, 1597334677);
    h2 = (h2 << 13) | (h2 >>> 19);
  }
  word = end - start;
  h1 = Math.imul(h1 ^ word, 2654435761);
  h1 = (h1 << 15) | (h1 >>> 17);
  h2 = Math.imul(h2 ^ word, 1597334677);
  h2 = (h2 << 13) | (h2 >>> 19);
  h1 = Math.imul(h1 ^ (h1 >>> 16), 2246822507);
  h1 ^= Math.imul(h2 ^ (h2 >>> 13), 3266489909);
  h2 = Math.imul(h2 ^ (h2 >>> 16), 2246822507);
  h2 ^= Math.imul(h1 ^ (h1 >>> 13), 3266489909);
  return TWO_32 * (0x1fffff & h2) + (h1 >>> 0);
}

/**
 * The content keys of the full blocks of a token sequence, in order (a partial last block has no
 * key: servers cache full blocks only). `parent` continues a chain (a `BlockStored` event whose
 * parent block is known); `maxBlocks` bounds the work for very long prompts.
 */
export function kvBlockKeys(
  tokens: ArrayLike<number>,
  blockSize: number,
  options: { parent?: number | undefined; seed?: number; maxBlocks?: number; out?: number[] } = {},
): number[] {
  const out = options.out ?? [];
  out.length = 0;
  if (!Number.isInteger(blockSize) || blockSize < 1) return out;
  const blocks = Math.min(Math.floor(tokens.length / blockSize), options.maxBlocks ?? Number.POSITIVE_INFINITY);
  let parent = options.parent;
  for (let b = 0; b < blocks; b++) {
    parent = kvBlockKey(parent, tokens, b * blockSize, (b + 1) * blockSize, options.seed ?? 0);
    out.push(parent);
  }
  return out;
}

// ---- the relayed batch ----------------------------------------------------------------------

/** Event tags in a relayed batch. */
export const KV_STORED = 1;
export const KV_REMOVED = 2;
export const KV_CLEARED = 3;

/** Bounds of one relayed batch: enforced on decode, so a hostile publisher cannot make an EPP hold more. */
export const MAX_KV_BATCH_BYTES = 1024 * 1024;
export const MAX_KV_EVENTS = 1024;
export const MAX_KV_KEYS = 8192;

const key = z.number().int().min(0).max(MAX_KEY);
const keys = z.array(key).max(MAX_KV_KEYS);
const name = z.string().min(1).max(253);

// ---- what the model server said of the blocks (optional: readers before these fields ignore them) --

/** Longest medium, group kind and skip reason relayed, in characters. */
export const MAX_KV_INFO_TEXT = 64;
/** Largest data-parallel rank relayed. */
export const MAX_KV_RANK = 65535;
/**
 * Descriptions per batch: runs of stored events, and tallies of blocks not relayed as keys. Each
 * list is an optional field that readers from before it skip as unknown, and they skip at most 4
 * levels deep and 256 values per field (`UNKNOWN_FIELD_DEPTH`, `UNKNOWN_FIELD_VALUES`): 16 runs of
 * at most 7 fields are 240 values, 12 tallies of at most 9 fields 228.
 */
export const MAX_KV_STORED_RUNS = 16;
export const MAX_KV_SKIPPED = 12;
/** How deep and how large an unknown field of a batch may be: readers skip it within these bounds, or refuse the batch. */
export const UNKNOWN_FIELD_DEPTH = 4;
export const UNKNOWN_FIELD_VALUES = 256;

const MAX_U32 = 0xffffffff;
const infoText = z.string().min(1).max(MAX_KV_INFO_TEXT);
const u32 = z.number().int().min(0).max(MAX_U32);

/**
 * What the model server said of a run of blocks, as far as it said it (every field optional):
 * `medium` its tier (`GPU`; `CPU`, `DISK`, `cache_level:1`, ... for offload tiers), `group` /
 * `kind` / `window` its KV-cache group (vLLM's `group_idx`, `kv_cache_spec_kind`,
 * `kv_cache_spec_sliding_window`; TensorRT-LLM's `layer_group_id` or window size), `lora` the
 * adapter's name, `extraKeys` whether its blocks' content is more than their tokens (multimodal
 * inputs, a cache salt; the LoRA name alone does not count, it seeds the keys).
 */
const kvBlockInfoShape = {
  medium: infoText.optional(),
  group: u32.optional(),
  kind: infoText.optional(),
  window: u32.optional(),
  lora: name.optional(),
  extraKeys: z.boolean().optional(),
};

/** `events` consecutive stored events of the batch's `events` (in order, removals and clears not counted) and what the server said of their blocks. */
export const kvStoredRunSchema = z.object({ events: z.number().int().min(1).max(MAX_KV_EVENTS), ...kvBlockInfoShape });

/**
 * Blocks of the server's events the relay did not put in `events` (so no prefix index credits
 * them), counted by why (`reason`: the collector's skip reason, e.g. `other-medium`,
 * `other-group`, `extra-keys`; absent on a tally of blocks whose descriptions did not fit the
 * batch) and by what the server said of them: `stored` blocks stored, `removed` blocks removed.
 */
export const kvSkippedSchema = z.object({
  reason: infoText.optional(),
  stored: u32.optional(),
  removed: u32.optional(),
  ...kvBlockInfoShape,
});

/**
 * What the relay knows of the pod's cache (optional: readers before this field ignore it, and an
 * absent one means what it meant to them, that the relay vouches for every block):
 * - `since`: when the relay's continuous view of the pod began (ms since the epoch, the relay's
 *   clock): its start, or its latest fresh start of one of the pod's ranks;
 * - `complete`: whether that view covers every block the server holds — each rank followed from
 *   the server's first batch or from a cache reset the server reported, or its cache turned over
 *   since the relay last saw a block chained to one it never heard of. False: the server may hold
 *   blocks it stored before `since` that the relay cannot name (a collector that started after the
 *   server without a full replay), so a receiver must not take their absence as a miss. In a
 *   snapshot it also says that `keys` holds all of them (not cut to the newest).
 */
export const kvKnownSchema = z.object({
  since: z.number().finite().nonnegative().max(8.64e15),
  complete: z.boolean(),
});

/**
 * One relayed batch, msgpack-encoded on the wire:
 * - `seq`: the collector's sequence for this pod, +1 per batch; a receiver that sees a gap has
 *   missed deltas and drops what it knows of the pod until the next `cleared`/snapshot;
 * - `events`: `[1, keys]` blocks stored (chain order, parent first), `[2, keys]` blocks removed,
 *   `[3]` every block gone (the server cleared its cache, or the collector lost track of it and
 *   asks receivers to start the pod afresh); only blocks a request can hit are in it: in GPU
 *   memory, of the KV-cache group that holds whole prefixes, without extra keys;
 * - `blockSize`: tokens per block of this server (keys are only comparable at equal block sizes);
 * - optional, for visibility (docs/events.md): `rank` the data-parallel rank whose events these
 *   are, `stored` what the server said of the stored events' blocks (runs, in order), `skipped`
 *   the blocks it reported that are not in `events`, counted by description;
 * - optional, `known`: whether the relay knows every block of the pod (`kvKnownSchema`).
 */
export const kvBatchSchema = z.object({
  v: z.literal(1),
  pool: name,
  zone: name,
  pod: name,
  seq: z.number().int().min(0).max(MAX_KEY),
  observedAt: z.number().finite().nonnegative().max(8.64e15),
  blockSize: z.number().int().min(1).max(4096),
  events: z
    .array(z.union([z.tuple([z.literal(KV_STORED), keys]), z.tuple([z.literal(KV_REMOVED), keys]), z.tuple([z.literal(KV_CLEARED)])]))
    .max(MAX_KV_EVENTS),
  rank: z.number().int().min(0).max(MAX_KV_RANK).optional(),
  stored: z.array(kvStoredRunSchema).max(MAX_KV_STORED_RUNS).optional(),
  skipped: z.array(kvSkippedSchema).max(MAX_KV_SKIPPED).optional(),
  known: kvKnownSchema.optional(),
});

export type KvBatch = z.infer<typeof kvBatchSchema>;
export type KvKnown = z.infer<typeof kvKnownSchema>;
export type KvEvent = KvBatch['events'][number];
export type KvStoredRun = z.infer<typeof kvStoredRunSchema>;
export type KvSkipped = z.infer<typeof kvSkippedSchema>;
/** What a server said of some blocks: the fields a stored run and a skipped tally share. */
export type KvBlockInfo = Omit<KvStoredRun, 'events'>;

/**
 * Whether a prefix index may credit blocks so described as cached: in GPU memory (or the tier not
 * said: servers that do not say are GPU-only) and without extra keys. The group is the relay's
 * choice (docs/kv-events.md "Hybrid models, tiers and extra keys"), so it is not judged here.
 */
export function kvCreditable(info: KvBlockInfo | undefined): boolean {
  return info === undefined || ((info.medium === undefined || info.medium === VLLM_MEDIUM_GPU) && info.extraKeys !== true);
}

/**
 * Walks a batch's `stored` runs alongside its stored events: call `next()` once per stored event,
 * in order, for its run (undefined past the runs, or without any: a relay that does not describe).
 */
export class KvStoredRuns {
  private run = 0;
  private left: number;

  constructor(private readonly runs: readonly KvStoredRun[] | undefined) {
    this.left = runs?.[0]?.events ?? 0;
  }

  next(): KvStoredRun | undefined {
    const runs = this.runs;
    if (runs === undefined || this.run >= runs.length) return undefined;
    const current = runs[this.run] as KvStoredRun;
    if (--this.left <= 0) this.left = runs[++this.run]?.events ?? 0;
    return current;
  }
}

export type KvDecodeResult =
  | { ok: true; batch: KvBatch }
  | { ok: false; reason: 'oversized' | 'not-msgpack' | 'invalid' | 'too-many-keys' | 'subject-mismatch'; detail: string };

/** The batch as msgpack; optional fields left undefined are left out (a nil would be an invalid value). */
export function encodeKvBatch(batch: KvBatch): Uint8Array {
  return encode(batch, { ignoreUndefined: true });
}

/** A layout violation found while reading (reported as `invalid`), or too many keys in all. */
class Refused extends Error {
  constructor(
    readonly reason: 'invalid' | 'too-many-keys',
    message: string,
  ) {
    super(message);
  }
}

function check(ok: boolean, path: string, message: string): void {
  if (!ok) throw new Refused('invalid', `${path}: ${message}`);
}

function readName(r: MsgpackReader, path: string): string {
  const s = r.str(1024, path);
  check(s.length >= 1 && s.length <= 253, path, 'a name of 1 to 253 characters');
  return s;
}

function readWhole(r: MsgpackReader, path: string, max: number): number {
  const n = r.number(path);
  check(Number.isSafeInteger(n) && n >= 0 && n <= max, path, `a whole number in [0, ${max}]`);
  return n;
}

function readText(r: MsgpackReader, path: string): string {
  const s = r.str(4 * MAX_KV_INFO_TEXT, path);
  check(s.length >= 1 && s.length <= MAX_KV_INFO_TEXT, path, `a text of 1 to ${MAX_KV_INFO_TEXT} characters`);
  return s;
}

/** Reads `key` into `info` when it is one of the description's fields (false otherwise: the caller reads or skips it). */
function readInfoField(r: MsgpackReader, key: string, path: string, info: KvBlockInfo): boolean {
  switch (key) {
    case 'medium':
    case 'kind':
      info[key] = readText(r, `${path}.${key}`);
      return true;
    case 'group':
    case 'window':
      info[key] = readWhole(r, `${path}.${key}`, MAX_U32);
      return true;
    case 'lora':
      info.lora = readName(r, `${path}.lora`);
      return true;
    case 'extraKeys':
      info.extraKeys = r.bool(`${path}.extraKeys`);
      return true;
    default:
      return false;
  }
}

/** A list of descriptions (`stored` or `skipped`): each entry a map of at most 16 fields, `own` reading the fields of its kind. */
function readDescriptions<T extends KvBlockInfo>(
  r: MsgpackReader,
  field: 'stored' | 'skipped',
  max: number,
  own: (key: string, path: string, entry: T) => boolean,
): T[] {
  const length = r.arrayHeader(max, field);
  const list = new Array<T>(length);
  for (let i = 0; i < length; i++) {
    const path = `${field}.${i}`;
    const fields = r.mapHeader(16, path);
    const entry = {} as T;
    for (let f = 0; f < fields; f++) {
      const key = r.str(64, `${path}: a field name`);
      if (!own(key, path, entry) && !readInfoField(r, key, path, entry))
        r.skip(UNKNOWN_FIELD_DEPTH, UNKNOWN_FIELD_VALUES, `${path}.${key}`);
    }
    list[i] = entry;
  }
  return list;
}

function readStoredRuns(r: MsgpackReader): KvStoredRun[] {
  const runs = readDescriptions<KvStoredRun>(r, 'stored', MAX_KV_STORED_RUNS, (key, path, run) => {
    if (key !== 'events') return false;
    run.events = readWhole(r, `${path}.events`, MAX_KV_EVENTS);
    check(run.events >= 1, `${path}.events`, 'at least 1');
    return true;
  });
  runs.forEach((run, i) => check(run.events !== undefined, `stored.${i}.events`, 'required'));
  return runs;
}

function readSkipped(r: MsgpackReader): KvSkipped[] {
  return readDescriptions<KvSkipped>(r, 'skipped', MAX_KV_SKIPPED, (key, path, tally) => {
    if (key === 'reason') tally.reason = readText(r, `${path}.reason`);
    else if (key === 'stored' || key === 'removed') tally[key] = readWhole(r, `${path}.${key}`, MAX_U32);
    else return false;
    return true;
  });
}

/** The `known` map: its two fields required, unknown ones skipped within bounds. */
function readKnown(r: MsgpackReader, path: string): KvKnown {
  const fields = r.mapHeader(16, path);
  let since: number | undefined;
  let complete: boolean | undefined;
  for (let f = 0; f < fields; f++) {
    const key = r.str(64, `${path}: a field name`);
    if (key === 'since') {
      since = r.number(`${path}.since`);
      check(Number.isFinite(since) && since >= 0 && since <= 8.64e15, `${path}.since`, 'a time in ms since the epoch');
    } else if (key === 'complete') complete = r.bool(`${path}.complete`);
    else r.skip(UNKNOWN_FIELD_DEPTH, UNKNOWN_FIELD_VALUES, `${path}.${key}`);
  }
  check(since !== undefined, `${path}.since`, 'required');
  check(complete !== undefined, `${path}.complete`, 'required');
  return { since: since as number, complete: complete as boolean };
}

function readEvents(r: MsgpackReader): KvEvent[] {
  const length = r.arrayHeader(MAX_KV_EVENTS, 'events');
  const events = new Array<KvEvent>(length);
  let keysLeft = MAX_KV_KEYS;
  for (let i = 0; i < length; i++) {
    const path = `events.${i}`;
    const size = r.arrayHeader(2, path);
    check(size >= 1, path, 'an empty event');
    const tag = r.number(`${path}.0`);
    if (tag === KV_CLEARED) {
      check(size === 1, path, 'a cleared event is [3]');
      events[i] = [KV_CLEARED];
      continue;
    }
    check(tag === KV_STORED || tag === KV_REMOVED, `${path}.0`, 'an event tag of 1, 2 or 3');
    check(size === 2, path, 'a stored or removed event is [tag, keys]');
    const count = r.arrayHeader(MAX_KV_KEYS, `${path}.1`);
    keysLeft -= count;
    if (keysLeft < 0) throw new Refused('too-many-keys', `more than ${MAX_KV_KEYS} keys`);
    const keys = new Array<number>(count);
    const bad = r.wholeNumbers(count, keys, path);
    if (bad >= 0) throw new Refused('invalid', `${path}.1.${bad}: a key (a whole number in [0, 2^53))`);
    events[i] = [tag, keys] as KvEvent;
  }
  return events;
}

/**
 * Reads one batch by its layout (the rules of `kvBatchSchema`, checked by hand as each value is
 * read): each container's length is checked against its bound before any element is read, so a
 * hostile payload costs at most the bytes it takes to reach its first violation.
 */
function readKvBatch(data: Uint8Array): KvBatch {
  const r = new MsgpackReader(data);
  const fields = r.topMap(16, 'the batch');
  const seen: Partial<Omit<KvBatch, 'v'>> = {};
  let v: number | undefined;
  for (let f = 0; f < fields; f++) {
    const key = r.str(64, 'a field name');
    switch (key) {
      case 'v':
        v = r.number('v');
        break;
      case 'pool':
      case 'zone':
      case 'pod':
        seen[key] = readName(r, key);
        break;
      case 'seq':
        seen.seq = readWhole(r, 'seq', MAX_KEY);
        break;
      case 'observedAt': {
        const t = r.number('observedAt');
        check(Number.isFinite(t) && t >= 0 && t <= 8.64e15, 'observedAt', 'a time in ms since the epoch');
        seen.observedAt = t;
        break;
      }
      case 'blockSize':
        seen.blockSize = readWhole(r, 'blockSize', 4096);
        check(seen.blockSize >= 1, 'blockSize', 'at least 1');
        break;
      case 'events':
        seen.events = readEvents(r);
        break;
      case 'rank':
        seen.rank = readWhole(r, 'rank', MAX_KV_RANK);
        break;
      case 'stored':
        seen.stored = readStoredRuns(r);
        break;
      case 'skipped':
        seen.skipped = readSkipped(r);
        break;
      case 'known':
        seen.known = readKnown(r, 'known');
        break;
      default:
        // Unknown fields are ignored (forward compatible), skipped within bounds.
        r.skip(UNKNOWN_FIELD_DEPTH, UNKNOWN_FIELD_VALUES, key);
    }
  }
  r.end('the batch');
  check(v === 1, 'v', 'the version must be 1');
  for (const field of ['pool', 'zone', 'pod', 'seq', 'observedAt', 'blockSize', 'events'] as const)
    check(seen[field] !== undefined, field, 'required');
  const batch = seen as KvBatch;
  const out: KvBatch = {
    v: 1,
    pool: batch.pool,
    zone: batch.zone,
    pod: batch.pod,
    seq: batch.seq,
    observedAt: batch.observedAt,
    blockSize: batch.blockSize,
    events: batch.events,
  };
  // The optional fields only when present, as zod returns them.
  if (batch.rank !== undefined) out.rank = batch.rank;
  if (batch.stored !== undefined) out.stored = batch.stored;
  if (batch.skipped !== undefined) out.skipped = batch.skipped;
  if (batch.known !== undefined) out.known = batch.known;
  return out;
}

/**
 * Decodes and validates one relayed batch; never throws. The subject must name the same pod as the
 * payload (a collector may publish only its own zone's subjects, so the subject is what bounds it).
 *
 * Every EPP decodes every pod's batches on its event loop, so the payload is read by its layout,
 * bounded in bytes, elements and nesting before any work (docs/hardening.md): a hostile message
 * costs about what reading its bytes up to the first violation costs, never what building it would.
 */
export function decodeKvBatch(subject: string, data: Uint8Array): KvDecodeResult {
  if (data.byteLength > MAX_KV_BATCH_BYTES) return { ok: false, reason: 'oversized', detail: `${data.byteLength} bytes` };
  let batch: KvBatch;
  try {
    batch = readKvBatch(data);
  } catch (error) {
    if (error instanceof Refused) return { ok: false, reason: error.reason, detail: error.message };
    if (error instanceof MsgpackError) return { ok: false, reason: error.kind, detail: error.message };
    throw error;
  }
  const parts = parseKvSubject(subject);
  if (!parts || parts.pool !== batch.pool || parts.zone !== batch.zone || parts.pod !== batch.pod) {
    return { ok: false, reason: 'subject-mismatch', detail: subject };
  }
  return { ok: true, batch };
}
