import { describe, expect, it } from 'vitest';
import { decodeTrtllmKvEvents, DEFAULT_VLLM_KV_LIMITS, scanJson, trtllmV1BlockHash } from '../src/index.js';

const tok = (ids: number[], extra = 0) => ids.map((token_id) => ({ type: 'unique_token', token_id, token_extra_id: extra }));
const block = (hash: unknown, ids: number[], more: Record<string, unknown> = {}) => ({
  type: 'stored_block',
  block_hash: hash,
  tokens: tok(ids),
  cache_level: 0,
  priority: 35,
  ...more,
});
const event = (id: number, data: unknown, more: Record<string, unknown> = {}) => ({ event_id: id, data, window_size: 4096, ...more });
const decode = (events: unknown) => decodeTrtllmKvEvents(JSON.stringify(events), DEFAULT_VLLM_KV_LIMITS);

describe("TensorRT-LLM's KV-cache events", () => {
  it('reads every field: created, stored (levels, LoRA, extra ids, mm_keys), removed, updated; V2 metadata', () => {
    const r = decode([
      event(
        0,
        { type: 'created', num_blocks_per_cache_level: [100, 50] },
        { hash_algo: 'v2_sha256', layer_group_id: 1, attention_dp_rank: 1 },
      ),
      event(1, {
        type: 'stored',
        parent_hash: 9,
        blocks: [
          block(10, [1, 2]),
          block(11, [3, 4], { lora_id: 7 }),
          block(12, [5, 6], { cache_level: 1 }),
          { ...block(13, [7, 8]), tokens: tok([7, 8], 4) },
          block('ab12', [9, 10], { mm_keys: [['00ff', 0]] }),
        ],
      }),
      event(2, { type: 'removed', block_hashes: [10, 'ab12', 2 ** 64] }),
      event(3, { type: 'updated', block_hash: 12, cache_level: { type: 'event_diff', new_value: 0, old_value: 1 }, priority: null }),
      event(4, { type: 'updated', block_hash: 12, cache_level: null, priority: { type: 'event_diff', new_value: 1, old_value: 35 } }),
    ]);
    expect(r.ok).toBe(true);
    if (!r.ok) return;
    const [created, stored, removed, moved, priority] = r.events;
    expect(created).toEqual({ id: 0, rank: 1, events: [{ type: 'cleared' }] });
    expect(stored?.events).toEqual([
      expect.objectContaining({
        hashes: [10],
        parent: 9,
        tokenIds: [1, 2],
        blockSize: 2,
        medium: 'GPU',
        loraId: null,
        group: 4096,
        slidingWindow: 4096,
      }),
      expect.objectContaining({ hashes: [11], parent: 10, loraId: 7, medium: 'GPU' }),
      expect.objectContaining({ hashes: [12], parent: 11, medium: 'cache_level:1' }),
      expect.objectContaining({
        hashes: [13, 'ab12'],
        parent: 12,
        medium: 'GPU',
        extraKeys: [
          [null, [4, 4]],
          [[['00ff', 0]], []],
        ],
      }),
    ]);
    expect(removed?.events).toEqual([{ type: 'removed', hashes: [10, 'ab12', 2n ** 64n], medium: null, group: 4096 }]);
    expect(moved?.events).toEqual([{ type: 'moved', hashes: [12], medium: 'GPU', group: 4096 }]);
    expect(priority?.events).toEqual([]);
  });

  it('keeps the id of an event of an unknown type (not a lost one) and counts it', () => {
    const r = decode([event(5, { type: 'exploded' }), event(6, { type: 'removed', block_hashes: [] })]);
    expect(r).toMatchObject({ ok: true, unknownEvents: 1 });
    if (r.ok) expect(r.events.map((e) => e.id)).toEqual([5, 6]);
  });

  it.each([
    ['not a list', { event_id: 1 }],
    ['an event without an id', [{ data: { type: 'removed', block_hashes: [] } }]],
    ['a negative id', [event(-1, { type: 'removed', block_hashes: [] })]],
    ['data not an object', [event(1, 5)]],
    ['blocks not a list', [event(1, { type: 'stored', parent_hash: null, blocks: 5 })]],
    [
      'a token that is not a token',
      [event(1, { type: 'stored', parent_hash: null, blocks: [{ ...block(1, [1]), tokens: [{ token_id: -3 }] }] })],
    ],
    ['a float block hash', [event(1, { type: 'stored', parent_hash: null, blocks: [block(1.5, [1])] })]],
    ['a negative cache level', [event(1, { type: 'stored', parent_hash: null, blocks: [block(1, [1], { cache_level: -1 })] })]],
    ['removed hashes not a list', [event(1, { type: 'removed', block_hashes: 'x' })]],
    ['an update without a new level', [event(1, { type: 'updated', block_hash: 1, cache_level: { old_value: 0 } })]],
    ['a string attention_dp_rank', [event(1, { type: 'removed', block_hashes: [] }, { attention_dp_rank: 'x' })]],
  ])('drops an answer with %s', (_name, events) => {
    expect(decode(events)).toMatchObject({ ok: false, reason: 'malformed' });
  });

  it('refuses what is not JSON, too large, too deep or too many before parsing', () => {
    const limits = { ...DEFAULT_VLLM_KV_LIMITS, maxPayloadBytes: 1000, maxElements: 50, maxEvents: 2 };
    expect(decodeTrtllmKvEvents('[{', limits)).toMatchObject({ ok: false, reason: 'not-json' });
    expect(decodeTrtllmKvEvents(' '.repeat(1001), limits)).toMatchObject({ ok: false, reason: 'oversized' });
    expect(decodeTrtllmKvEvents('['.repeat(9) + ']'.repeat(9), limits)).toMatchObject({ ok: false, reason: 'too-complex' });
    expect(decodeTrtllmKvEvents(JSON.stringify(Array.from({ length: 60 }, () => 0)), limits)).toMatchObject({
      ok: false,
      reason: 'too-complex',
    });
    expect(decodeTrtllmKvEvents('[1,2,3]', limits)).toMatchObject({ ok: false, reason: 'too-many-events' });
    // Brackets inside strings are text, not nesting.
    expect(scanJson(JSON.stringify(['[[[[[[[[[[', '\\"[[[[']), 2, 10)).toBeUndefined();
  });
});

