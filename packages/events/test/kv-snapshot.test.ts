import { describe, expect, it } from 'vitest';
import {
  compileSchema,
  decodeEvent,
  encodeEvent,
  fitKvSnapshot,
  kvBlockKeys,
  kvSnapshotEventSchema,
  MAX_EVENT_BYTES,
  MAX_KV_SNAPSHOT_BYTES,
  MAX_KV_SNAPSHOT_KEYS,
  MAX_KV_SNAPSHOT_RANKS,
  MAX_KV_SNAPSHOT_TIERS,
  parseSubject,
  subjectFor,
  subjectOf,
  type KvSnapshotEvent,
} from '@spillway/events';

const tokens = Array.from({ length: 64 }, (_, i) => 1000 + i);
const snapshot: KvSnapshotEvent = {
  v: 1,
  kind: 'kv',
  pool: 'llama',
  zone: 'zone-a',
  pod: 'vllm-a-0',
  observedAt: 1764420000000,
  blockSize: 16,
  seq: 41,
  keys: kvBlockKeys(tokens, 16),
};
const SUBJECT = 'spillway.v1.llama.zone-a.vllm-a-0.kv';

function reason(payload: string | Uint8Array, subject?: string): string {
  const result = decodeEvent(payload, subject);
  return result.ok ? 'ok' : result.error.reason;
}

