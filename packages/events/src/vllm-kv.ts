import { decode, encode } from '@msgpack/msgpack';

/**
 * vLLM's KV-cache event wire format, as its ZeroMQ publisher sends it (`vllm/distributed/kv_events.py`,
 * msgspec structs with `array_like=True` and `tag=True`; docs/kv-events.md names the version
 * followed). A PUB message has three frames `[topic, seq, payload]`: `seq` an unsigned 64-bit
 * big-endian integer, +1 per batch; the payload a msgpack `KVEventBatch` array
 * `[ts, events, data_parallel_rank]` whose events are arrays led by their class name:
 *
 *   ["BlockStored", block_hashes, parent_block_hash|nil, token_ids, block_size, lora_id|nil, medium|nil, lora_name|nil]
 *   ["BlockRemoved", block_hashes, medium|nil]
 *   ["AllBlocksCleared"]
 *
 * Later vLLM versions append fields (and older ones stop at `lora_id`/`block_hashes`); a decoder
 * reads the fields it knows and ignores trailing ones. The newest vLLM encodes the same structs as
 * maps (`{ts, events, data_parallel_rank}`, events `{type: "BlockStored", block_hashes, ...}`):
 * the decoder reads that form too, by field name. Block hashes are integers (64-bit, so a
 * decoder keeps them exact as bigint) or, with vLLM's byte hashes, `bin` strings. `spillway-sim`
 * encodes with this module and the collector decodes with it: one definition of the layout.
 */
export const VLLM_BLOCK_STORED = 'BlockStored';
export const VLLM_BLOCK_REMOVED = 'BlockRemoved';
export const VLLM_ALL_BLOCKS_CLEARED = 'AllBlocksCleared';
export const VLLM_MEDIUM_GPU = 'GPU';

/** A server block hash as decoded: a safe integer, a bigint beyond 2^53, or the hex of a byte hash. */
export type VllmBlockHash = number | bigint | string;

export interface VllmBlockStored {
  readonly type: 'stored';
  readonly hashes: VllmBlockHash[];
  readonly parent: VllmBlockHash | null;
  readonly tokenIds: number[];
  readonly blockSize: number;
  readonly loraId: number | null;
  readonly medium: string | null;
  readonly loraName: string | null;
}
export interface VllmBlockRemoved {
  readonly type: 'removed';
  readonly hashes: VllmBlockHash[];
  readonly medium: string | null;
}
export interface VllmAllBlocksCleared {
  readonly type: 'cleared';
}
export type VllmKvEvent = VllmBlockStored | VllmBlockRemoved | VllmAllBlocksCleared;

export interface VllmKvBatch {
  readonly ts: number;
  readonly events: VllmKvEvent[];
  readonly dataParallelRank: number | null;
  /** Events with a tag this decoder does not know: skipped, counted by the caller. */
  readonly unknownEvents: number;
}

/** What a sender puts in a batch (the encoder writes vLLM's arrays). */
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
    }
  | { type: 'removed'; hashes: ReadonlyArray<number | bigint>; medium: string | null }
  | { type: 'cleared' };

/** Bounds a decoder enforces: a batch beyond any of them is dropped whole. */
export interface VllmKvLimits {
  maxPayloadBytes: number;
  maxEvents: number;
  /** Block hashes per event. */
  maxHashes: number;
  /** Token ids per BlockStored event. */
  maxTokens: number;
}

export const DEFAULT_VLLM_KV_LIMITS: Readonly<VllmKvLimits> = {
  maxPayloadBytes: 8 * 1024 * 1024,
  maxEvents: 4096,
  maxHashes: 8192,
  maxTokens: 262144,
};

