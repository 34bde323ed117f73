/**
 * Untrusted msgpack on `spillway.state.*` and `spillway.kv.*` (and the reader behind them): hostile
 * payloads are refused by reason, and the layout readers accept and reject exactly what the zod
 * schemas of the same batches do. (Speed is measured in the bench, `npm run bench -- decode`.)
 */
import { encode } from '@msgpack/msgpack';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  decodeKvBatch,
  decodeStateBatch,
  kvBatchSchema,
  MAX_KV_BATCH_BYTES,
  MAX_STATE_BATCH_BYTES,
  MsgpackReader,
  scanMsgpack,
  stateBatchSchema,
} from '../src/index.js';

/** `bytes` of nested one-element arrays, a nil at the bottom: what took an EPP 158 ms per MiB to decode. */
function nested(bytes: number): Uint8Array {
  const b = new Uint8Array(bytes).fill(0x91);
  b[bytes - 1] = 0xc0;
  return b;
}

/** The hostile payloads of the hardening round, on both subjects. */
const hostile: Array<[string, Uint8Array]> = [
  ['1 MiB of nested one-element arrays', nested(MAX_STATE_BATCH_BYTES - 16)],
  ['nested one-element arrays inside a header field', Uint8Array.from([0x81, 0xa1, 0x78, ...nested(4096)])],
  ['a map announcing 2^32-1 entries', Uint8Array.from([0xdf, 0xff, 0xff, 0xff, 0xff, ...new Uint8Array(4096)])],
  ['an array announcing 2^32-1 elements', Uint8Array.from([0xdd, 0xff, 0xff, 0xff, 0xff, ...new Uint8Array(4096)])],
  ['entries announcing 2^32-1 elements', encodeWith('entries', Uint8Array.from([0xdd, 0xff, 0xff, 0xff, 0xff]))],
  ['events announcing 2^32-1 elements', encodeWith('events', Uint8Array.from([0xdd, 0xff, 0xff, 0xff, 0xff]))],
  ['a huge map of unknown fields', encode(Object.fromEntries(Array.from({ length: 70_000 }, (_, i) => [`f${i}`, i])))],
  ['an unknown field nested deep', encode({ v: 1, x: [[[[[[[[[[1]]]]]]]]]] })],
  ['a string announcing 4 GiB', Uint8Array.from([0x81, 0xa1, 0x78, 0xdb, 0xff, 0xff, 0xff, 0xff, 0x00])],
];

/** A one-field map whose value is the raw bytes given. */
function encodeWith(key: string, raw: Uint8Array): Uint8Array {
  return Uint8Array.from([0x81, 0xa0 | key.length, ...Buffer.from(key), ...raw, ...new Uint8Array(64)]);
}

describe('hostile msgpack on spillway.state.* and spillway.kv.*', () => {
  it.each(hostile)('%s is refused, with a reason, never a throw', (_name, data) => {
    const state = decodeStateBatch(data);
    expect(state.ok).toBe(false);
    if (!state.ok) expect(['invalid', 'not-msgpack']).toContain(state.reason);
    const kv = decodeKvBatch('spillway.kv.llama.zone-a.p', data);
    expect(kv.ok).toBe(false);
    if (!kv.ok) expect(['invalid', 'not-msgpack']).toContain(kv.reason);
  });

  it('over the byte bound: refused before reading', () => {
    expect(decodeStateBatch(nested(MAX_STATE_BATCH_BYTES + 1))).toMatchObject({ ok: false, reason: 'oversized' });
    expect(decodeKvBatch('spillway.kv.l.z.p', nested(MAX_KV_BATCH_BYTES + 1))).toMatchObject({ ok: false, reason: 'oversized' });
  });

  it('a refusal stops at the first violation: the reader never reads past it', () => {
    const r = new MsgpackReader(nested(1 << 20));
    expect(() => r.mapHeader(16, 'the batch')).toThrow(/not a map/);
    expect(r.pos).toBe(0);
    const arrays = new MsgpackReader(Uint8Array.from([0xdd, 0xff, 0xff, 0xff, 0xff]));
    expect(() => arrays.arrayHeader(8192, 'keys')).toThrow(/4294967295 elements/);
  });
});

