import { decode, encode } from '@msgpack/msgpack';
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

/**
 * Decodes and validates one relayed batch; never throws. The subject must name the same pod as the
 * payload (a collector may publish only its own zone's subjects, so the subject is what bounds it).
 */
export function decodeKvBatch(subject: string, data: Uint8Array): KvDecodeResult {
  if (data.byteLength > MAX_KV_BATCH_BYTES) return { ok: false, reason: 'oversized', detail: `${data.byteLength} bytes` };
  let raw: unknown;
  try {
    raw = decode(data, { maxStrLength: 4096, maxArrayLength: MAX_KV_KEYS, maxMapLength: 64, maxBinLength: 0, maxExtLength: 0 });
  } catch (error) {
    return { ok: false, reason: 'not-msgpack', detail: error instanceof Error ? error.message : String(error) };
  }
  const parsed = kvBatchSchema.safeParse(raw);
  if (!parsed.success) {
    const issue = parsed.error.issues[0];
    return { ok: false, reason: 'invalid', detail: `${issue?.path.join('.') ?? ''}: ${issue?.message ?? 'invalid'}` };
  }
  const batch = parsed.data;
  let total = 0;
  for (const event of batch.events) total += event.length === 2 ? event[1].length : 0;
  if (total > MAX_KV_KEYS) return { ok: false, reason: 'too-many-keys', detail: `${total} keys` };
  const parts = parseKvSubject(subject);
  if (!parts || parts.pool !== batch.pool || parts.zone !== batch.zone || parts.pod !== batch.pod) {
    return { ok: false, reason: 'subject-mismatch', detail: subject };
  }
  return { ok: true, batch };
}
