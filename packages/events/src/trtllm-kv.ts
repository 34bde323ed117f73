import { KvWireMalformed, VLLM_MEDIUM_GPU, type VllmBlockHash, type VllmKvEvent, type VllmKvLimits } from './vllm-kv.js';

/**
 * TensorRT-LLM's KV-cache events, as `trtllm-serve` answers `POST /kv_cache_events`: a JSON array
 * of the events queued since the last call (`tensorrt_llm/_utils.py` `KVCacheEventSerializer`;
 * the V2 cache manager's events, `tensorrt_llm/runtime/kv_cache_manager_v2/_event_manager.py`
 * `KVCacheEvent`, serialize the same way with two more fields). Each event:
 *
 *   { event_id, window_size, attention_dp_rank?, hash_algo?, layer_group_id?, data }
 *   data: { type: "created", num_blocks_per_cache_level }
 *       | { type: "stored", parent_hash, blocks: [{ type: "stored_block", block_hash,
 *             tokens: [{ type: "unique_token", token_id, token_extra_id }], cache_level, priority,
 *             lora_id?, mm_keys? }] }
 *       | { type: "removed", block_hashes }
 *       | { type: "updated", block_hash, cache_level: { old_value, new_value } | null, priority }
 *
 * `event_id` counts up by one per event of one cache manager (per attention-DP rank); the queue
 * drops its oldest events when full, so a jump is lost events. There is no replay. Cache level 0
 * is the GPU, higher levels are host or disk offload tiers. Window sizes (V1: variable sliding
 * windows) and `layer_group_id` (V2) tell a hybrid model's groups apart; `hash_algo` names how the
 * server hashed its blocks (`v1_block_key`, `v2_sha256`, `v2_sha256_64`), which the collector does
 * not need: it keys blocks by their tokens. Block hashes are integers or, with `v2_sha256`, hex strings.
 *
 * Decoded into the collector's common vocabulary (`VllmKvEvent`): `created` becomes `cleared` (a
 * new cache is empty), a stored event one `stored` per run of blocks on the same level, a level
 * change `moved`. Tokens with a `token_extra_id`, and blocks with `mm_keys`, carry extra keys
 * (their content is not their token ids alone).
 */
export interface TrtllmKvEvent {
  /** The manager's event counter (+1 per event). */
  readonly id: number;
  /** The attention-DP rank whose cache it is (null without attention DP). */
  readonly rank: number | null;
  /** What it means for the cache, in the common vocabulary (empty for an event that changes nothing routed on). */
  readonly events: VllmKvEvent[];
  /**
   * A stored chain's first block checked against TensorRT-LLM's V1 block hash of its tokens alone
   * (`trtllmV1BlockHash`): `base` when its hash is that, `other` when not (a LoRA adapter's block,
   * a salted request's, one hashed with extra token ids; or a server that hashes otherwise). Only
   * for a V1-hashed chain start (`hash_algo` absent or `v1_block_key`) without extra keys.
   */
  readonly v1Root?: 'base' | 'other';
}

const MASK64 = (1n << 64n) - 1n;
const PARENT_MULTIPLIER = 0xbf58476d1ce4e5b9n;

/**
 * TensorRT-LLM's V1 block hash of a block of plain token ids under no LoRA task and no cache salt:
 * `hash_v1_block_key(tokens, parent_hash)` of `tensorrt_llm/runtime/kv_cache_hash.py` (its
 * reference for the C++ `BlockKeyHasher::hash`, `cpp/tensorrt_llm/batch_manager/kvCacheManager.cpp`),
 * which a LoRA task id or a salt would change: the seed `len ^ parent * 0xbf58476d1ce4e5b9`, then
 * per token its 32-bit mix (two rounds of `((x >> 16) ^ x) * 0x45d9f3b`, a final xor-shift, plus
 * 0x9e3779b9, all in 32 bits) combined as `seed ^= x + (seed << 6) + (seed >> 2)` in 64 bits.
 */
