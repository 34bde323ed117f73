import { encode } from '@msgpack/msgpack';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  ALL_STATE_SUBJECTS,
  decodeStateBatch,
  encodeStateBatch,
  eppIdOf,
  MAX_STATE_BATCH_BYTES,
  MAX_STATE_ENTRIES,
  MAX_STATE_ENTRY_HASHES,
  MAX_STATE_HASHES,
  parseStateSubject,
  RELEASED_WITHOUT_COMPLETION,
  STATE_STARTED,
  stateBatchHashes,
  statePoolFilter,
  stateSubjectFor,
  stateSyncFilter,
  stateSyncSubjectFor,
  stateZoneFilter,
  type StateBatch,
} from '@spillway/events';
import { readStateBatchAsFirstReleased } from './fixtures/state-reader-v1-first.js';

const FROM = { pool: 'llama', zone: 'zone-a', epp: 'epp-a.0' };
const batch = (overrides: Partial<StateBatch> = {}): StateBatch => ({
  v: 1,
  pool: 'llama',
  zone: 'zone-a',
  epp: 'epp-a.0',
  seq: 3,
  sentAt: 1_764_420_000_100,
  entries: [
    [1, 7, 'zone-b', 'vllm.0', 1_764_420_000_050, [1, 2 ** 53 - 1, 3]],
    [2, 6, 1_764_420_000_060],
    [3, 'zone-a', 'vllm-a-1', 1_764_420_005_000],
    [4, 'zone-a', 'vllm-a-1', [9, 8]],
  ],
  ...overrides,
});

describe('state subjects', () => {
  it('are spillway.state.<pool>.<zone>.<epp-id>, escaped like v1 subjects, outside the stream', () => {
    const subject = stateSubjectFor(FROM);
    expect(subject).toBe('spillway.state.llama.zone-a.epp-a%2E0');
    expect(stateSyncSubjectFor(FROM)).toBe('spillway.state.llama.zone-a.epp-a%2E0.sync');
    expect(parseStateSubject(subject)).toEqual({ ...FROM, sync: false });
    expect(parseStateSubject(stateSyncSubjectFor(FROM))).toEqual({ ...FROM, sync: true });
    expect(statePoolFilter('llama')).toBe('spillway.state.llama.*.*');
    expect(stateSyncFilter('llama')).toBe('spillway.state.llama.*.*.sync');
    expect(stateZoneFilter('zone-a')).toBe('spillway.state.*.zone-a.>');
    expect(ALL_STATE_SUBJECTS).toBe('spillway.state.>');
    for (const bad of [
      'spillway.v1.llama.zone-a.p.metrics',
      'spillway.state.llama.zone-a',
      'spillway.state.llama..e',
      'spillway.state.l.z.e.other',
      'x.state.a.b.c',
    ]) {
      expect(parseStateSubject(bad)).toBeUndefined();
    }
  });

  it('round-trip any names', () => {
    fc.assert(
      fc.property(
        fc.string({ minLength: 1, maxLength: 20 }),
        fc.string({ minLength: 1, maxLength: 20 }),
        fc.string({ minLength: 1, maxLength: 20 }),
        (pool, zone, epp) => {
          expect(parseStateSubject(stateSubjectFor({ pool, zone, epp }))).toEqual({ pool, zone, epp, sync: false });
        },
      ),
    );
  });

  it('EPP ids are one readable token with the suffix that makes them unique', () => {
    expect(eppIdOf('spillway-epp-zone-a-7d9f-x2', 'a1b2c3')).toBe('spillway-epp-zone-a-7d9f-x2-a1b2c3');
    expect(eppIdOf('host.example.com', 'ff')).toBe('host-example-com-ff');
    expect(eppIdOf('', '')).toBe('epp-0');
    expect(eppIdOf('x'.repeat(200), 'y'.repeat(40)).length).toBeLessThanOrEqual(64);
  });
});

