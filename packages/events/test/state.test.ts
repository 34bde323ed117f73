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
  stateBatchHashes,
  statePoolFilter,
  stateSubjectFor,
  stateSyncFilter,
  stateSyncSubjectFor,
  stateZoneFilter,
  type StateBatch,
} from '@spillway/events';

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
