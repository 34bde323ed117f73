import { decode, encode } from '@msgpack/msgpack';
import { scanMsgpack } from './msgpack-reader.js';

/**
 * The model servers' KV-cache event wire format, as vLLM's ZeroMQ publisher sends it
 * (`vllm/distributed/kv_events.py`; docs/kv-events.md names the versions followed). A PUB message
 * has three frames `[topic, seq, payload]`: `seq` an unsigned 64-bit big-endian integer, +1 per
 * batch; the payload a msgpack `KVEventBatch`, a msgspec struct with `array_like=True,
 * omit_defaults=True`: `[ts, events, data_parallel_rank]`. Its events are msgspec structs tagged
 * with their class name, in one of two encodings:
 *
 * - arrays led by the tag (`array_like=True`, vLLM until the events became maps), fields by
 *   position; with `omit_defaults`, trailing fields at their default are left out, and older
 *   versions simply have fewer fields:
 *
 *     ["BlockStored", block_hashes, parent_block_hash|nil, token_ids, block_size, lora_id|nil,
 *      medium|nil, lora_name|nil, extra_keys|nil, group_idx|nil, kv_cache_spec_kind|nil,
 *      kv_cache_spec_sliding_window|nil]
 *     ["BlockRemoved", block_hashes, medium|nil, group_idx|nil]
 *     ["AllBlocksCleared"]
 *
 * - maps with a `type` field (the newest vLLM), fields by name, defaults left out.
 *
 * SGLang (`python/sglang/srt/disaggregation/kv_events.py`) sends the array form without
 * `omit_defaults` and without vLLM's trailing fields: `BlockStored` ends at `medium`, or carries at
 * position 7 a `metadata` map `{cache_salt}` (`BlockStoredWithMetadata`) whose salt is NOT folded
 * into its block hashes. A decoder reads the fields it knows, in either form, and ignores trailing
 * and unknown ones; unknown event tags are skipped and counted.
 *
 * Block hashes are integers (64-bit: kept exact, as a bigint beyond 2^53) or, with vLLM's byte
 * hashes, up to 64 bytes (kept as hex). `spillway-sim` encodes with this module and the collector
 * decodes with it: one definition of the layout. The decoded events are the collector's common
 * vocabulary: the TensorRT-LLM decoder (`trtllm-kv.ts`) produces the same types.
 */
export const VLLM_BLOCK_STORED = 'BlockStored';
export const VLLM_BLOCK_REMOVED = 'BlockRemoved';
export const VLLM_ALL_BLOCKS_CLEARED = 'AllBlocksCleared';
export const VLLM_MEDIUM_GPU = 'GPU';

/** A server block hash as decoded: a safe integer, a bigint beyond 2^53, or the hex of a byte hash. */
export type VllmBlockHash = number | bigint | string;

/** A value of vLLM's `extra_keys` (multimodal hashes, LoRA name, cache salt, ...): any msgpack value. */
export type VllmExtraKey = unknown;

export interface VllmBlockStored {
  readonly type: 'stored';
  readonly hashes: VllmBlockHash[];
  readonly parent: VllmBlockHash | null;
  readonly tokenIds: number[];
  readonly blockSize: number;
  /** Deprecated in vLLM for `lora_name`; numbered by load order, so nothing outside the server can rely on it. */
  readonly loraId: number | null;
  /** Where the blocks are: `GPU` (or null, which means GPU) is the prefix cache; CPU and remote tiers are not. */
  readonly medium: string | null;
  readonly loraName: string | null;
  /** Per block, what vLLM folded into its hash besides the tokens and parent (a tuple, or null); null when absent. */
  readonly extraKeys: ReadonlyArray<VllmExtraKey | null> | null;
  /** The KV-cache group (hybrid models keep one per attention type); null when the server does not say. */
  readonly group: number | null;
  /** The group's kind (`full_attention`, `sliding_window`, `mamba`, ...); null when not said. */
  readonly groupKind: string | null;
  readonly slidingWindow: number | null;
  /** A cache salt the block hashes do NOT include (SGLang's `BlockStoredWithMetadata`); null otherwise. */
  readonly unhashedSalt: string | null;
}
export interface VllmBlockRemoved {
  readonly type: 'removed';
  readonly hashes: VllmBlockHash[];
  readonly medium: string | null;
  readonly group: number | null;
}
/** Blocks moved to another tier without changing identity (TensorRT-LLM's `updated` cache level). */
export interface VllmBlocksMoved {
  readonly type: 'moved';
  readonly hashes: VllmBlockHash[];
  readonly medium: string;
  readonly group: number | null;
}
export interface VllmAllBlocksCleared {
  readonly type: 'cleared';
}
export type VllmKvEvent = VllmBlockStored | VllmBlockRemoved | VllmBlocksMoved | VllmAllBlocksCleared;