describe('state batches', () => {
  it('round-trip through msgpack, checked against the subject they came on', () => {
    const decoded = decodeStateBatch(encodeStateBatch(batch()), FROM);
    expect(decoded).toEqual({ ok: true, batch: batch() });
    expect(stateBatchHashes(batch())).toBe(5);
    const snapshot = batch({ snapshot: { last: true }, entries: [] });
    expect(decodeStateBatch(encodeStateBatch(snapshot))).toEqual({ ok: true, batch: snapshot });
  });

  it('ignore unknown header fields (forward compatible)', () => {
    const decoded = decodeStateBatch(encode({ ...batch(), future: 'field' }), FROM);
    expect(decoded.ok).toBe(true);
  });

  it('forged origins are refused: another EPP, zone or pool than the subject names', () => {
    for (const forged of [batch({ epp: 'epp-a-1' }), batch({ zone: 'zone-b' }), batch({ pool: 'other' })]) {
      expect(decodeStateBatch(encodeStateBatch(forged), FROM)).toMatchObject({ ok: false, reason: 'subject-mismatch' });
    }
  });

  it('malformed payloads get typed errors, never a throw', () => {
    expect(decodeStateBatch(new TextEncoder().encode('{"v":1}'))).toMatchObject({ ok: false });
    expect(decodeStateBatch(new Uint8Array([0xc1]))).toMatchObject({ ok: false, reason: 'not-msgpack' });
    const invalid: unknown[] = [
      { ...batch(), v: 2 },
      { ...batch(), seq: -1 },
      { ...batch(), sentAt: Number.NaN },
      { ...batch(), entries: [[9, 1]] },
      { ...batch(), entries: [[1, 1, 'z', 'p', 5, [1.5]]] },
      { ...batch(), entries: [[1, 1, 'z', 'p', 5, [-1]]] },
      { ...batch(), entries: [[1, 1, 'z', 'p', 5, [2 ** 53]]] },
      { ...batch(), entries: [[1, 1, '', 'p', 5, []]] },
      { ...batch(), entries: [[2, 'x', 5]] },
      { ...batch(), entries: [[3, 'z', 'p']] },
      { ...batch(), epp: '' },
      'a string',
      [1, 2, 3],
    ];
    for (const value of invalid) expect(decodeStateBatch(encode(value), FROM)).toMatchObject({ ok: false, reason: 'invalid' });
    // Truncated input mid-array, then a good batch: the shared decoder starts afresh each time.
    const good = encodeStateBatch(batch());
    expect(decodeStateBatch(good.subarray(0, good.length - 5), FROM)).toMatchObject({ ok: false, reason: 'not-msgpack' });
    expect(decodeStateBatch(good, FROM)).toEqual({ ok: true, batch: batch() });
  });

  it('bounds: bytes, entries, hashes per entry and per batch', () => {
    expect(decodeStateBatch(new Uint8Array(MAX_STATE_BATCH_BYTES + 1))).toMatchObject({ ok: false, reason: 'oversized' });
    const releases = (n: number) => Array.from({ length: n }, (_, i): StateBatch['entries'][number] => [2, i, 5]);
    expect(decodeStateBatch(encodeStateBatch(batch({ entries: releases(MAX_STATE_ENTRIES) })))).toMatchObject({ ok: true });
    expect(decodeStateBatch(encodeStateBatch(batch({ entries: releases(MAX_STATE_ENTRIES + 1) })))).toMatchObject({
      ok: false,
      reason: 'invalid',
    });
    const long = Array.from({ length: MAX_STATE_ENTRY_HASHES + 1 }, (_, i) => i);
    expect(decodeStateBatch(encode(batch({ entries: [[4, 'z', 'p', long]] })))).toMatchObject({ ok: false });
    // Many entries each within bounds, more hashes in all than a batch may carry (small numbers keep it under the byte bound).
    const chunk = Array.from({ length: 8192 }, (_, i) => i % 100);
    const entries = Array.from({ length: MAX_STATE_HASHES / 8192 + 1 }, (_, i): StateBatch['entries'][number] => [
      1,
      i,
      'z',
      'p',
      5,
      chunk,
    ]);
    expect(decodeStateBatch(encodeStateBatch(batch({ entries })))).toMatchObject({ ok: false, reason: 'too-many-hashes' });
  });
});

