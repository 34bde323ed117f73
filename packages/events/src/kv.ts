import { encode } from '@msgpack/msgpack';
import { MsgpackError, MsgpackReader } from './msgpack-reader.js';
import { z } from 'zod';
import { escapeToken, unescapeToken } from './token.js';

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

/**
 * One relayed batch, msgpack-encoded on the wire:
 * - `seq`: the collector's sequence for this pod, +1 per batch; a receiver that sees a gap has
 *   missed deltas and drops what it knows of the pod until the next `cleared`/snapshot;
 * - `events`: `[1, keys]` blocks stored (chain order, parent first), `[2, keys]` blocks removed,
 *   `[3]` every block gone (the server cleared its cache, or the collector lost track of it and
 *   asks receivers to start the pod afresh);
 * - `blockSize`: tokens per block of this server (keys are only comparable at equal block sizes).
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
});

export type KvBatch = z.infer<typeof kvBatchSchema>;
export type KvEvent = KvBatch['events'][number];

export type KvDecodeResult =
  | { ok: true; batch: KvBatch }
  | { ok: false; reason: 'oversized' | 'not-msgpack' | 'invalid' | 'too-many-keys' | 'subject-mismatch'; detail: string };

export function encodeKvBatch(batch: KvBatch): Uint8Array {
  return encode(batch);
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
      default:
        // Unknown fields are ignored (forward compatible), skipped within bounds.
        r.skip(4, 256, key);
    }
  }
  r.end('the batch');
  check(v === 1, 'v', 'the version must be 1');
  for (const field of ['pool', 'zone', 'pod', 'seq', 'observedAt', 'blockSize', 'events'] as const)
    check(seen[field] !== undefined, field, 'required');
  const batch = seen as KvBatch;
  return {
    v: 1,
    pool: batch.pool,
    zone: batch.zone,
    pod: batch.pod,
    seq: batch.seq,
    observedAt: batch.observedAt,
    blockSize: batch.blockSize,
    events: batch.events,
  };
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