export function trtllmV1BlockHash(tokens: readonly number[], parent = 0n): bigint {
  let seed = (BigInt(tokens.length) ^ ((parent * PARENT_MULTIPLIER) & MASK64)) & MASK64;
  for (const token of tokens) {
    let x = token >>> 0;
    x = Math.imul((x >>> 16) ^ x, 0x45d9f3b) >>> 0;
    x = Math.imul((x >>> 16) ^ x, 0x45d9f3b) >>> 0;
    x = ((x >>> 16) ^ x) >>> 0;
    x = (x + 0x9e3779b9) >>> 0;
    const combined = (BigInt(x) + ((seed << 6n) & MASK64) + (seed >> 2n)) & MASK64;
    seed = (seed ^ combined) & MASK64;
  }
  return seed;
}

/** Whether a reported block hash is `computed` (a hash beyond 2^53 arrives as the nearest double of it). */
function sameHash(reported: VllmBlockHash, computed: bigint): boolean {
  if (typeof reported === 'string') return false;
  return BigInt(reported) === BigInt(Number(computed));
}

export type TrtllmDecodeResult =
  | { ok: true; events: TrtllmKvEvent[]; unknownEvents: number }
  | {
      ok: false;
      reason: 'oversized' | 'not-json' | 'too-complex' | 'malformed' | 'too-many-events' | 'too-many-hashes' | 'too-many-tokens';
      detail: string;
    };

/** Nesting of a valid answer: list, event, data, blocks, block, tokens, token (and mm_keys inside a block). */
const MAX_JSON_DEPTH = 8;

/**
 * Checks a JSON text's nesting and number of values without parsing it (one pass over the
 * characters, strings skipped): the answer of a server the collector does not trust is refused
 * before `JSON.parse` builds anything.
 */
export function scanJson(text: string, maxDepth: number, maxValues: number): string | undefined {
  let depth = 0;
  let values = 0;
  let inString = false;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (inString) {
      if (c === 0x5c) i++;
      else if (c === 0x22) inString = false;
      continue;
    }
    if (c === 0x22) inString = true;
    else if (c === 0x5b || c === 0x7b) {
      if (++depth > maxDepth) return `nested deeper than ${maxDepth}`;
      if (++values > maxValues) return `more than ${maxValues} values`;
    } else if (c === 0x5d || c === 0x7d) depth--;
    else if (c === 0x2c && ++values > maxValues) return `more than ${maxValues} values`;
  }
  return undefined;
}

function obj(v: unknown, where: string): Record<string, unknown> {
  if (v === null || typeof v !== 'object' || Array.isArray(v)) throw new KvWireMalformed('malformed', `${where} is not an object`);
  return v as Record<string, unknown>;
}

function int(v: unknown, where: string, min = 0): number {
  if (typeof v !== 'number' || !Number.isSafeInteger(v) || v < min)
    throw new KvWireMalformed('malformed', `${where} is not an integer >= ${min}`);
  return v;
}

function optionalInt(v: unknown, where: string): number | null {
  return v === undefined || v === null ? null : int(v, where);
}

/**
 * A block hash: an integer (beyond 2^53 JSON.parse keeps it only to the nearest double, which is
 * still the same value every time the server sends that hash, so pairing stores and removals
 * works; two hashes closer than 2^11 would collide, a chance of 2^-53 per pair) or a hex string.
 */
function hash(v: unknown, where: string): VllmBlockHash {
  if (typeof v === 'number' && Number.isInteger(v)) return Number.isSafeInteger(v) ? v : BigInt(v);
  if (typeof v === 'string' && v.length > 0 && v.length <= 128) return v;
  throw new KvWireMalformed('malformed', `${where}: a block hash must be an integer or a string of 1-128 characters`);
}

function mediumOf(level: number): string {
  return level === 0 ? VLLM_MEDIUM_GPU : `cache_level:${level}`;
}

interface StoredBlock {
  hash: VllmBlockHash;
  tokens: number[];
  level: number;
  loraId: number | null;
  extra: unknown[] | null;
}

