import { encode } from '@msgpack/msgpack';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  decodeKvBatch,
  encodeKvBatch,
  kvBlockKey,
  kvBlockKeys,
  kvKeySeed,
  kvPoolFilter,
  kvSubjectFor,
  kvZoneFilter,
  kvCreditable,
  KvStoredRuns,
  MAX_KV_BATCH_BYTES,
  MAX_KV_INFO_TEXT,
  MAX_KV_SKIPPED,
  MAX_KV_STORED_RUNS,
  parseKvSubject,
  scanMsgpack,
  UNKNOWN_FIELD_DEPTH,
  UNKNOWN_FIELD_VALUES,
  type KvBatch,
  type KvSkipped,
  type KvStoredRun,
} from '@spillway/events';
import { readKvBatchAsDescribed } from './fixtures/kv-reader-v1-described.js';
import { readKvBatchAsFirstReleased } from './fixtures/kv-reader-v1-first.js';

const SUBJECT = kvSubjectFor({ pool: 'llama', zone: 'zone-a', pod: 'vllm.0' });
const batch = (overrides: Partial<KvBatch> = {}): KvBatch => ({
  v: 1,
  pool: 'llama',
  zone: 'zone-a',
  pod: 'vllm.0',
  seq: 7,
  observedAt: 1_764_420_000_000,
  blockSize: 16,
  events: [[1, [1, 2, 3]], [2, [4]], [3]],
  ...overrides,
});

describe('KV subjects', () => {
  it('are spillway.kv.<pool>.<zone>.<pod>, escaped like v1 subjects, outside the stream', () => {
    expect(SUBJECT).toBe('spillway.kv.llama.zone-a.vllm%2E0');
    expect(parseKvSubject(SUBJECT)).toEqual({ pool: 'llama', zone: 'zone-a', pod: 'vllm.0' });
    expect(kvPoolFilter('llama')).toBe('spillway.kv.llama.>');
    expect(kvZoneFilter('llama', 'zone-a')).toBe('spillway.kv.llama.zone-a.>');
    for (const bad of ['spillway.v1.llama.zone-a.p.metrics', 'spillway.kv.llama.zone-a', 'spillway.kv.llama..p', 'other.kv.a.b.c'])
      expect(parseKvSubject(bad)).toBeUndefined();
  });
});

describe('content keys', () => {
  const tokens = Array.from({ length: 70 }, (_, i) => (i * 7919) % 32000);

  it('cover full blocks only, chained: a shared prefix shares its leading keys, then they differ for good', () => {
    const a = kvBlockKeys(tokens, 16);
    expect(a).toHaveLength(4);
    const other = [...tokens];
    other[20] = 1; // block 1 differs
    const b = kvBlockKeys(other, 16);
    expect(b[0]).toBe(a[0]);
    expect(b[1]).not.toBe(a[1]);
    expect(b[2]).not.toBe(a[2]);
    for (const k of a) expect(Number.isSafeInteger(k) && k >= 0).toBe(true);
  });

  it('continue a chain from a known parent exactly as from the start', () => {
    const all = kvBlockKeys(tokens, 16);
    const tail = kvBlockKeys(tokens.slice(32), 16, { parent: all[1] });
    expect(tail).toEqual(all.slice(2));
  });

  it('keep adapters apart, and the same block in another place is another key', () => {
    expect(kvBlockKeys(tokens, 16, { seed: kvKeySeed('sql-lora') })[0]).not.toBe(kvBlockKeys(tokens, 16)[0]);
    expect(kvKeySeed(undefined)).toBe(0);
    expect(kvBlockKey(undefined, tokens, 0, 16)).not.toBe(kvBlockKey(kvBlockKey(undefined, tokens, 0, 16), tokens, 0, 16));
  });

  it('are deterministic and rarely collide (property)', () => {
    fc.assert(
      fc.property(
        fc.array(fc.integer({ min: 0, max: 200_000 }), { minLength: 16, maxLength: 16 }),
        fc.array(fc.integer({ min: 0, max: 200_000 }), { minLength: 16, maxLength: 16 }),
        (x, y) => {
          expect(kvBlockKey(undefined, x, 0, 16)).toBe(kvBlockKey(undefined, [...x], 0, 16));
          if (x.join() !== y.join()) expect(kvBlockKey(undefined, x, 0, 16)).not.toBe(kvBlockKey(undefined, y, 0, 16));
        },
      ),
    );
  });

  it('bound the work and reject a bad block size', () => {
    expect(kvBlockKeys(tokens, 16, { maxBlocks: 2 })).toHaveLength(2);
    expect(kvBlockKeys(tokens, 0)).toEqual([]);
  });
});