describe('the kv snapshot kind', () => {
  it('has its own subject under spillway.v1, and round-trips through encode and decode', () => {
    expect(subjectOf(snapshot)).toBe(SUBJECT);
    expect(parseSubject(SUBJECT)).toEqual({ pool: 'llama', zone: 'zone-a', pod: 'vllm-a-0', kind: 'kv' });
    expect(subjectFor({ pool: 'l.x', zone: 'z', pod: 'p', kind: 'kv' })).toBe('spillway.v1.l%2Ex.z.p.kv');
    expect(decodeEvent(encodeEvent(snapshot), SUBJECT)).toEqual({ ok: true, event: snapshot });
    expect(decodeEvent(JSON.stringify({ ...snapshot, keys: [] }), SUBJECT).ok).toBe(true);
  });

  it('requires the subject to name the same pool, zone, pod and kind', () => {
    for (const subject of [
      'spillway.v1.llama.zone-b.vllm-a-0.kv',
      'spillway.v1.llama.zone-a.vllm-a-1.kv',
      'spillway.v1.llama.zone-a.vllm-a-0.metrics',
      'spillway.kv.llama.zone-a.vllm-a-0',
      'spillway.v1.llama.zone-a.vllm-a-0.kvx',
    ]) {
      expect(reason(encodeEvent(snapshot), subject)).toBe('subject-mismatch');
    }
  });

  const invalid: [string, object, string][] = [
    ['too many keys', { ...snapshot, keys: Array.from({ length: MAX_KV_SNAPSHOT_KEYS + 1 }, (_, i) => i) }, 'keys'],
    ['a negative key', { ...snapshot, keys: [1, -2] }, 'keys.1'],
    ['a fractional key', { ...snapshot, keys: [1.5] }, 'keys.0'],
    ['a key past 2^53', { ...snapshot, keys: [2 ** 54] }, 'keys.0'],
    ['a string key', { ...snapshot, keys: ['12'] }, 'keys.0'],
    ['keys not a list', { ...snapshot, keys: 7 }, 'keys'],
    ['missing keys', { ...snapshot, keys: undefined }, 'keys'],
    ['blockSize zero', { ...snapshot, blockSize: 0 }, 'blockSize'],
    ['blockSize huge', { ...snapshot, blockSize: 5000 }, 'blockSize'],
    ['negative seq', { ...snapshot, seq: -1 }, 'seq'],
    ['fractional seq', { ...snapshot, seq: 1.5 }, 'seq'],
    ['missing pod', { ...snapshot, pod: undefined }, 'pod'],
    ['observedAt past the schema maximum', { ...snapshot, observedAt: 9e15 }, 'observedAt'],
    ['a rank past 65535', { ...snapshot, ranks: [{ rank: 65536, blocks: 1 }] }, 'ranks.0.rank'],
    ['a rank without its blocks', { ...snapshot, ranks: [{ rank: 0 }] }, 'ranks.0.blocks'],
    ['a negative rank block count', { ...snapshot, ranks: [{ rank: 0, blocks: -1 }] }, 'ranks.0.blocks'],
    ['a group kind of 65 characters', { ...snapshot, ranks: [{ rank: 0, blocks: 1, kind: 'k'.repeat(65) }] }, 'ranks.0.kind'],
    [
      'too many ranks',
      { ...snapshot, ranks: Array.from({ length: MAX_KV_SNAPSHOT_RANKS + 1 }, (_, rank) => ({ rank, blocks: 0 })) },
      'ranks',
    ],
    ['known without since', { ...snapshot, known: { complete: true } }, 'known.since'],
    ['known without complete', { ...snapshot, known: { since: 5 } }, 'known.complete'],
    ['a negative known since', { ...snapshot, known: { since: -1, complete: false } }, 'known.since'],
    ['a known since past the schema maximum', { ...snapshot, known: { since: 9e15, complete: false } }, 'known.since'],
    ['a known complete that is a string', { ...snapshot, known: { since: 5, complete: 'yes' } }, 'known.complete'],
    ['known that is a list', { ...snapshot, known: [5, true] }, 'known'],
    ['a tier without a medium', { ...snapshot, tiers: [{ blocks: 1 }] }, 'tiers.0.medium'],
    ['an empty medium', { ...snapshot, tiers: [{ medium: '', blocks: 1 }] }, 'tiers.0.medium'],
    ['a fractional tier count', { ...snapshot, tiers: [{ medium: 'CPU', blocks: 0.5 }] }, 'tiers.0.blocks'],
    [
      'too many tiers',
      { ...snapshot, tiers: Array.from({ length: MAX_KV_SNAPSHOT_TIERS + 1 }, () => ({ medium: 'CPU', blocks: 1 })) },
      'tiers',
    ],
  ];
  it.each(invalid)('rejects %s with a message naming the field', (_name, value, field) => {
    const result = decodeEvent(JSON.stringify(value), SUBJECT);
    expect(result.ok).toBe(false);
    if (!result.ok) {
      expect(result.error.reason).toBe('invalid');
      expect(result.error.message).toContain(field);
    }
  });

  it('optionally describes its ranks and tiers; readers from before those fields ignore them', () => {
    const described: KvSnapshotEvent = {
      ...snapshot,
      ranks: [
        { rank: 0, blocks: 3, group: 0, kind: 'full_attention' },
        { rank: 1, blocks: 2, group: 0, kind: 'full_attention' },
      ],
      tiers: [
        { medium: 'GPU', blocks: 6 },
        { medium: 'CPU', blocks: 40 },
      ],
    };
    expect(decodeEvent(encodeEvent(described), SUBJECT)).toEqual({ ok: true, event: described });
    // The snapshot kind as first released: unknown fields are stripped, by zod and by the compiled check.
    const first = kvSnapshotEventSchema.omit({ ranks: true, tiers: true });
    const { ranks: _r, tiers: _t, ...rest } = described;
    expect(first.parse(JSON.parse(Buffer.from(encodeEvent(described)).toString()))).toEqual(rest);
    expect(compileSchema(first)(JSON.parse(Buffer.from(encodeEvent(described)).toString()))).toEqual(rest);
  });

  it('optionally says whether the relay knows every block of the pod; readers from before that field ignore it', () => {
    const partial: KvSnapshotEvent = { ...snapshot, ranks: [{ rank: 0, blocks: 4 }], known: { since: 1764419990000, complete: false } };
    expect(decodeEvent(encodeEvent(partial), SUBJECT)).toEqual({ ok: true, event: partial });
    expect(decodeEvent(encodeEvent({ ...partial, known: { since: 0, complete: true } }), SUBJECT).ok).toBe(true);
    const wire = () => JSON.parse(Buffer.from(encodeEvent(partial)).toString()) as unknown;
    const { known: _k, ...described } = partial;
    // The snapshot kind with ranks and tiers, and as first released: the field is stripped, by zod and by the compiled check.
    const before = kvSnapshotEventSchema.omit({ known: true });
    expect(before.parse(wire())).toEqual(described);
    expect(compileSchema(before)(wire())).toEqual(described);
    const { ranks: _r, ...first } = described;
    expect(compileSchema(kvSnapshotEventSchema.omit({ known: true, ranks: true, tiers: true }))(wire())).toEqual(first);
  });

  it('a full snapshot of 53-bit keys fits its byte limit; other kinds keep theirs', () => {
    const full = { ...snapshot, keys: Array.from({ length: MAX_KV_SNAPSHOT_KEYS }, () => Number.MAX_SAFE_INTEGER) };
    const bytes = encodeEvent(full);
    expect(bytes.byteLength).toBeGreaterThan(MAX_EVENT_BYTES);
    expect(bytes.byteLength).toBeLessThanOrEqual(MAX_KV_SNAPSHOT_BYTES);
    expect(reason(bytes, SUBJECT)).toBe('ok');
    expect(reason(bytes)).toBe('ok');
    // Padding past the kv limit is refused unparsed; a metrics subject keeps the small limit.
    expect(reason(' '.repeat(MAX_KV_SNAPSHOT_BYTES + 1), SUBJECT)).toBe('oversized');
    expect(reason(' '.repeat(MAX_EVENT_BYTES + 1), 'spillway.v1.llama.zone-a.vllm-a-0.metrics')).toBe('oversized');
    // A metrics event padded past 64 KB with whitespace is refused even without a subject.
    const metrics = {
      v: 1,
      kind: 'metrics',
      pool: 'llama',
      zone: 'zone-a',
      pod: 'p',
      observedAt: 1,
      waitingRequests: 0,
      runningRequests: 0,
      kvCacheUsage: 0,
    };
    expect(reason(JSON.stringify(metrics) + ' '.repeat(MAX_EVENT_BYTES))).toBe('oversized');
  });

  it('fitKvSnapshot keeps the newest keys within a byte budget and the key cap', () => {
    expect(fitKvSnapshot(snapshot)).toBe(snapshot);
    const many = { ...snapshot, keys: Array.from({ length: MAX_KV_SNAPSHOT_KEYS + 100 }, (_, i) => 1e15 + i) };
    const capped = fitKvSnapshot(many);
    expect(capped.keys).toHaveLength(MAX_KV_SNAPSHOT_KEYS);
    expect(capped.keys.at(-1)).toBe(many.keys.at(-1));
    expect(capped.keys[0]).toBe(many.keys[100]);
    const small = fitKvSnapshot(many, 4096);
    const size = encodeEvent(small).byteLength;
    expect(size).toBeLessThanOrEqual(4096);
    expect(size).toBeGreaterThan(4096 - 40);
    expect(small.keys.at(-1)).toBe(many.keys.at(-1));
    expect(kvSnapshotEventSchema.safeParse(small).success).toBe(true);
  });

  it('fitKvSnapshot: a cut snapshot is not complete; an uncut one says what the relay said', () => {
    const known = { since: 1764419990000, complete: true };
    const whole = { ...snapshot, known };
    expect(fitKvSnapshot(whole)).toBe(whole);
    const many = { ...whole, keys: Array.from({ length: MAX_KV_SNAPSHOT_KEYS + 100 }, (_, i) => 1e15 + i) };
    expect(fitKvSnapshot(many).known).toEqual({ since: known.since, complete: false });
    const small = fitKvSnapshot(many, 4096);
    expect(small.known).toEqual({ since: known.since, complete: false });
    expect(encodeEvent(small).byteLength).toBeLessThanOrEqual(4096);
    // The relay's own word is kept as it was: the input is not changed.
    expect(many.known).toEqual(known);
    const partial = { ...many, known: { since: 5, complete: false } };
    expect(fitKvSnapshot(partial).known).toEqual({ since: 5, complete: false });
  });
});