export interface VllmKvBatch {
  readonly ts: number;
  readonly events: VllmKvEvent[];
  readonly dataParallelRank: number | null;
  /** Events with a tag this decoder does not know: skipped, counted by the caller. */
  readonly unknownEvents: number;
}

/** What a sender puts in a batch (the encoder writes vLLM's structs; the newer fields are optional). */
export type VllmKvEventInput =
  | {
      type: 'stored';
      hashes: ReadonlyArray<number | bigint>;
      parent: number | bigint | null;
      tokenIds: ArrayLike<number>;
      blockSize: number;
      loraId: number | null;
      medium: string | null;
      loraName: string | null;
      extraKeys?: ReadonlyArray<ReadonlyArray<unknown> | null> | null;
      group?: number | null;
      groupKind?: string | null;
      slidingWindow?: number | null;
    }
  | { type: 'removed'; hashes: ReadonlyArray<number | bigint>; medium: string | null; group?: number | null }
  | { type: 'cleared' };

/** Bounds a decoder enforces: a batch beyond any of them is dropped whole. */
export interface VllmKvLimits {
  maxPayloadBytes: number;
  maxEvents: number;
  /** Block hashes per event. */
  maxHashes: number;
  /** Token ids per BlockStored event. */
  maxTokens: number;
  /** Values in the whole batch (array elements, map keys and values), checked before decoding anything. */
  maxElements?: number;
}

export const DEFAULT_VLLM_KV_LIMITS: Readonly<Required<VllmKvLimits>> = {
  maxPayloadBytes: 8 * 1024 * 1024,
  maxEvents: 4096,
  maxHashes: 8192,
  maxTokens: 262144,
  maxElements: 1 << 20,
};

/** Nesting a batch may have: batch, events, event, extra_keys, one block's keys, and two more inside those. */
const MAX_DEPTH = 7;

/**
 * Encodes one batch as vLLM does: `array` (vLLM's `array_like` structs, the default) or `map`
 * (the newest vLLM). With msgspec's `omit_defaults`, fields that default to null are left out when
 * null: in the array form only trailing ones, in the map form any.
 */
export function encodeVllmKvBatch(
  ts: number,
  events: ReadonlyArray<VllmKvEventInput>,
  dataParallelRank: number | null = 0,
  form: 'array' | 'map' = 'array',
): Uint8Array {
  const wire = events.map((e) => (form === 'array' ? arrayEvent(e) : mapEvent(e)));
  // ts is vLLM's time.time() (float seconds); msgspec's float fields accept a whole number too.
  return encode(dataParallelRank === null ? [ts, wire] : [ts, wire, dataParallelRank], { useBigInt64: true });
}

/** The fields of each event after those without defaults, in order: left out when null (omit_defaults). */
function optionalFields(e: VllmKvEventInput): unknown[] {
  if (e.type === 'stored')
    return [e.extraKeys ?? null, e.group ?? null, e.groupKind ?? null, e.slidingWindow ?? null].map((v) =>
      v === null ? null : Array.isArray(v) ? v.map((k) => (k === null ? null : [...(k as unknown[])])) : v,
    );
  if (e.type === 'removed') return [e.group ?? null];
  return [];
}

function arrayEvent(e: VllmKvEventInput): unknown[] {
  let head: unknown[];
  if (e.type === 'stored')
    head = [VLLM_BLOCK_STORED, e.hashes, e.parent, Array.from(e.tokenIds), e.blockSize, e.loraId, e.medium, e.loraName];
  else if (e.type === 'removed') head = [VLLM_BLOCK_REMOVED, e.hashes, e.medium];
  else head = [VLLM_ALL_BLOCKS_CLEARED];
  const rest = optionalFields(e);
  while (rest.length > 0 && rest[rest.length - 1] === null) rest.pop();
  return [...head, ...rest];
}