export function encodeVllmKvBatch(ts: number, events: ReadonlyArray<VllmKvEventInput>, dataParallelRank: number | null = 0): Uint8Array {
  const wire = events.map((e) => {
    switch (e.type) {
      case 'stored':
        return [VLLM_BLOCK_STORED, e.hashes, e.parent, Array.from(e.tokenIds), e.blockSize, e.loraId, e.medium, e.loraName];
      case 'removed':
        return [VLLM_BLOCK_REMOVED, e.hashes, e.medium];
      case 'cleared':
        return [VLLM_ALL_BLOCKS_CLEARED];
    }
  });
  // ts is vLLM's time.time() (float seconds); msgspec's float fields accept a whole number too.
  return encode(dataParallelRank === null ? [ts, wire] : [ts, wire, dataParallelRank], { useBigInt64: true });
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

export type VllmDecodeReason = 'oversized' | 'not-msgpack' | 'malformed' | 'too-many-events' | 'too-many-hashes' | 'too-many-tokens';
export type VllmDecodeResult = { ok: true; batch: VllmKvBatch } | { ok: false; reason: VllmDecodeReason; detail: string };

class Malformed extends Error {
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

function blockHash(v: unknown, where: string): VllmBlockHash {
  if (typeof v === 'number') {
    if (!Number.isSafeInteger(v)) throw new Malformed('malformed', `${where}: not an integer hash`);
    return v;
  }
  if (typeof v === 'bigint') return v <= MAX_SAFE_BIG && v >= MIN_SAFE_BIG ? Number(v) : v;
  if (v instanceof Uint8Array && v.byteLength > 0 && v.byteLength <= 64) {
    let s = '';
    for (let i = 0; i < v.byteLength; i++) s += HEX[v[i] as number];
    return s;
  }
  throw new Malformed('malformed', `${where}: a block hash must be an integer or 1-64 bytes`);
}

function hashList(v: unknown, where: string, limits: VllmKvLimits): VllmBlockHash[] {
  if (!Array.isArray(v)) throw new Malformed('malformed', `${where}: block_hashes is not an array`);
  if (v.length > limits.maxHashes) throw new Malformed('too-many-hashes', `${where}: ${v.length} block hashes`);
  const out = new Array<VllmBlockHash>(v.length);
  for (let i = 0; i < v.length; i++) out[i] = blockHash(v[i], where);
  return out;
}

function optionalString(v: unknown, where: string): string | null {
  if (v === undefined || v === null) return null;
  if (typeof v !== 'string') throw new Malformed('malformed', `${where} is not a string`);
  return v;
}

function smallInt(v: unknown): number | undefined {
  if (typeof v === 'bigint') return v <= MAX_SAFE_BIG && v >= MIN_SAFE_BIG ? Number(v) : undefined;
  return typeof v === 'number' && Number.isSafeInteger(v) ? v : undefined;
}

const STORED_FIELDS = ['type', 'block_hashes', 'parent_block_hash', 'token_ids', 'block_size', 'lora_id', 'medium', 'lora_name'] as const;
const REMOVED_FIELDS = ['type', 'block_hashes', 'medium'] as const;

/** A map-encoded event (newer vLLM) as the array form: its tag, then its fields in array order. */
function asArray(raw: object): unknown[] {
  const r = raw as Record<string, unknown>;
  const fields = r['type'] === VLLM_BLOCK_STORED ? STORED_FIELDS : r['type'] === VLLM_BLOCK_REMOVED ? REMOVED_FIELDS : (['type'] as const);
  return fields.map((f) => r[f]);
}

function event(input: unknown, i: number, limits: VllmKvLimits): VllmKvEvent | undefined {
  const where = `events[${i}]`;
  const raw =
    input !== null && typeof input === 'object' && !Array.isArray(input) && !(input instanceof Uint8Array) ? asArray(input) : input;
  if (!Array.isArray(raw) || typeof raw[0] !== 'string') throw new Malformed('malformed', `${where}: not a tagged array`);
  switch (raw[0]) {
    case VLLM_BLOCK_STORED: {
      if (raw.length < 5) throw new Malformed('malformed', `${where}: BlockStored has ${raw.length} fields`);
      const hashes = hashList(raw[1], where, limits);
      const parent = raw[2] === null || raw[2] === undefined ? null : blockHash(raw[2], `${where}.parent_block_hash`);
      const tokens = raw[3];
      if (!Array.isArray(tokens)) throw new Malformed('malformed', `${where}: token_ids is not an array`);
      if (tokens.length > limits.maxTokens) throw new Malformed('too-many-tokens', `${where}: ${tokens.length} token ids`);
      for (let t = 0; t < tokens.length; t++) {
        const id = tokens[t] as unknown;
        if (typeof id !== 'number' || !(id >= 0 && id <= 0xffffffff) || !Number.isInteger(id))
          throw new Malformed('malformed', `${where}: token_ids[${t}] is not a 32-bit id`);
      }
      const blockSize = smallInt(raw[4]);
      if (blockSize === undefined || blockSize < 1 || blockSize > 4096)
        throw new Malformed('malformed', `${where}: block_size is not 1..4096`);
      const loraId = raw[5] === null || raw[5] === undefined ? null : smallInt(raw[5]);
      if (loraId === undefined) throw new Malformed('malformed', `${where}: lora_id is not an integer`);
      return {
        type: 'stored',
        hashes,
        parent,
        tokenIds: tokens as number[],
        blockSize,
        loraId,
        medium: optionalString(raw[6], `${where}.medium`),
        loraName: optionalString(raw[7], `${where}.lora_name`),
      };
    }
    case VLLM_BLOCK_REMOVED:
      if (raw.length < 2) throw new Malformed('malformed', `${where}: BlockRemoved has ${raw.length} fields`);
      return { type: 'removed', hashes: hashList(raw[1], where, limits), medium: optionalString(raw[2], `${where}.medium`) };
    case VLLM_ALL_BLOCKS_CLEARED:
      return { type: 'cleared' };
    default:
      return undefined;
  }
}

/**
 * Decodes and validates one batch payload; never throws. Checked by hand, field by field (this is
 * the relay's per-event hot path): a malformed known event or any bound exceeded drops the batch
 * whole; an event with an unknown tag is skipped and counted in `unknownEvents`.
 */
export function decodeVllmKvBatch(payload: Uint8Array, limits: VllmKvLimits = DEFAULT_VLLM_KV_LIMITS): VllmDecodeResult {
  if (payload.byteLength > limits.maxPayloadBytes) return { ok: false, reason: 'oversized', detail: `${payload.byteLength} bytes` };
  let raw: unknown;
  try {
    raw = decode(payload, {
      useBigInt64: true,
      maxStrLength: 1024,
      maxBinLength: 64,
      maxArrayLength: Math.max(64, limits.maxEvents, limits.maxHashes, limits.maxTokens),
      maxMapLength: 64,
      maxExtLength: 0,
    });
  } catch (error) {
    return { ok: false, reason: 'not-msgpack', detail: error instanceof Error ? error.message : String(error) };
  }
  try {
    if (raw !== null && typeof raw === 'object' && !Array.isArray(raw) && !(raw instanceof Uint8Array)) {
      const r = raw as Record<string, unknown>;
      raw = [r['ts'], r['events'], r['data_parallel_rank']];
    }
    if (!Array.isArray(raw) || raw.length < 2) throw new Malformed('malformed', 'the batch is not [ts, events, ...] nor {ts, events, ...}');
    const ts = typeof raw[0] === 'bigint' ? Number(raw[0]) : raw[0];
    if (typeof ts !== 'number' || !Number.isFinite(ts)) throw new Malformed('malformed', 'ts is not a number');
    const list = raw[1];
    if (!Array.isArray(list)) throw new Malformed('malformed', 'events is not an array');
    if (list.length > limits.maxEvents) throw new Malformed('too-many-events', `${list.length} events`);
    const events: VllmKvEvent[] = [];
    let unknownEvents = 0;
    for (let i = 0; i < list.length; i++) {
      const e = event(list[i], i, limits);
      if (e) events.push(e);
      else unknownEvents++;
    }
    const rank = raw[2] === undefined || raw[2] === null ? null : smallInt(raw[2]);
    if (rank === undefined) throw new Malformed('malformed', 'data_parallel_rank is not an integer');
    return { ok: true, batch: { ts, events, dataParallelRank: rank, unknownEvents } };
  } catch (error) {
    if (error instanceof Malformed) return { ok: false, reason: error.reason, detail: error.message };
    throw error;
  }
}
