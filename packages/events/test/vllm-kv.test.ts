import { encode } from '@msgpack/msgpack';
import { describe, expect, it } from 'vitest';
import {
  decodeVllmKvBatch,
  decodeVllmSeq,
  DEFAULT_VLLM_KV_LIMITS,
  encodeVllmKvBatch,
  encodeVllmSeq,
  VLLM_END_SEQ,
  type VllmBlockStored,
  type VllmKvEventInput,
} from '../src/index.js';

const stored = ['BlockStored', [11, 12], null, [1, 2, 3, 4], 2, null, 'GPU', null];
const big = 0xfedcba9876543210n;

/** A BlockStored with every field vLLM has, as the encoder takes it. */
const full: VllmKvEventInput = {
  type: 'stored',
  hashes: [big, 5],
  parent: 7,
  tokenIds: new Uint32Array([1, 2, 3, 4]),
  blockSize: 2,
  loraId: 1,
  medium: 'GPU',
  loraName: 'sql-lora',
  extraKeys: [['sql-lora'], ['sql-lora', 'img', 3]],
  group: 1,
  groupKind: 'sliding_window',
  slidingWindow: 4096,
};

/** The same, decoded. */
const fullDecoded: VllmBlockStored = {
  type: 'stored',
  hashes: [big, 5],
  parent: 7,
  tokenIds: [1, 2, 3, 4],
  blockSize: 2,
  loraId: 1,
  medium: 'GPU',
  loraName: 'sql-lora',
  extraKeys: [['sql-lora'], ['sql-lora', 'img', 3]],
  group: 1,
  groupKind: 'sliding_window',
  slidingWindow: 4096,
  unhashedSalt: null,
};

const absent = { extraKeys: null, group: null, groupKind: null, slidingWindow: null, unhashedSalt: null };

describe('vLLM KV event batches: every field present', () => {
  it.each(['array', 'map'] as const)('round-trips every field of every event kind in the %s form, with exact 64-bit hashes', (form) => {
    const bytes = encodeVllmKvBatch(
      1764420000.25,
      [full, { type: 'removed', hashes: [big], medium: 'GPU', group: 1 }, { type: 'cleared' }],
      3,
      form,
    );
    expect(decodeVllmKvBatch(bytes)).toEqual({
      ok: true,
      batch: {
        ts: 1764420000.25,
        dataParallelRank: 3,
        unknownEvents: 0,
        events: [fullDecoded, { type: 'removed', hashes: [big], medium: 'GPU', group: 1 }, { type: 'cleared' }],
      },
    });
  });

  it('omits fields at their default the way msgspec does: trailing ones in the array form, any in the map form', () => {
    const sparse: VllmKvEventInput = { ...full, extraKeys: null, group: 0, groupKind: null, slidingWindow: null };
    const array = encodeVllmKvBatch(1, [sparse], 0, 'array');
    // [tag, hashes, parent, tokens, size, lora_id, medium, lora_name, extra_keys (nil: not trailing), group_idx]
    expect(decodeVllmKvBatch(array).ok && (decodeVllmKvBatch(array) as { batch: { events: unknown[] } }).batch.events[0]).toMatchObject({
      group: 0,
      extraKeys: null,
    });
    const wire = encode([1, [['BlockStored', [1], null, [1, 2], 2, null, 'GPU', null, null, 0]]]);
    expect(
      Buffer.from(array).equals(
        Buffer.from(encode([1, [['BlockStored', [big, 5], 7, [1, 2, 3, 4], 2, 1, 'GPU', 'sql-lora', null, 0]], 0], { useBigInt64: true })),
      ),
    ).toBe(true);
    expect(decodeVllmKvBatch(wire).ok).toBe(true);
    const map = encodeVllmKvBatch(1, [sparse], 0, 'map');
    const raw = new TextDecoder('latin1').decode(map);
    expect(raw).not.toContain('extra_keys');
    expect(raw).not.toContain('kv_cache_spec_kind');
    expect(raw).toContain('group_idx');
    // Fields without a default are always there, even when null.
    expect(raw).toContain('lora_id');
  });
});