function mapEvent(e: VllmKvEventInput): Record<string, unknown> {
  const names = e.type === 'stored' ? STORED_OPTIONAL : e.type === 'removed' ? REMOVED_OPTIONAL : [];
  const out: Record<string, unknown> = {};
  const wire = arrayEvent(e);
  const fields = e.type === 'stored' ? STORED_FIELDS : e.type === 'removed' ? REMOVED_FIELDS : (['type'] as const);
  fields.forEach((name, i) => {
    if (i < wire.length && (wire[i] !== null || !names.includes(name))) out[name] = wire[i];
  });
  return out;
}

/** The sequence frame: unsigned 64-bit big-endian. */
export function encodeVllmSeq(seq: number | bigint): Uint8Array {
  const out = new Uint8Array(8);
  new DataView(out.buffer).setBigUint64(0, BigInt(seq));
  return out;
}

/** -1 as a signed 64-bit big-endian integer: the replay socket's end of a replay. */
export const VLLM_END_SEQ: Uint8Array = new Uint8Array([0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff]);

/** A sequence frame's value; undefined unless exactly 8 bytes and at most 2^53 (-1 is the end marker). */
export function decodeVllmSeq(frame: Uint8Array): number | undefined {
  if (frame.byteLength !== 8) return undefined;
  const v = new DataView(frame.buffer, frame.byteOffset, 8).getBigInt64(0);
  if (v === -1n) return -1;
  if (v < 0n || v > BigInt(Number.MAX_SAFE_INTEGER)) return undefined;
  return Number(v);
}

export type VllmDecodeReason =
  'oversized' | 'not-msgpack' | 'too-complex' | 'malformed' | 'too-many-events' | 'too-many-hashes' | 'too-many-tokens';
export type VllmDecodeResult = { ok: true; batch: VllmKvBatch } | { ok: false; reason: VllmDecodeReason; detail: string };

/** A known event that breaks the layout (or a bound): the batch is dropped whole, by `reason`. */
export class KvWireMalformed extends Error {
  constructor(
    readonly reason: VllmDecodeReason,
    message: string,
  ) {
    super(message);
  }
}

const MAX_SAFE_BIG = BigInt(Number.MAX_SAFE_INTEGER);
const MIN_SAFE_BIG = -MAX_SAFE_BIG;
const HEX: string[] = Array.from({ length: 256 }, (_, i) => i.toString(16).padStart(2, '0'));

/** A block hash as the collector keys it (exact; bytes as hex). Exported for the other engines' decoders. */
export function blockHash(v: unknown, where: string): VllmBlockHash {
  if (typeof v === 'number') {
    if (!Number.isSafeInteger(v)) throw new KvWireMalformed('malformed', `${where}: not an integer hash`);
    return v;
  }
  if (typeof v === 'bigint') return v <= MAX_SAFE_BIG && v >= MIN_SAFE_BIG ? Number(v) : v;
  if (v instanceof Uint8Array && v.byteLength > 0 && v.byteLength <= 64) {
    let s = '';
    for (let i = 0; i < v.byteLength; i++) s += HEX[v[i] as number];
    return s;
  }
  throw new KvWireMalformed('malformed', `${where}: a block hash must be an integer or 1-64 bytes`);
}

function hashList(v: unknown, where: string, limits: VllmKvLimits): VllmBlockHash[] {
  if (!Array.isArray(v)) throw new KvWireMalformed('malformed', `${where}: block_hashes is not an array`);
  if (v.length > limits.maxHashes) throw new KvWireMalformed('too-many-hashes', `${where}: ${v.length} block hashes`);
  const out = new Array<VllmBlockHash>(v.length);
  for (let i = 0; i < v.length; i++) out[i] = blockHash(v[i], where);
  return out;
}

function optionalString(v: unknown, where: string): string | null {
  if (v === undefined || v === null) return null;
  if (typeof v !== 'string') throw new KvWireMalformed('malformed', `${where} is not a string`);
  return v;
}

function smallInt(v: unknown): number | undefined {
  if (typeof v === 'bigint') return v <= MAX_SAFE_BIG && v >= MIN_SAFE_BIG ? Number(v) : undefined;
  return typeof v === 'number' && Number.isSafeInteger(v) ? v : undefined;
}

