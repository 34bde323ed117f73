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
  MAX_KV_BATCH_BYTES,
  parseKvSubject,
  type KvBatch,
} from '@spillway/events';

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