describe('vLLM KV event batches: trailing fields absent', () => {
  it("reads each version by what it carries: vLLM's first layout (to lora_id), medium and lora_name, then the newer fields", () => {
    const r = decodeVllmKvBatch(
      encode([
        1.5,
        [
          ['BlockStored', [new Uint8Array([0xab, 0x01])], null, [9, 9], 2, null],
          ['BlockRemoved', [3]],
          ['BlockStored', [4], 3, [1, 1], 2, null, 'GPU'],
          ['BlockStored', [5], 4, [1, 1], 2, null, 'GPU', 'a'],
          ['BlockStored', [6], 5, [1, 1], 2, null, 'GPU', 'a', [['a']]],
          ['BlockStored', [7], 6, [1, 1], 2, null, 'GPU', 'a', null, 2],
          ['BlockStored', [8], 7, [1, 1], 2, null, 'GPU', 'a', null, 2, 'full_attention'],
          ['BlockStored', [9], 8, [1, 1], 2, null, 'GPU', 'a', null, 2, 'sliding_window', 128, 'a field of a later version'],
          ['BlockRemoved', [3], 'CPU', 2, 'later'],
          ['AllBlocksCleared', 'later'],
        ],
      ]),
    );
    expect(r.ok).toBe(true);
    if (!r.ok) return;
    const e = r.batch.events;
    expect(r.batch.dataParallelRank).toBeNull();
    expect(e[0]).toEqual({
      type: 'stored',
      hashes: ['ab01'],
      parent: null,
      tokenIds: [9, 9],
      blockSize: 2,
      loraId: null,
      medium: null,
      loraName: null,
      ...absent,
    });
    expect(e[1]).toEqual({ type: 'removed', hashes: [3], medium: null, group: null });
    expect(e[2]).toMatchObject({ medium: 'GPU', loraName: null, ...absent });
    expect(e[3]).toMatchObject({ loraName: 'a', extraKeys: null });
    expect(e[4]).toMatchObject({ extraKeys: [['a']], group: null });
    expect(e[5]).toMatchObject({ group: 2, groupKind: null });
    expect(e[6]).toMatchObject({ group: 2, groupKind: 'full_attention', slidingWindow: null });
    expect(e[7]).toMatchObject({ groupKind: 'sliding_window', slidingWindow: 128 });
    expect(e[8]).toEqual({ type: 'removed', hashes: [3], medium: 'CPU', group: 2 });
    expect(e[9]).toEqual({ type: 'cleared' });
  });

  it('reads the map form, defaults left out and unknown fields ignored', () => {
    const r = decodeVllmKvBatch(
      encode([
        2.5,
        [
          {
            type: 'BlockStored',
            block_hashes: [1, 2],
            parent_block_hash: null,
            token_ids: [1, 2, 3, 4],
            block_size: 2,
            lora_id: null,
            medium: 'GPU',
            lora_name: null,
          },
          {
            type: 'BlockStored',
            block_hashes: [3],
            parent_block_hash: 2,
            token_ids: [5, 6],
            block_size: 2,
            lora_id: null,
            medium: 'GPU',
            lora_name: null,
            extra_keys: [null],
            group_idx: 0,
            kv_cache_spec_kind: 'full_attention',
            locality: 'LOCAL',
          },
          { type: 'BlockRemoved', block_hashes: [1], medium: 'GPU' },
          { type: 'AllBlocksCleared' },
          { type: 'BlockMoved' },
        ],
        1,
      ]),
    );
    expect(r.ok).toBe(true);
    if (!r.ok) return;
    expect(r.batch.unknownEvents).toBe(1);
    expect(r.batch.dataParallelRank).toBe(1);
    expect(r.batch.events).toEqual([
      {
        type: 'stored',
        hashes: [1, 2],
        parent: null,
        tokenIds: [1, 2, 3, 4],
        blockSize: 2,
        loraId: null,
        medium: 'GPU',
        loraName: null,
        ...absent,
      },
      {
        type: 'stored',
        hashes: [3],
        parent: 2,
        tokenIds: [5, 6],
        blockSize: 2,
        loraId: null,
        medium: 'GPU',
        loraName: null,
        ...absent,
        extraKeys: [null],
        group: 0,
        groupKind: 'full_attention',
      },
      { type: 'removed', hashes: [1], medium: 'GPU', group: null },
      { type: 'cleared' },
    ]);
    // A map-encoded batch (never sent, but read) too.
    expect(decodeVllmKvBatch(encode({ ts: 1, events: [], data_parallel_rank: 2 }))).toMatchObject({
      ok: true,
      batch: { dataParallelRank: 2 },
    });
  });

  it("reads SGLang's structs: no trailing vLLM fields, and a metadata map with a salt its hashes do not include", () => {
    const r = decodeVllmKvBatch(
      encode([
        1,
        [
          ['BlockStored', [1], null, [1, 2], 2, null, 'GPU'],
          ['BlockStored', [1], null, [1, 2], 2, null, 'GPU', { cache_salt: 'tenant-b' }],
          ['BlockStored', [2], null, [1, 2], 2, null, 'CPU_PINNED', {}],
          ['BlockRemoved', [1], 'GPU'],
        ],
        0,
      ]),
    );
    expect(r.ok).toBe(true);
    if (!r.ok) return;
    expect(r.batch.events.map((e) => (e.type === 'stored' ? [e.medium, e.unhashedSalt, e.loraName] : e.type))).toEqual([
      ['GPU', null, null],
      ['GPU', 'tenant-b', null],
      ['CPU_PINNED', null, null],
      'removed',
    ]);
  });

  it('skips and counts unknown tags', () => {
    const r = decodeVllmKvBatch(encode([1, [['BlockMoved', [1]], stored]]));
    expect(r.ok && r.batch.unknownEvents).toBe(1);
    expect(r.ok && r.batch.events.length).toBe(1);
  });
});