function storedBlock(v: unknown, where: string, limits: VllmKvLimits): StoredBlock {
  const b = obj(v, where);
  const tokens = b['tokens'];
  if (!Array.isArray(tokens)) throw new KvWireMalformed('malformed', `${where}.tokens is not a list`);
  if (tokens.length > limits.maxTokens) throw new KvWireMalformed('too-many-tokens', `${where}: ${tokens.length} tokens`);
  const ids = new Array<number>(tokens.length);
  const extraIds: unknown[] = [];
  for (let t = 0; t < tokens.length; t++) {
    const token = obj(tokens[t], `${where}.tokens[${t}]`);
    const id = token['token_id'];
    const extra = token['token_extra_id'] ?? 0;
    if (typeof id === 'number' && Number.isInteger(id) && id >= 0 && id <= 0xffffffff) ids[t] = id;
    else if (typeof id === 'string' && id.length <= 256) {
      // A non-text token (V2): its content is not a token id; it makes the block an extra-keyed one.
      ids[t] = 0;
      extraIds.push(id);
    } else throw new KvWireMalformed('malformed', `${where}.tokens[${t}].token_id is not a token id`);
    if (extra !== 0) extraIds.push(int(extra, `${where}.tokens[${t}].token_extra_id`));
  }
  const mmKeys = b['mm_keys'];
  if (mmKeys !== undefined && mmKeys !== null && !Array.isArray(mmKeys))
    throw new KvWireMalformed('malformed', `${where}.mm_keys is not a list`);
  const hasMm = Array.isArray(mmKeys) && mmKeys.length > 0;
  return {
    hash: hash(b['block_hash'], `${where}.block_hash`),
    tokens: ids,
    level: int(b['cache_level'] ?? 0, `${where}.cache_level`),
    loraId: optionalInt(b['lora_id'], `${where}.lora_id`),
    extra: hasMm || extraIds.length > 0 ? [hasMm ? mmKeys : null, extraIds] : null,
  };
}

/** A stored event: one `stored` per run of consecutive blocks on one level, chained. */
/** A stored event in the common vocabulary, and the V1 check of the chain start it begins with (if any). */
function stored(
  data: Record<string, unknown>,
  place: { group: number | null; window: number | null; v1: boolean },
  where: string,
  limits: VllmKvLimits,
): { events: VllmKvEvent[]; v1Root?: 'base' | 'other' } {
  const { group, window } = place;
  const list = data['blocks'];
  if (!Array.isArray(list)) throw new KvWireMalformed('malformed', `${where}.blocks is not a list`);
  if (list.length > limits.maxHashes) throw new KvWireMalformed('too-many-hashes', `${where}: ${list.length} blocks`);
  const blocks = list.map((b, i) => storedBlock(b, `${where}.blocks[${i}]`, limits));
  const out: VllmKvEvent[] = [];
  let parent: VllmBlockHash | null =
    data['parent_hash'] === undefined || data['parent_hash'] === null ? null : hash(data['parent_hash'], `${where}.parent_hash`);
  for (let start = 0; start < blocks.length;) {
    const first = blocks[start] as StoredBlock;
    let end = start + 1;
    while (
      end < blocks.length &&
      (blocks[end] as StoredBlock).level === first.level &&
      (blocks[end] as StoredBlock).loraId === first.loraId
    )
      end++;
    const run = blocks.slice(start, end);
    const blockSize = first.tokens.length;
    out.push({
      type: 'stored',
      hashes: run.map((b) => b.hash),
      parent,
      // A block of another length than the first makes the token count disagree: the collector skips the run (token-mismatch).
      tokenIds: run.flatMap((b) => (b.tokens.length === blockSize ? b.tokens : [...b.tokens, -1])),
      blockSize: Math.max(1, blockSize),
      loraId: first.loraId,
      medium: mediumOf(first.level),
      loraName: null,
      extraKeys: run.some((b) => b.extra !== null) ? run.map((b) => b.extra) : null,
      group,
      groupKind: null,
      slidingWindow: window,
      unhashedSalt: null,
    });
    parent = (run[run.length - 1] as StoredBlock).hash;
    start = end;
  }
  const root = blocks[0];
  if (!place.v1 || root === undefined || (data['parent_hash'] !== undefined && data['parent_hash'] !== null) || root.extra !== null)
    return { events: out };
  return { events: out, v1Root: sameHash(root.hash, trtllmV1BlockHash(root.tokens)) ? 'base' : 'other' };
}