describe('scanMsgpack', () => {
  const bounds = { maxDepth: 3, maxElements: 10, maxStrBytes: 4, maxBinBytes: 2 };
  it('accepts one value within its bounds, and says why anything else is refused', () => {
    expect(scanMsgpack(encode([1, [2, 'abc'], { a: null }]), bounds)).toBeUndefined();
    expect(scanMsgpack(encode([[[[1]]]]), bounds)).toMatchObject({ kind: 'invalid', message: expect.stringMatching(/deeper/) });
    expect(scanMsgpack(encode(Array.from({ length: 11 }, () => 0)), bounds)).toMatchObject({
      message: expect.stringMatching(/more than 10/),
    });
    expect(scanMsgpack(encode('abcde'), bounds)).toMatchObject({ message: expect.stringMatching(/string of 5 bytes/) });
    expect(scanMsgpack(encode(new Uint8Array(3)), bounds)).toMatchObject({ message: expect.stringMatching(/binary of 3 bytes/) });
    expect(scanMsgpack(Uint8Array.from([0x92, 0x01]), bounds)).toMatchObject({ kind: 'not-msgpack' });
    expect(scanMsgpack(Uint8Array.from([0x01, 0x02]), bounds)).toMatchObject({
      kind: 'not-msgpack',
      message: expect.stringMatching(/after/),
    });
    expect(scanMsgpack(Uint8Array.from([0xc1]), bounds)).toMatchObject({ kind: 'not-msgpack' });
    expect(scanMsgpack(Uint8Array.from([0xd4, 0x01, 0x00]), bounds)).toMatchObject({ kind: 'invalid' });
    expect(scanMsgpack(encode(new Map([[1, [2, 3]]])), bounds)).toBeUndefined();
  });
});

// ---- the layout readers agree with the zod schemas ------------------------------------------

/** Mostly valid, sometimes not: the properties see both. */
const mostly = <T, U>(valid: fc.Arbitrary<T>, invalid: fc.Arbitrary<U>) =>
  fc.oneof({ arbitrary: valid, weight: 12 }, { arbitrary: invalid, weight: 1 });