function optionalInt(v: unknown, where: string, min: number): number | null {
  if (v === undefined || v === null) return null;
  const n = smallInt(v);
  if (n === undefined || n < min) throw new KvWireMalformed('malformed', `${where} is not an integer >= ${min}`);
  return n;
}

function isMap(v: unknown): v is Record<string, unknown> {
  return v !== null && typeof v === 'object' && !Array.isArray(v) && !(v instanceof Uint8Array);
}

/** `extra_keys`: null, or one entry (a tuple, or null) per block. */
function extraKeyList(v: unknown, blocks: number, where: string): Array<VllmExtraKey | null> | null {
  if (v === undefined || v === null) return null;
  if (!Array.isArray(v)) throw new KvWireMalformed('malformed', `${where}: extra_keys is not a list`);
  if (v.length !== blocks) throw new KvWireMalformed('malformed', `${where}: ${v.length} extra_keys for ${blocks} blocks`);
  for (let i = 0; i < v.length; i++)
    if (v[i] !== null && !Array.isArray(v[i])) throw new KvWireMalformed('malformed', `${where}: extra_keys[${i}] is not a tuple`);
  return v as Array<VllmExtraKey | null>;
}

/** SGLang's `BlockStoredWithMetadata.metadata`: `{cache_salt}`. */
function saltOf(v: unknown, where: string): string | null {
  if (!isMap(v)) return null;
  const salt = v['cache_salt'];
  if (salt === undefined || salt === null) return null;
  if (typeof salt !== 'string') throw new KvWireMalformed('malformed', `${where}: metadata.cache_salt is not a string`);
  return salt;
}

const STORED_FIELDS = [
  'type',
  'block_hashes',
  'parent_block_hash',
  'token_ids',
  'block_size',
  'lora_id',
  'medium',
  'lora_name',
  'extra_keys',
  'group_idx',
  'kv_cache_spec_kind',
  'kv_cache_spec_sliding_window',
] as const;
const REMOVED_FIELDS = ['type', 'block_hashes', 'medium', 'group_idx'] as const;
/** Fields with a default (msgspec omits them at it), by name. */
const STORED_OPTIONAL: readonly string[] = ['extra_keys', 'group_idx', 'kv_cache_spec_kind', 'kv_cache_spec_sliding_window'];
const REMOVED_OPTIONAL: readonly string[] = ['group_idx'];

/** A map-encoded event (the newest vLLM) as the array form: its tag, then its fields in array order. */
function asArray(raw: Record<string, unknown>): unknown[] {
  const fields =
    raw['type'] === VLLM_BLOCK_STORED ? STORED_FIELDS : raw['type'] === VLLM_BLOCK_REMOVED ? REMOVED_FIELDS : (['type'] as const);
  return fields.map((f) => raw[f]);
}

function storedEvent(raw: readonly unknown[], where: string, limits: VllmKvLimits): VllmBlockStored {
  if (raw.length < 5) throw new KvWireMalformed('malformed', `${where}: BlockStored has ${raw.length} fields`);
  const hashes = hashList(raw[1], where, limits);
  const parent = raw[2] === null || raw[2] === undefined ? null : blockHash(raw[2], `${where}.parent_block_hash`);
  const tokens = raw[3];
  if (!Array.isArray(tokens)) throw new KvWireMalformed('malformed', `${where}: token_ids is not an array`);
  if (tokens.length > limits.maxTokens) throw new KvWireMalformed('too-many-tokens', `${where}: ${tokens.length} token ids`);
  for (let t = 0; t < tokens.length; t++) {
    const id = tokens[t] as unknown;
    if (typeof id !== 'number' || !(id >= 0 && id <= 0xffffffff) || !Number.isInteger(id))
      throw new KvWireMalformed('malformed', `${where}: token_ids[${t}] is not a 32-bit id`);
  }
  const blockSize = smallInt(raw[4]);
  if (blockSize === undefined || blockSize < 1 || blockSize > 4096)
    throw new KvWireMalformed('malformed', `${where}: block_size is not 1..4096`);
  // Position 7 is vLLM's lora_name, or SGLang's metadata map.
  const seventh = raw[7];
  return {
    type: 'stored',
    hashes,
    parent,
    tokenIds: tokens as number[],
    blockSize,
    loraId: optionalInt(raw[5], `${where}.lora_id`, Number.MIN_SAFE_INTEGER),
    medium: optionalString(raw[6], `${where}.medium`),
    loraName: isMap(seventh) ? null : optionalString(seventh, `${where}.lora_name`),
    extraKeys: extraKeyList(raw[8], hashes.length, where),
    group: optionalInt(raw[9], `${where}.group_idx`, 0),
    groupKind: optionalString(raw[10], `${where}.kv_cache_spec_kind`),
    slidingWindow: optionalInt(raw[11], `${where}.kv_cache_spec_sliding_window`, 0),
    unhashedSalt: isMap(seventh) ? saltOf(seventh, where) : null,
  };
}

