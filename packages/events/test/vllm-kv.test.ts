import { encode } from '@msgpack/msgpack';
import { describe, expect, it } from 'vitest';
import { decodeVllmKvBatch, decodeVllmSeq, encodeVllmKvBatch, encodeVllmSeq, VLLM_END_SEQ } from '../src/index.js';

const stored = ['BlockStored', [11, 12], null, [1, 2, 3, 4], 2, null, 'GPU', null];

describe('vLLM KV event batches', () => {
  it('round-trips every event kind with exact 64-bit hashes', () => {
    const big = 0xfedcba9876543210n;
    const bytes = encodeVllmKvBatch(1764420000.25, [
      {
        type: 'stored',
        hashes: [big, 5],
        parent: 7,
        tokenIds: new Uint32Array([1, 2, 3, 4]),
        blockSize: 2,
        loraId: 1,
        medium: 'GPU',
        loraName: 'sql-lora',
      },
      { type: 'removed', hashes: [big], medium: 'GPU' },
      { type: 'cleared' },
    ]);
    const r = decodeVllmKvBatch(bytes);
    expect(r).toEqual({
      ok: true,
      batch: {
        ts: 1764420000.25,
        dataParallelRank: 0,
        unknownEvents: 0,
        events: [
          {
            type: 'stored',
            hashes: [big, 5],
            parent: 7,
            tokenIds: [1, 2, 3, 4],
            blockSize: 2,
            loraId: 1,
            medium: 'GPU',
            loraName: 'sql-lora',
          },
          { type: 'removed', hashes: [big], medium: 'GPU' },
          { type: 'cleared' },
        ],
      },
    });
  });

  it('reads older and newer layouts (fewer or more trailing fields) and byte hashes', () => {
    const r = decodeVllmKvBatch(
      encode([
        1.5,
        [
          ['BlockStored', [new Uint8Array([0xab, 0x01])], null, [9, 9], 2, null],
          ['BlockRemoved', [3]],
          ['BlockStored', [4], 3, [1, 1], 2, null, 'GPU', null, null, 0, 'full', null],
        ],
      ]),
    );
    expect(r.ok).toBe(true);
    if (!r.ok) return;
    expect(r.batch.dataParallelRank).toBeNull();
    expect(r.batch.events[0]).toMatchObject({ type: 'stored', hashes: ['ab01'], medium: null, loraName: null });
    expect(r.batch.events[1]).toEqual({ type: 'removed', hashes: [3], medium: null });
    expect(r.batch.events[2]).toMatchObject({ type: 'stored', parent: 3, medium: 'GPU' });
  });

  it('reads the map form newer vLLM encodes, by field name', () => {
    const r = decodeVllmKvBatch(
      encode({
        ts: 2.5,
        events: [
          {
            type: 'BlockStored',
            block_hashes: [1, 2],
            parent_block_hash: null,
            token_ids: [1, 2, 3, 4],
            block_size: 2,
            lora_id: null,
            medium: 'GPU',
            lora_name: null,
            extra_keys: null,
            group_idx: 0,
          },
          { type: 'BlockRemoved', block_hashes: [1], medium: 'GPU', group_idx: 0 },
          { type: 'AllBlocksCleared' },
          { type: 'BlockMoved' },
        ],
        data_parallel_rank: 1,
      }),
    );
    expect(r).toEqual({
      ok: true,
      batch: {
        ts: 2.5,
        dataParallelRank: 1,
        unknownEvents: 1,
        events: [
          {
            type: 'stored',
            hashes: [1, 2],
            parent: null,
            tokenIds: [1, 2, 3, 4],
            blockSize: 2,
            loraId: null,
            medium: 'GPU',
            loraName: null,
          },
          { type: 'removed', hashes: [1], medium: 'GPU' },
          { type: 'cleared' },
        ],
      },
    });
  });

  it('skips and counts unknown tags', () => {
    const r = decodeVllmKvBatch(encode([1, [['BlockMoved', [1]], stored]]));
    expect(r.ok && r.batch.unknownEvents).toBe(1);
    expect(r.ok && r.batch.events.length).toBe(1);
  });

  it('drops malformed, oversized and hostile batches with a reason', () => {
    const reason = (payload: Uint8Array, limits?: Parameters<typeof decodeVllmKvBatch>[1]) => {
      const r = decodeVllmKvBatch(payload, limits);
      return r.ok ? 'ok' : r.reason;
    };
    expect(reason(new Uint8Array([0xc1]))).toBe('not-msgpack');
    expect(reason(new Uint8Array([0x92, 0x01]))).toBe('not-msgpack'); // truncated
    expect(reason(encode({ ts: 'x', events: [] }))).toBe('malformed');
    expect(reason(encode({ when: 1 }))).toBe('malformed');
    expect(reason(encode([1, [['BlockStored', [1], null, [-1], 2, null, null, null]]]))).toBe('malformed');
    expect(reason(encode([1, [['BlockStored', [1.5], null, [1], 2, null, null, null]]]))).toBe('malformed');
    expect(reason(encode([1, [['BlockStored', [1], null, [1], 0, null, null, null]]]))).toBe('malformed');
    expect(reason(encode([1, [['BlockStored', [1], null, [1], 2, 'x', null, null]]]))).toBe('malformed');
    expect(reason(encode([1, [['BlockRemoved', 5]]]))).toBe('malformed');
    expect(reason(encode([1, [[7]]]))).toBe('malformed');
    expect(reason(encode([1, [stored], 'rank']))).toBe('malformed');
    const limits = { maxPayloadBytes: 1 << 20, maxEvents: 2, maxHashes: 1, maxTokens: 3 };
    expect(reason(encode([1, [stored, stored, stored]]), limits)).toBe('too-many-events');
    expect(reason(encode([1, [stored]]), limits)).toBe('too-many-hashes');
    expect(reason(encode([1, [['BlockStored', [1], null, [1, 2, 3, 4], 2, null, null, null]]]), limits)).toBe('too-many-tokens');
    expect(reason(new Uint8Array(2 << 20), limits)).toBe('oversized');
    // A declared array length far beyond the data (a forged header) is not allocated.
    expect(reason(new Uint8Array([0xdd, 0x7f, 0xff, 0xff, 0xff]))).toBe('not-msgpack');
  });

  it('encodes and decodes sequence frames', () => {
    expect(Array.from(encodeVllmSeq(258))).toEqual([0, 0, 0, 0, 0, 0, 1, 2]);
    expect(decodeVllmSeq(encodeVllmSeq(258))).toBe(258);
    expect(decodeVllmSeq(VLLM_END_SEQ)).toBe(-1);
    expect(decodeVllmSeq(new Uint8Array(7))).toBeUndefined();
    expect(decodeVllmSeq(encodeVllmSeq(2n ** 60n))).toBeUndefined();
  });
});