describe("TensorRT-LLM's V1 block hash: telling a base model's chains from an adapter's or a salted request's", () => {
  // Values of hash_v1_block_key (tensorrt_llm/runtime/kv_cache_hash.py) for these tokens: plain, and under LoRA task 3.
  const base = Array.from({ length: 16 }, (_, i) => ((i * 7919) % 151000) + 10);
  const next = Array.from({ length: 16 }, (_, i) => ((i * 104729) % 151000) + 10);

  it('computes hash_v1_block_key of plain tokens, chained through the parent hash', () => {
    expect(trtllmV1BlockHash(base)).toBe(17242229429749233524n);
    expect(trtllmV1BlockHash(next, 17242229429749233524n)).toBe(15537621839669429045n);
    expect(trtllmV1BlockHash([4294967295, 151000, 7])).toBe(13245283431634n);
    expect(trtllmV1BlockHash(Array.from({ length: 16 }, (_, i) => i + 1))).toBe(6052439777046529588n);
  });

  const answer = (hash: string, more = '', parent = 'null') =>
    `[{"event_id":1,"window_size":4096${more},"data":{"type":"stored","parent_hash":${parent},"blocks":[{"type":"stored_block","block_hash":${hash},` +
    `"tokens":${JSON.stringify(tok(base))},"cache_level":0,"priority":35}]}}]`;
  const rootOf = (text: string) => {
    const r = decodeTrtllmKvEvents(text, DEFAULT_VLLM_KV_LIMITS);
    if (!r.ok) throw new Error(r.detail);
    return r.events[0]?.v1Root;
  };

  it("says whether a V1 chain start's hash is its tokens' alone (the exact digits rounded as JSON.parse rounds them)", () => {
    expect(rootOf(answer('17242229429749233524'))).toBe('base');
    expect(rootOf(answer('17242229429749233524', ',"hash_algo":"v1_block_key"'))).toBe('base');
    expect(rootOf(answer('13245283431634').replace(JSON.stringify(tok(base)), JSON.stringify(tok([4294967295, 151000, 7]))))).toBe('base');
    // The same tokens under LoRA task 3: another hash.
    expect(rootOf(answer('14058571575069113074'))).toBe('other');
    // Not checked: another hash algorithm, a continuation, a block with extra token ids.
    expect(rootOf(answer('17242229429749233524', ',"hash_algo":"v2_sha256_64"'))).toBeUndefined();
    expect(rootOf(answer('15537621839669429045', '', '17242229429749233524'))).toBeUndefined();
    expect(rootOf(answer('17242229429749233524').replace('"token_extra_id":0', '"token_extra_id":5'))).toBeUndefined();
  });

  it('a hash_algo that is not a name drops the answer as malformed', () => {
    const r = decodeTrtllmKvEvents(answer('1', ',"hash_algo":5'), DEFAULT_VLLM_KV_LIMITS);
    expect(r).toMatchObject({ ok: false, reason: 'malformed' });
  });
});