describe('relayed batches', () => {
  it('round-trip through msgpack', () => {
    const decoded = decodeKvBatch(SUBJECT, encodeKvBatch(batch()));
    expect(decoded).toEqual({ ok: true, batch: batch() });
  });

  it.each([
    ['not msgpack', new Uint8Array([0xc1]), 'not-msgpack'],
    ['a string', encode('hello'), 'invalid'],
    ['an unknown version', encode({ ...batch(), v: 2 }), 'invalid'],
    ['an unknown event tag', encode({ ...batch(), events: [[9, [1]]] }), 'invalid'],
    ['a negative key', encode({ ...batch(), events: [[1, [-1]]] }), 'invalid'],
    ['a fractional key', encode({ ...batch(), events: [[2, [1.5]]] }), 'invalid'],
    ['a cleared event with keys', encode({ ...batch(), events: [[3, [1]]] }), 'invalid'],
    ['a missing sequence', encode({ ...batch(), seq: undefined }), 'invalid'],
    [
      'too many keys in all',
      encode({ ...batch(), events: Array.from({ length: 3 }, () => [1, Array.from({ length: 4000 }, (_, i) => i)]) }),
      'too-many-keys',
    ],
    ['another pod than the subject', encode({ ...batch(), pod: 'vllm-1' }), 'subject-mismatch'],
    ['another zone than the subject', encode({ ...batch(), zone: 'zone-b' }), 'subject-mismatch'],
    ['an oversized message', new Uint8Array(MAX_KV_BATCH_BYTES + 1), 'oversized'],
  ])('reject %s', (_name, data, reason) => {
    const decoded = decodeKvBatch(SUBJECT, data);
    expect(decoded.ok).toBe(false);
    if (!decoded.ok) expect(decoded.reason).toBe(reason);
  });
});