function event(input: unknown, i: number, limits: VllmKvLimits): VllmKvEvent | undefined {
  const where = `events[${i}]`;
  const raw = isMap(input) ? asArray(input) : input;
  if (!Array.isArray(raw) || typeof raw[0] !== 'string') throw new KvWireMalformed('malformed', `${where}: not a tagged array or map`);
  switch (raw[0]) {
    case VLLM_BLOCK_STORED:
      return storedEvent(raw, where, limits);
    case VLLM_BLOCK_REMOVED:
      if (raw.length < 2) throw new KvWireMalformed('malformed', `${where}: BlockRemoved has ${raw.length} fields`);
      return {
        type: 'removed',
        hashes: hashList(raw[1], where, limits),
        medium: optionalString(raw[2], `${where}.medium`),
        group: optionalInt(raw[3], `${where}.group_idx`, 0),
      };
    case VLLM_ALL_BLOCKS_CLEARED:
      return { type: 'cleared' };
    default:
      return undefined;
  }
}

/**
 * Decodes and validates one batch payload; never throws. The payload is a model server's, which
 * the collector does not trust: its shape is checked first (`scanMsgpack`: nesting, number of
 * values, string and binary lengths) without building anything, so a hostile payload costs what
 * reading its bytes up to the first violation costs; only then is it decoded, and each known event
 * checked field by field. A malformed known event or any bound exceeded drops the batch whole; an
 * event with an unknown tag is skipped and counted in `unknownEvents`.
 */
export function decodeVllmKvBatch(payload: Uint8Array, limits: VllmKvLimits = DEFAULT_VLLM_KV_LIMITS): VllmDecodeResult {
  if (payload.byteLength > limits.maxPayloadBytes) return { ok: false, reason: 'oversized', detail: `${payload.byteLength} bytes` };
  const shape = scanMsgpack(payload, {
    maxDepth: MAX_DEPTH,
    maxElements: limits.maxElements ?? DEFAULT_VLLM_KV_LIMITS.maxElements,
    maxStrBytes: 1024,
    maxBinBytes: 64,
  });
  if (shape) return { ok: false, reason: shape.kind === 'not-msgpack' ? 'not-msgpack' : 'too-complex', detail: shape.message };
  let raw: unknown;
  try {
    raw = decode(payload, { useBigInt64: true });
  } catch (error) {
    return { ok: false, reason: 'not-msgpack', detail: error instanceof Error ? error.message : String(error) };
  }
  try {
    if (isMap(raw)) raw = [raw['ts'], raw['events'], raw['data_parallel_rank']];
    if (!Array.isArray(raw) || raw.length < 2)
      throw new KvWireMalformed('malformed', 'the batch is not [ts, events, ...] nor {ts, events, ...}');
    const ts = typeof raw[0] === 'bigint' ? Number(raw[0]) : raw[0];
    if (typeof ts !== 'number' || !Number.isFinite(ts)) throw new KvWireMalformed('malformed', 'ts is not a number');
    const list = raw[1];
    if (!Array.isArray(list)) throw new KvWireMalformed('malformed', 'events is not an array');
    if (list.length > limits.maxEvents) throw new KvWireMalformed('too-many-events', `${list.length} events`);
    const events: VllmKvEvent[] = [];
    let unknownEvents = 0;
    for (let i = 0; i < list.length; i++) {
      const e = event(list[i], i, limits);
      if (e) events.push(e);
      else unknownEvents++;
    }
    const rank = optionalInt(raw[2], 'data_parallel_rank', 0);
    return { ok: true, batch: { ts, events, dataParallelRank: rank, unknownEvents } };
  } catch (error) {
    if (error instanceof KvWireMalformed) return { ok: false, reason: error.reason, detail: error.message };
    throw error;
  }
}
