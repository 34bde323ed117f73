import {
  decodeKvBatch,
  encodeKvBatch,
  KV_CLEARED,
  KV_REMOVED,
  KV_STORED,
  MAX_KV_SKIPPED,
  MAX_KV_STORED_RUNS,
  type KvBatch,
} from '@spillway/events';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { blockInfo, chunkKvChanges, relayText, relayWhole, SkippedTally, type KvChange } from '../src/kv-info.js';

const tokens = (n: number, base = 0) => Array.from({ length: n }, (_, i) => base + i);
const gpu = { medium: 'GPU', group: 0, kind: 'full_attention' };
const relayed = (extra: Partial<KvBatch>): KvBatch => ({
  v: 1,
  pool: 'llama',
  zone: 'zone-a',
  pod: 'p',
  seq: 1,
  observedAt: 1,
  blockSize: 16,
  events: [],
  ...extra,
});

describe('descriptions of what a server said', () => {
  it('leave out what the server did not say, cut long texts and drop numbers a reader would refuse', () => {
    expect(blockInfo({ medium: null, group: null, kind: null, window: null, lora: null })).toEqual({});
    expect(blockInfo({ medium: '', kind: '', lora: '' })).toEqual({});
    expect(blockInfo({ medium: 'x'.repeat(100), lora: 'l'.repeat(300), extraKeys: false })).toEqual({
      medium: 'x'.repeat(64),
      lora: 'l'.repeat(253),
    });
    expect(blockInfo({ group: -1, window: 2 ** 32 })).toEqual({});
    expect(blockInfo({ group: 2 ** 32 - 1, window: 0, extraKeys: true })).toEqual({ group: 2 ** 32 - 1, window: 0, extraKeys: true });
    // A cut in the middle of a surrogate pair would not be UTF-8: the half left is replaced.
    expect(relayText(`${'a'.repeat(63)}😀`)).toBe(`${'a'.repeat(63)}\ufffd`);
    expect(relayText('\udc00x')).toBe('\ufffdx');
    expect(relayWhole(1.5)).toBeUndefined();
  });

  it('whatever a server sends, the batch carrying it decodes at every EPP (property)', () => {
    const said = fc.record({
      medium: fc.option(fc.oneof(fc.string({ unit: 'binary', maxLength: 300 }), fc.constantFrom('\ud800', 'x\udfff', '😀'.repeat(40)))),
      group: fc.option(fc.oneof(fc.integer(), fc.double())),
      kind: fc.option(fc.string({ unit: 'grapheme', maxLength: 100 })),
      window: fc.option(fc.oneof(fc.integer({ min: -5, max: 2 ** 40 }), fc.double())),
      lora: fc.option(fc.string({ unit: 'binary-ascii', maxLength: 400 })),
      extraKeys: fc.boolean(),
    });
    fc.assert(
      fc.property(fc.array(said, { minLength: 1, maxLength: 20 }), (list) => {
        const tally = new SkippedTally();
        const changes: KvChange[] = list.map((s, i) => [KV_STORED, [i], blockInfo(s)]);
        list.forEach((s, i) => tally.add(`reason-${i % 3}`, 1, { info: blockInfo(s), removed: i % 2 === 0 }));
        for (const chunk of chunkKvChanges(changes, { maxEvents: 1024, maxKeys: 8192, maxRuns: MAX_KV_STORED_RUNS })) {
          const batch = relayed({ events: chunk.events, stored: chunk.stored, skipped: tally.list(), rank: 3 });
          const decoded = decodeKvBatch('spillway.kv.llama.zone-a.p', encodeKvBatch(batch));
          expect(decoded.ok ? 'ok' : decoded.detail).toBe('ok');
        }
      }),
      { numRuns: 300 },
    );
  });
});

describe('SkippedTally', () => {
  it('sums blocks by reason and description, stored and removed apart, within the bound', () => {
    const tally = new SkippedTally();
    expect(tally.list()).toBeUndefined();
    tally.add('other-medium', 3, { info: { medium: 'CPU' } });
    tally.add('other-medium', 2, { info: { medium: 'CPU' } });
    tally.add('other-medium', 4, { info: { medium: 'CPU' }, removed: true });
    tally.add('other-group', 1, { info: { group: 1, kind: 'sliding_window', window: 8 } });
    tally.add('pod-overflow', 7, { removed: true });
    tally.add('orphan', 0);
    expect(tally.list()).toEqual([
      { reason: 'other-medium', medium: 'CPU', stored: 5, removed: 4 },
      { reason: 'other-group', group: 1, kind: 'sliding_window', window: 8, stored: 1 },
      { reason: 'pod-overflow', removed: 7 },
    ]);
  });

  it('a server naming a new medium per event: past the bound, the rest is one tally without description', () => {
    const tally = new SkippedTally();
    for (let i = 0; i < 100; i++) tally.add('other-medium', 1, { info: { medium: `tier-${i}` } });
    const list = tally.list() ?? [];
    expect(list).toHaveLength(MAX_KV_SKIPPED);
    expect(list.at(-1)).toEqual({ stored: 100 - (MAX_KV_SKIPPED - 1) });
    expect(list.reduce((n, t) => n + (t.stored ?? 0), 0)).toBe(100);
  });
});

describe('chunkKvChanges', () => {
  it('cuts batches at the event and key bounds, keeping order; the pieces of a cut stored event keep its description', () => {
    const changes: KvChange[] = [[KV_CLEARED], [KV_STORED, tokens(5), gpu], [KV_REMOVED, tokens(2, 50)], [KV_STORED, [9]]];
    const out = chunkKvChanges(changes, { maxEvents: 2, maxKeys: 3, maxRuns: 16 });
    expect(out).toEqual([
      {
        events: [[KV_CLEARED], [KV_STORED, [0, 1, 2]]],
        stored: [{ events: 1, ...gpu }],
      },
      { events: [[KV_STORED, [3, 4]]], stored: [{ events: 1, ...gpu }] },
      {
        events: [
          [KV_REMOVED, [50, 51]],
          [KV_STORED, [9]],
        ],
        // A stored change the relay did not describe: a run that says nothing.
        stored: [{ events: 1 }],
      },
    ]);
  });

  it('consecutive stored events with one description are one run; a new description past the run bound starts a batch', () => {
    const lora = (name: string) => ({ ...gpu, lora: name });
    const changes: KvChange[] = [
      [KV_STORED, [1], gpu],
      [KV_STORED, [2], gpu],
      [KV_REMOVED, [7]],
      [KV_STORED, [3], gpu],
      [KV_STORED, [4], lora('a')],
      [KV_STORED, [5], lora('b')],
      [KV_STORED, [6], lora('b')],
    ];
    expect(chunkKvChanges(changes, { maxEvents: 100, maxKeys: 100, maxRuns: 2 })).toEqual([
      {
        events: [
          [KV_STORED, [1]],
          [KV_STORED, [2]],
          [KV_REMOVED, [7]],
          [KV_STORED, [3]],
          [KV_STORED, [4]],
        ],
        stored: [
          { events: 3, ...gpu },
          { events: 1, ...lora('a') },
        ],
      },
      {
        events: [
          [KV_STORED, [5]],
          [KV_STORED, [6]],
        ],
        stored: [{ events: 2, ...lora('b') }],
      },
    ]);
  });
});