describe('what the server said of the blocks: optional rank, stored runs and skipped tallies', () => {
  const described = batch({
    events: [[3], [1, [1, 2]], [2, [9]], [1, [3]], [1, [4, 5]]],
    rank: 1,
    stored: [
      { events: 1, medium: 'GPU', group: 0, kind: 'full_attention' },
      { events: 2, medium: 'GPU', group: 0, kind: 'full_attention', lora: 'sql-lora' },
    ],
    skipped: [
      { reason: 'other-medium', stored: 40, removed: 3, medium: 'CPU', group: 0, kind: 'full_attention' },
      { reason: 'other-group', stored: 6, medium: 'GPU', group: 1, kind: 'sliding_window', window: 4096 },
      { reason: 'extra-keys', stored: 2, medium: 'GPU', group: 0, kind: 'full_attention', extraKeys: true },
      { stored: 5 },
    ],
  });

  it('round-trip when present, and are absent (not undefined) when a batch has none', () => {
    expect(decodeKvBatch(SUBJECT, encodeKvBatch(described))).toEqual({ ok: true, batch: described });
    const plain = decodeKvBatch(SUBJECT, encodeKvBatch(batch()));
    expect(plain.ok && Object.keys(plain.batch).sort()).toEqual(['blockSize', 'events', 'observedAt', 'pod', 'pool', 'seq', 'v', 'zone']);
    // An optional field left undefined by the publisher is left out of the wire (a nil would be invalid).
    expect(decodeKvBatch(SUBJECT, encodeKvBatch({ ...batch(), rank: undefined, stored: undefined }))).toEqual({ ok: true, batch: batch() });
  });

  it('are walked run by run alongside the stored events; only GPU blocks without extra keys are creditable', () => {
    const runs = new KvStoredRuns(described.stored);
    const seen = [runs.next(), runs.next(), runs.next(), runs.next()];
    expect(seen.map((r) => r?.lora)).toEqual([undefined, 'sql-lora', 'sql-lora', undefined]);
    expect(seen[3]).toBeUndefined();
    expect(new KvStoredRuns(undefined).next()).toBeUndefined();
    expect(kvCreditable(undefined)).toBe(true);
    expect(kvCreditable({})).toBe(true);
    expect(kvCreditable({ medium: 'GPU', kind: 'full_attention' })).toBe(true);
    expect(kvCreditable({ medium: 'CPU' })).toBe(false);
    expect(kvCreditable({ medium: 'GPU', extraKeys: true })).toBe(false);
    expect(kvCreditable({ medium: 'GPU', extraKeys: false })).toBe(true);
  });

  /** The largest descriptions the bounds allow: every field, the longest texts. */
  const text = 'm'.repeat(MAX_KV_INFO_TEXT);
  const fullInfo = { medium: text, group: 0xffffffff, kind: text, window: 0xffffffff, lora: 'l'.repeat(253), extraKeys: true };
  const largest = batch({
    rank: 65535,
    stored: Array.from({ length: MAX_KV_STORED_RUNS }, (): KvStoredRun => ({ events: 1024, ...fullInfo })),
    skipped: Array.from({ length: MAX_KV_SKIPPED }, (): KvSkipped => ({ reason: text, stored: 1, removed: 1, ...fullInfo })),
  });

  it('still decode, with the same events, in the reader EPPs had before these fields (unknown fields ignored)', () => {
    for (const b of [described, largest]) {
      const data = encodeKvBatch(b);
      const { rank: _r, stored: _s, skipped: _k, ...rest } = b;
      expect(readKvBatchAsFirstReleased(data)).toEqual(rest);
      expect(decodeKvBatch(SUBJECT, data)).toEqual({ ok: true, batch: b });
    }
    // Each list at its bound stays within what such readers skip; a little more would not.
    for (const field of [largest.stored, largest.skipped])
      expect(
        scanMsgpack(encode(field), {
          maxDepth: UNKNOWN_FIELD_DEPTH,
          maxElements: UNKNOWN_FIELD_VALUES,
          maxStrBytes: 1 << 20,
          maxBinBytes: 0,
        }),
      ).toBeUndefined();
    const tooMany = encode({ ...largest, stored: Array.from({ length: MAX_KV_STORED_RUNS + 2 }, () => ({ events: 1, ...fullInfo })) });
    expect(() => readKvBatchAsFirstReleased(tooMany)).toThrow(/more than 256/);
    expect(decodeKvBatch(SUBJECT, tooMany)).toMatchObject({ ok: false, reason: 'invalid' });
  });

  const hostile: Array<[string, Record<string, unknown>, RegExp]> = [
    ['a negative rank', { rank: -1 }, /^rank:/],
    ['a rank past 65535', { rank: 65536 }, /^rank:/],
    ['a fractional rank', { rank: 1.5 }, /^rank:/],
    ['a rank that is a string', { rank: '1' }, /^rank/],
    ['a nil rank', { rank: null }, /^rank/],
    ['stored that is not a list', { stored: { events: 1 } }, /^stored/],
    ['more stored runs than 16', { stored: Array.from({ length: 17 }, () => ({ events: 1 })) }, /^stored/],
    ['a stored run without its count', { stored: [{ medium: 'GPU' }] }, /^stored\.0\.events: required/],
    ['a stored run of no events', { stored: [{ events: 0 }] }, /^stored\.0\.events/],
    ['a stored run of more events than a batch has', { stored: [{ events: 1025 }] }, /^stored\.0\.events/],
    ['an empty medium', { stored: [{ events: 1, medium: '' }] }, /^stored\.0\.medium/],
    ['a medium of 65 characters', { stored: [{ events: 1, medium: 'x'.repeat(65) }] }, /^stored\.0\.medium/],
    ['a medium of 4 KiB', { stored: [{ events: 1, medium: 'x'.repeat(4096) }] }, /stored\.0\.medium/],
    ['a numeric medium', { stored: [{ events: 1, medium: 7 }] }, /stored\.0\.medium/],
    ['a negative group', { stored: [{ events: 1, group: -1 }] }, /^stored\.0\.group/],
    ['a group beyond 32 bits', { stored: [{ events: 1, group: 2 ** 32 }] }, /^stored\.0\.group/],
    ['a fractional window', { skipped: [{ window: 0.5 }] }, /^skipped\.0\.window/],
    ['a LoRA name of 254 characters', { stored: [{ events: 1, lora: 'l'.repeat(254) }] }, /^stored\.0\.lora/],
    ['extra keys that are not a boolean', { skipped: [{ extraKeys: 1 }] }, /skipped\.0\.extraKeys/],
    ['more skipped tallies than 12', { skipped: Array.from({ length: 13 }, () => ({ stored: 1 })) }, /^skipped/],
    ['a negative skipped count', { skipped: [{ stored: -5 }] }, /^skipped\.0\.stored/],
    ['an empty reason', { skipped: [{ reason: '' }] }, /^skipped\.0\.reason/],
    ['a tally that is not a map', { skipped: [[1, 2]] }, /skipped\.0/],
    ['an unknown field of a run nested too deep', { stored: [{ events: 1, x: [[[[[1]]]]] }] }, /stored\.0\.x/],
  ];

  it.each(hostile)('refuse %s, saying which field (invalid)', (_name, fields, detail) => {
    const decoded = decodeKvBatch(SUBJECT, encode({ ...batch(), ...fields }));
    expect(decoded).toMatchObject({ ok: false, reason: 'invalid' });
    if (!decoded.ok) expect(decoded.detail).toMatch(detail);
  });
});