describe('entries a first reader does not know (the lifecycle field)', () => {
  const started = (id: number): StateBatch['entries'][number] => [STATE_STARTED, id, 1_764_420_000_070, 812, 256];
  const withStarts = (): StateBatch =>
    batch({
      entries: [
        [1, 7, 'zone-b', 'vllm.0', 1_764_420_000_050, [1, 2, 3]],
        started(7),
        [2, 6, RELEASED_WITHOUT_COMPLETION],
        started(8),
        [3, 'zone-a', 'vllm-a-1', 1_764_420_005_000],
      ],
    });

  it('round-trip: the later kinds come back after the first ones, each in its order', () => {
    const decoded = decodeStateBatch(encodeStateBatch(withStarts()), FROM);
    expect(decoded).toEqual({
      ok: true,
      batch: batch({
        entries: [
          [1, 7, 'zone-b', 'vllm.0', 1_764_420_000_050, [1, 2, 3]],
          [2, 6, RELEASED_WITHOUT_COMPLETION],
          [3, 'zone-a', 'vllm-a-1', 1_764_420_005_000],
          started(7),
          started(8),
        ],
      }),
    });
    // A batch without them is encoded exactly as before.
    expect(encodeStateBatch(batch())).toEqual(encode(batch()));
  });

  it('a reader as first released decodes the batch, with the same first-kind entries, skipping the rest', () => {
    const first = readStateBatchAsFirstReleased(encodeStateBatch(withStarts()));
    expect(first.entries).toEqual([
      [1, 7, 'zone-b', 'vllm.0', 1_764_420_000_050, [1, 2, 3]],
      [2, 6, RELEASED_WITHOUT_COMPLETION],
      [3, 'zone-a', 'vllm-a-1', 1_764_420_005_000],
    ]);
    // However many: a binary is one value to skip.
    const many = batch({ entries: Array.from({ length: MAX_STATE_ENTRIES }, (_, i) => started(i)) });
    expect(readStateBatchAsFirstReleased(encodeStateBatch(many)).entries).toEqual([]);
    expect(decodeStateBatch(encodeStateBatch(many))).toMatchObject({ ok: true });
    // The same entries in `entries` itself are what a first reader refuses: why they travel apart.
    expect(() => readStateBatchAsFirstReleased(encode(withStarts()))).toThrow(/unknown entry kind 5/);
  });

  it('kinds beyond those this reader knows are skipped in the field; malformed content refuses the batch', () => {
    const lifecycle = (value: unknown) => encode({ ...batch(), lifecycle: value instanceof Uint8Array ? value : encode(value) });
    const later = decodeStateBatch(lifecycle([started(1), [9, 'a', { b: [1, 2] }], [6, 3, 'samples'], started(2)]));
    expect(later.ok && later.batch.entries.slice(-2)).toEqual([started(1), started(2)]);
    const bad: unknown[] = [
      'not an array',
      [[]],
      [[4, 'z', 'p', []]], // a first kind does not belong there
      [[STATE_STARTED, 1, 5, 10]],
      [[STATE_STARTED, 1, 5, -1, 0]],
      [[STATE_STARTED, 1, 5, 1.5, 0]],
      [[STATE_STARTED, 1, 5, 0, 2e9]],
      [[STATE_STARTED, -1, 5, 0, 0]],
      [[2.5, 1]],
      Array.from({ length: MAX_STATE_ENTRIES + 1 }, (_, i) => started(i)),
    ];
    for (const value of bad)
      expect(decodeStateBatch(lifecycle(value)), JSON.stringify(value).slice(0, 80)).toMatchObject({ ok: false, reason: 'invalid' });
    expect(decodeStateBatch(lifecycle(new Uint8Array([0x91, 0xc1])))).toMatchObject({ ok: false, reason: 'not-msgpack' });
    expect(decodeStateBatch(lifecycle(Uint8Array.from([...encode([started(1)]), 0x00])))).toMatchObject({
      ok: false,
      reason: 'not-msgpack',
    });
    expect(decodeStateBatch(encode({ ...batch(), lifecycle: [started(1)] }))).toMatchObject({ ok: false, reason: 'invalid' });
  });
});