describe('vLLM KV event batches: malformed fields', () => {
  const reason = (payload: Uint8Array, limits?: Parameters<typeof decodeVllmKvBatch>[1]) => {
    const r = decodeVllmKvBatch(payload, limits);
    return r.ok ? 'ok' : r.reason;
  };
  const with_ = (position: number, value: unknown) => {
    const event: unknown[] = ['BlockStored', [1, 2], null, [1, 2, 3, 4], 2, null, 'GPU', null, null, null, null, null];
    event[position] = value;
    return encode([1, [event]]);
  };

  it.each([
    ['block_hashes not a list', 1, 5],
    ['a fractional hash', 1, [1.5, 2]],
    ['an empty byte hash', 1, [new Uint8Array(0), 2]],
    ['parent_block_hash a string', 2, 'x'],
    ['token_ids not a list', 3, 7],
    ['a negative token id', 3, [-1, 2, 3, 4]],
    ['a token id past 32 bits', 3, [2 ** 32, 2, 3, 4]],
    ['block_size 0', 4, 0],
    ['block_size past 4096', 4, 5000],
    ['lora_id a string', 5, 'x'],
    ['medium a number', 6, 1],
    ['lora_name a number', 7, 1],
    ['extra_keys not a list', 8, 'k'],
    ['extra_keys of another length than the hashes', 8, [null]],
    ['an extra key that is not a tuple', 8, ['k', null]],
    ['group_idx negative', 9, -1],
    ['group_idx a string', 9, 'g'],
    ['kv_cache_spec_kind a number', 10, 3],
    ['kv_cache_spec_sliding_window a string', 11, 'w'],
  ])('drops a batch whose BlockStored has %s', (_name, position, value) => {
    expect(reason(with_(position, value))).toBe('malformed');
  });

  it('drops malformed batches and the other fields of other events, with a reason', () => {
    expect(reason(new Uint8Array([0xc1]))).toBe('not-msgpack');
    expect(reason(new Uint8Array([0x92, 0x01]))).toBe('not-msgpack'); // truncated
    expect(reason(encode({ ts: 'x', events: [] }))).toBe('malformed');
    expect(reason(encode({ when: 1 }))).toBe('malformed');
    expect(reason(encode([1, [['BlockStored', [1], null, [1], 2]]]))).toBe('ok');
    expect(reason(encode([1, [['BlockStored', [1], null, [1], 2, null, null, { cache_salt: 5 }]]]))).toBe('malformed');
    expect(reason(encode([1, [['BlockStored', [1], null, [1, 2]]]]))).toBe('malformed'); // no block_size
    expect(reason(encode([1, [['BlockRemoved', 5]]]))).toBe('malformed');
    expect(reason(encode([1, [['BlockRemoved', [1], 'GPU', 'g']]]))).toBe('malformed');
    expect(reason(encode([1, [[7]]]))).toBe('malformed');
    expect(reason(encode([1, [{ type: 'BlockStored' }]]))).toBe('malformed');
    expect(reason(encode([1, [stored], 'rank']))).toBe('malformed');
    expect(reason(encode([1, [stored], -1]))).toBe('malformed');
  });

  it('enforces its bounds before building anything', () => {
    const limits = { maxPayloadBytes: 1 << 20, maxEvents: 2, maxHashes: 1, maxTokens: 3 };
    expect(reason(encode([1, [stored, stored, stored]]), limits)).toBe('too-many-events');
    expect(reason(encode([1, [stored]]), limits)).toBe('too-many-hashes');
    expect(reason(encode([1, [['BlockStored', [1], null, [1, 2, 3, 4], 2, null, null, null]]]), limits)).toBe('too-many-tokens');
    expect(reason(new Uint8Array(2 << 20), limits)).toBe('oversized');
    // A declared array length far beyond the data (a forged header) is not allocated.
    expect(reason(new Uint8Array([0xdd, 0x7f, 0xff, 0xff, 0xff]))).toBe('too-complex');
    expect(reason(new Uint8Array([0xdd, 0x00, 0x00, 0x00, 0x10]))).toBe('not-msgpack');
    // A byte hash longer than any hash (64 bytes) is refused before decoding too.
    expect(reason(encode([1, [['BlockStored', [new Uint8Array(65)], null, [1, 2], 2]]]))).toBe('too-complex');
  });
});