const name = mostly(fc.string({ minLength: 1, maxLength: 6 }), fc.constantFrom('', 'x'.repeat(254), 7));
const num = mostly(
  fc.integer({ min: 0, max: 1_000_000 }),
  fc.constantFrom(-1, 2 ** 32, 2 ** 53 - 1, 2 ** 53, -(2 ** 40), 1.5, Number.NaN, 8.64e15, 8.64e15 + 1, 'n'),
);
const hashes = fc.array(mostly(fc.integer({ min: 0, max: 2 ** 53 - 1 }), num), { maxLength: 4 });
const stateEntry = mostly(
  fc.oneof(
    fc.tuple(fc.constant(1), num, name, name, num, hashes),
    fc.tuple(fc.constant(2), num, num),
    fc.tuple(fc.constant(3), name, name, num),
    fc.tuple(fc.constant(4), name, name, hashes),
  ),
  fc.oneof(fc.tuple(fc.integer({ min: 0, max: 6 }), num), fc.array(num, { maxLength: 3 })),
);
const stateBatch = fc.record(
  {
    v: mostly(fc.constant(1), num),
    pool: name,
    zone: name,
    epp: name,
    seq: num,
    sentAt: num,
    entries: fc.array(stateEntry, { maxLength: 4 }),
    snapshot: mostly(fc.oneof(fc.record({ last: fc.boolean() }), fc.constant(null)), fc.constant({ last: 'x' })),
    want: mostly(fc.constantFrom('all', 'in-flight', null), fc.constant('other')),
    extra: fc.oneof(fc.string(), num, fc.array(num)),
  },
  { requiredKeys: ['v', 'pool', 'zone', 'epp', 'seq', 'sentAt', 'entries'] },
);
const kvEvent = mostly(
  fc.oneof(
    fc.tuple(fc.constantFrom(1, 2), fc.array(mostly(fc.integer({ min: 0, max: 2 ** 53 - 1 }), num), { maxLength: 4 })),
    fc.tuple(fc.constant(3)),
  ),
  fc.oneof(fc.tuple(fc.constant(3), fc.array(num)), fc.tuple(fc.integer({ min: 0, max: 5 }), num)),
);
/** What the server said of blocks: the optional description fields, mostly valid. */
const text = mostly(fc.constantFrom('GPU', 'CPU', 'full_attention', 'x'.repeat(64)), fc.constantFrom('', 'x'.repeat(65), 3, true));
const info = {
  medium: text,
  group: mostly(fc.integer({ min: 0, max: 2 ** 32 - 1 }), num),
  kind: text,
  window: mostly(fc.integer({ min: 0, max: 2 ** 32 - 1 }), num),
  lora: name,
  extraKeys: mostly(fc.boolean(), num),
  unknown: fc.oneof(fc.string(), num),
};
const storedRun = mostly(
  fc.record({ events: mostly(fc.integer({ min: 1, max: 1024 }), num), ...info }, { requiredKeys: ['events'] }),
  fc.oneof(fc.record(info, { requiredKeys: [] }), fc.array(num, { maxLength: 2 }), num),
);
const skippedTally = mostly(
  fc.record({ reason: text, stored: num, removed: num, ...info }, { requiredKeys: [] }),
  fc.oneof(fc.array(num, { maxLength: 2 }), fc.string()),
);
const kvBatch = fc.record(
  {
    v: mostly(fc.constant(1), num),
    pool: fc.constant('l'),
    zone: fc.constant('z'),
    pod: fc.constant('p'),
    seq: num,
    observedAt: num,
    blockSize: mostly(fc.integer({ min: 1, max: 4096 }), num),
    events: fc.array(kvEvent, { maxLength: 4 }),
    rank: mostly(fc.integer({ min: 0, max: 65535 }), fc.constantFrom(-1, 65536, 0.5, 'r')),
    stored: fc.array(storedRun, { maxLength: 3 }),
    skipped: fc.array(skippedTally, { maxLength: 3 }),
    extra: fc.oneof(fc.string(), num),
  },
  { requiredKeys: ['v', 'pool', 'zone', 'pod', 'seq', 'observedAt', 'blockSize', 'events'] },
);

/** Drops fields at null, nested too (the readers and zod both treat nil as "not a valid value"; absent optional fields are fine). */
const present = (o: Record<string, unknown>): Record<string, unknown> =>
  Object.fromEntries(
    Object.entries(o)
      .filter(([, v]) => v !== null)
      .map(([k, v]) => [k, Array.isArray(v) ? v.map((e: unknown) => (isRecord(e) ? present(e) : e)) : v]),
  );
const isRecord = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);

describe('the layout readers accept and reject what zod does', () => {
  it('state batches (property)', () => {
    let accepted = 0;
    fc.assert(
      fc.property(stateBatch, (value) => {
        const raw = present(value);
        const zod = stateBatchSchema.safeParse(raw);
        const decoded = decodeStateBatch(encode(raw));
        const tooMany = !decoded.ok && decoded.reason === 'too-many-hashes';
        expect(decoded.ok || tooMany).toBe(zod.success);
        if (decoded.ok && zod.success) expect(decoded.batch).toEqual(zod.data);
        if (decoded.ok) accepted++;
      }),
      { numRuns: 2000 },
    );
    // Not a test of rejections only: valid batches are generated too.
    expect(accepted).toBeGreaterThan(200);
  });

  it('relayed KV batches, with and without the optional descriptions (property)', () => {
    let accepted = 0;
    let described = 0;
    fc.assert(
      fc.property(kvBatch, (value) => {
        const raw = present(value);
        const zod = kvBatchSchema.safeParse(raw);
        const decoded = decodeKvBatch('spillway.kv.l.z.p', encode(raw));
        expect(decoded.ok).toBe(zod.success);
        if (decoded.ok && zod.success) expect(decoded.batch).toEqual(zod.data);
        if (decoded.ok) accepted++;
        if (decoded.ok && (decoded.batch.stored?.length ?? 0) + (decoded.batch.skipped?.length ?? 0) > 0) described++;
      }),
      { numRuns: 2000 },
    );
    expect(accepted).toBeGreaterThan(200);
    expect(described).toBeGreaterThan(50);
  });
});