function decodeEvent(v: unknown, where: string, limits: VllmKvLimits): TrtllmKvEvent | undefined {
  const e = obj(v, where);
  const id = int(e['event_id'], `${where}.event_id`);
  const rank = optionalInt(e['attention_dp_rank'], `${where}.attention_dp_rank`);
  const window = optionalInt(e['window_size'], `${where}.window_size`);
  // V2 names its groups; V1 tells variable sliding windows apart by their window size.
  const group = optionalInt(e['layer_group_id'], `${where}.layer_group_id`) ?? window;
  // Hashed as the V1 cache manager does: the V1 manager (no hash_algo) or a V2 one told to.
  const algo = e['hash_algo'];
  if (algo !== undefined && algo !== null && (typeof algo !== 'string' || algo.length > 64))
    throw new KvWireMalformed('malformed', `${where}.hash_algo is not a name`);
  const v1 = algo === undefined || algo === null || algo === 'v1_block_key';
  const data = obj(e['data'], `${where}.data`);
  switch (data['type']) {
    case 'created':
      return { id, rank, events: [{ type: 'cleared' }] };
    case 'stored':
      return { id, rank, ...stored(data, { group, window, v1 }, `${where}.data`, limits) };
    case 'removed': {
      const hashes = data['block_hashes'];
      if (!Array.isArray(hashes)) throw new KvWireMalformed('malformed', `${where}.data.block_hashes is not a list`);
      if (hashes.length > limits.maxHashes) throw new KvWireMalformed('too-many-hashes', `${where}: ${hashes.length} hashes`);
      return {
        id,
        rank,
        events: [{ type: 'removed', hashes: hashes.map((h, i) => hash(h, `${where}.data.block_hashes[${i}]`)), medium: null, group }],
      };
    }
    case 'updated': {
      const level = data['cache_level'];
      if (level === undefined || level === null) return { id, rank, events: [] };
      const to = int(obj(level, `${where}.data.cache_level`)['new_value'], `${where}.data.cache_level.new_value`);
      return {
        id,
        rank,
        events: [{ type: 'moved', hashes: [hash(data['block_hash'], `${where}.data.block_hash`)], medium: mediumOf(to), group }],
      };
    }
    default:
      return undefined;
  }
}

/**
 * Decodes and validates one answer of `/kv_cache_events`; never throws. The text is checked for
 * size and nesting before it is parsed; a malformed known event or any bound exceeded drops the
 * answer whole; events of an unknown type are skipped (with their id, so they make no gap) and counted.
 */
export function decodeTrtllmKvEvents(text: string, limits: VllmKvLimits): TrtllmDecodeResult {
  if (text.length > limits.maxPayloadBytes) return { ok: false, reason: 'oversized', detail: `${text.length} characters` };
  const shape = scanJson(text, MAX_JSON_DEPTH, limits.maxElements ?? 1 << 20);
  if (shape) return { ok: false, reason: 'too-complex', detail: shape };
  let raw: unknown;
  try {
    raw = JSON.parse(text);
  } catch (error) {
    return { ok: false, reason: 'not-json', detail: (error as Error).message };
  }
  if (!Array.isArray(raw)) return { ok: false, reason: 'malformed', detail: 'the answer is not a list of events' };
  if (raw.length > limits.maxEvents) return { ok: false, reason: 'too-many-events', detail: `${raw.length} events` };
  try {
    const events: TrtllmKvEvent[] = [];
    let unknownEvents = 0;
    for (let i = 0; i < raw.length; i++) {
      const e = decodeEvent(raw[i], `events[${i}]`, limits);
      if (e) events.push(e);
      else {
        unknownEvents++;
        // Its id still counts: an unknown event is not a lost one.
        const id = (raw[i] as { event_id?: unknown }).event_id;
        const rank = (raw[i] as { attention_dp_rank?: unknown }).attention_dp_rank;
        if (typeof id === 'number' && Number.isSafeInteger(id))
          events.push({ id, rank: typeof rank === 'number' && Number.isSafeInteger(rank) ? rank : null, events: [] });
      }
    }
    return { ok: true, events, unknownEvents };
  } catch (error) {
    if (error instanceof KvWireMalformed) return { ok: false, reason: error.reason as 'malformed', detail: error.message };
    throw error;
  }
}