describe('hostile msgpack from a model server', () => {
  const reason = (payload: Uint8Array) => {
    const r = decodeVllmKvBatch(payload);
    return r.ok ? 'ok' : r.reason;
  };

  it('refuses 1 MiB (and 8 MiB) of nested one-element arrays, huge maps and arrays, deep nesting and extension types', () => {
    const nested = (bytes: number) => {
      const b = new Uint8Array(bytes).fill(0x91);
      b[bytes - 1] = 0xc0;
      return b;
    };
    expect(reason(nested(1 << 20))).toBe('too-complex');
    expect(reason(nested(DEFAULT_VLLM_KV_LIMITS.maxPayloadBytes))).toBe('too-complex');
    // An array announcing 2^32-1 elements, a map announcing 2^32-1 entries: refused at their headers.
    expect(reason(Uint8Array.from([0xdd, 0xff, 0xff, 0xff, 0xff, ...new Uint8Array(1024)]))).toBe('too-complex');
    expect(reason(Uint8Array.from([0xdf, 0xff, 0xff, 0xff, 0xff, ...new Uint8Array(1024)]))).toBe('too-complex');
    // A million elements that do exist: more values than any batch of the bounds holds.
    const wide = new Uint8Array(5 + (1 << 20) + 1).fill(0x01);
    wide.set([0x92, 0x01, 0xdd, 0x00, 0x10], 0);
    expect(reason(wide.subarray(0, 5 + (1 << 20)))).toBe('too-complex');
    // Nesting deeper than a batch ever is, inside an otherwise valid extra_keys.
    let deep: unknown = 1;
    for (let i = 0; i < 8; i++) deep = [deep];
    expect(reason(encode([1, [['BlockStored', [1], null, [1, 2], 2, null, 'GPU', null, [deep]]]]))).toBe('too-complex');
    // Extension types and over-long strings.
    expect(reason(Uint8Array.from([0x92, 0x01, 0xd4, 0x01, 0x00]))).toBe('too-complex');
    expect(reason(encode([1, [['BlockStored', [1], null, [1, 2], 2, null, 'x'.repeat(2000), null]]]))).toBe('too-complex');
  });
});

describe('sequence frames', () => {
  it('encodes and decodes them', () => {
    expect(Array.from(encodeVllmSeq(258))).toEqual([0, 0, 0, 0, 0, 0, 1, 2]);
    expect(decodeVllmSeq(encodeVllmSeq(258))).toBe(258);
    expect(decodeVllmSeq(VLLM_END_SEQ)).toBe(-1);
    expect(decodeVllmSeq(new Uint8Array(7))).toBeUndefined();
    expect(decodeVllmSeq(encodeVllmSeq(2n ** 60n))).toBeUndefined();
  });
});