describe('what the relay knows of the pod: the optional `known` field', () => {
  const partial = batch({ events: [[3], [1, [1, 2]]], known: { since: 1_764_419_990_000, complete: false } });
  const text = 'm'.repeat(MAX_KV_INFO_TEXT);
  const fullInfo = { medium: text, group: 0xffffffff, kind: text, window: 0xffffffff, lora: 'l'.repeat(253), extraKeys: true };
  /** Every optional field at its largest, `known` included: 12 of the 16 fields a batch may have. */
  const largest = batch({
    rank: 65535,
    stored: Array.from({ length: MAX_KV_STORED_RUNS }, (): KvStoredRun => ({ events: 1024, ...fullInfo })),
    skipped: Array.from({ length: MAX_KV_SKIPPED }, (): KvSkipped => ({ reason: text, stored: 1, removed: 1, ...fullInfo })),
    known: { since: 8.64e15, complete: true },
  });

  it('round-trips when present, and is absent (not undefined) when a batch has none', () => {
    expect(decodeKvBatch(SUBJECT, encodeKvBatch(partial))).toEqual({ ok: true, batch: partial });
    expect(decodeKvBatch(SUBJECT, encodeKvBatch(largest))).toEqual({ ok: true, batch: largest });
    const plain = decodeKvBatch(SUBJECT, encodeKvBatch({ ...batch(), known: undefined }));
    expect(plain.ok && 'known' in plain.batch).toBe(false);
  });

  it('fields it does not know inside `known` are skipped (forward compatible)', () => {
    const later = encode({ ...batch(), known: { since: 5, complete: true, blocks: 19_200, why: ['replay'] } });
    expect(decodeKvBatch(SUBJECT, later)).toEqual({ ok: true, batch: batch({ known: { since: 5, complete: true } }) });
  });

  it('still decodes, with the same events and descriptions, in the readers EPPs had before it (unknown fields ignored)', () => {
    for (const b of [partial, largest]) {
      const data = encodeKvBatch(b);
      const { known: _k, ...described } = b;
      const { rank: _r, stored: _s, skipped: _d, ...first } = described;
      expect(readKvBatchAsFirstReleased(data)).toEqual(first);
      expect(readKvBatchAsDescribed(data)).toEqual(described);
    }
    // The field is far within what those readers skip.
    expect(
      scanMsgpack(encode(largest.known), {
        maxDepth: UNKNOWN_FIELD_DEPTH,
        maxElements: UNKNOWN_FIELD_VALUES,
        maxStrBytes: 1 << 20,
        maxBinBytes: 0,
      }),
    ).toBeUndefined();
  });

  const hostile: Array<[string, unknown, RegExp]> = [
    ['a list', [5, true], /^known/],
    ['a number', 1, /^known/],
    ['a nil', null, /^known/],
    ['no `since`', { complete: true }, /^known\.since: required/],
    ['no `complete`', { since: 5 }, /^known\.complete: required/],
    ['a negative `since`', { since: -1, complete: true }, /^known\.since/],
    ['a `since` past the schema maximum', { since: 9e15, complete: true }, /^known\.since/],
    ['an infinite `since`', { since: Number.POSITIVE_INFINITY, complete: true }, /^known\.since/],
    ['a `since` that is a string', { since: '5', complete: true }, /known\.since/],
    ['a `complete` that is a number', { since: 5, complete: 1 }, /known\.complete/],
    ['a `complete` that is a string', { since: 5, complete: 'true' }, /known\.complete/],
    ['more than 16 fields', Object.fromEntries(Array.from({ length: 17 }, (_, i) => [`f${i}`, i])), /^known/],
    ['an unknown field nested too deep', { since: 5, complete: true, x: [[[[[1]]]]] }, /known\.x/],
    ['an unknown field too large', { since: 5, complete: true, x: Array.from({ length: 300 }, () => 0) }, /known\.x/],
  ];

  it.each(hostile)('refuses `known` that is %s, saying which field (invalid)', (_name, known, detail) => {
    const decoded = decodeKvBatch(SUBJECT, encode({ ...batch(), known }));
    expect(decoded).toMatchObject({ ok: false, reason: 'invalid' });
    if (!decoded.ok) expect(decoded.detail).toMatch(detail);
  });
});
