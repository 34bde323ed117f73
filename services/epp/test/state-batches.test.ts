/**
 * What this EPP sends its peers always fits what they accept: the publisher's and the warm-start
 * responder's batches are cut within the decode bounds of packages/events/src/state.ts (entries,
 * hashes per entry and per batch, bytes), whatever the outbox or the snapshot holds. Checked on the
 * splitting itself (generated entries) and end to end: a real StatePublisher flushing a large
 * outbox over a real nats-server, every message decoded as a receiver decodes it.
 */
import { connect } from '@nats-io/transport-node';
import type { NatsConnection } from '@nats-io/nats-core';
import fc from 'fast-check';
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  decodeStateBatch,
  encodeStateBatch,
  MAX_STATE_BATCH_BYTES,
  MAX_STATE_ENTRIES,
  MAX_STATE_ENTRY_HASHES,
  MAX_STATE_HASHES,
  stateBatchHashes,
  stateSubjectFor,
  type StateBatch,
  type StateEntry,
} from '@spillway/events';
import { startNatsServer, type NatsServerHandle } from '@spillway/testkit';
import { stateBatches } from '../src/shared-state/batches.js';
import { SharedStateCounters } from '../src/shared-state/counters.js';
import { StateOutbox } from '../src/shared-state/outbox.js';
import { StatePublisher } from '../src/shared-state/publisher.js';
import { snapshotParts } from '../src/shared-state/receiver.js';

const SELF = { pool: 'llama', zone: 'zone-a', epp: 'epp-a-1' };
const hashes = (n: number, seed: number): number[] => Array.from({ length: n }, (_, i) => (seed * 1_000_003 + i * 7919) % 2 ** 53);

/** A batch of `entries` as the publisher sends it, decoded as every receiver decodes it. */
function receive(entries: StateEntry[]): StateBatch {
  const data = encodeStateBatch({ v: 1, ...SELF, seq: 1, sentAt: 1_764_420_000_000, entries });
  expect(data.byteLength).toBeLessThanOrEqual(MAX_STATE_BATCH_BYTES);
  const decoded = decodeStateBatch(data, SELF);
  if (!decoded.ok) throw new Error(`refused: ${decoded.reason}: ${decoded.detail}`);
  return decoded.batch;
}

/** What a receiver should end up with: picks keep their first hashes, long placements are cut in order. */
function expected(entries: readonly StateEntry[]): StateEntry[] {
  return entries.flatMap((e): StateEntry[] => {
    if (e[0] === 1) return [[1, e[1], e[2], e[3], e[4], e[5].slice(0, MAX_STATE_ENTRY_HASHES)]];
    if (e[0] !== 4 || e[3].length <= MAX_STATE_ENTRY_HASHES) return [e];
    const out: StateEntry[] = [];
    for (let i = 0; i < e[3].length; i += MAX_STATE_ENTRY_HASHES) out.push([4, e[1], e[2], e[3].slice(i, i + MAX_STATE_ENTRY_HASHES)]);
    return out;
  });
}

// Names as the fleet allows them (1 to 253 characters), non-ASCII too (more UTF-8 bytes than characters).
const name = fc.oneof(
  fc.constantFrom('zone-a', 'zone-b', 'vllm-0', 'vllm-17'),
  fc.string({ minLength: 1, maxLength: 253, unit: 'grapheme-ascii' }),
  fc.string({ minLength: 1, maxLength: 84, unit: 'grapheme' }).filter((s) => s.length <= 253),
);
const time = fc.integer({ min: 0, max: 2 ** 42 });
// Hash counts around every bound: none, a prompt's usual few hundred, one entry's bound, past it.
const hashCount = fc.oneof(
  fc.constant(0),
  fc.integer({ min: 1, max: 600 }),
  fc.constantFrom(MAX_STATE_ENTRY_HASHES - 1, MAX_STATE_ENTRY_HASHES, MAX_STATE_ENTRY_HASHES + 1, 65_536),
);
const entry: fc.Arbitrary<StateEntry> = fc.oneof(
  fc.tuple(fc.nat(), name, name, time, hashCount).map(([id, zone, pod, at, n]): StateEntry => [1, id, zone, pod, at, hashes(n, id)]),
  fc.tuple(fc.nat(), time).map(([id, at]): StateEntry => [2, id, at]),
  fc.tuple(name, name, time).map(([zone, pod, until]): StateEntry => [3, zone, pod, until]),
  fc.tuple(name, name, hashCount).map(([zone, pod, n]): StateEntry => [4, zone, pod, hashes(n, n)]),
);
// Mostly short lists, sometimes more entries than one batch carries (a busy outbox, a large snapshot).
const entries = fc.oneof(
  fc.array(entry, { maxLength: 40 }),
  fc
    .tuple(fc.array(entry, { maxLength: 8 }), fc.integer({ min: MAX_STATE_ENTRIES - 2, max: 3 * MAX_STATE_ENTRIES }))
    .map(([head, n]) => [
      ...head,
      ...Array.from({ length: n }, (_, i): StateEntry => (i % 2 === 0 ? [2, i, 5] : [1, i, 'zone-b', `vllm-${i % 97}`, 5, hashes(64, i)])),
    ]),
);

describe('stateBatches: what the publisher and the warm-start responder cut their entries into', () => {
  it('every batch is one a receiver accepts, and the receivers get every entry, in order', () => {
    fc.assert(
      fc.property(entries, fc.constantFrom(256 * 1024, 64 * 1024, 1), (list, targetBytes) => {
        const batches = stateBatches(list, targetBytes);
        expect(batches.length).toBeGreaterThanOrEqual(1);
        const received = batches.map(receive);
        for (const batch of received) {
          expect(batch.entries.length).toBeLessThanOrEqual(MAX_STATE_ENTRIES);
          expect(stateBatchHashes(batch)).toBeLessThanOrEqual(MAX_STATE_HASHES);
        }
        expect(received.flatMap((b) => b.entries)).toEqual(expected(list));
      }),
      { numRuns: 60 },
    );
  });

  it('nothing to send is one empty batch (the heartbeat)', () => {
    expect(stateBatches([], 256 * 1024)).toEqual([[]]);
  });

  it('a pick with more hashes than an entry may carry keeps the prompt’s first blocks', () => {
    const long = hashes(65_536, 3);
    const [batch] = stateBatches([[1, 9, 'zone-a', 'vllm-0', 5, long]], 256 * 1024);
    expect(batch).toEqual([[1, 9, 'zone-a', 'vllm-0', 5, long.slice(0, MAX_STATE_ENTRY_HASHES)]]);
  });
});

describe('snapshotParts: a warm-start answer', () => {
  it('10,000 requests in flight and long placement lists: every part accepted, within the byte budget, nothing reordered', () => {
    const inFlight = Array.from({ length: 10_000 }, (_, i): StateEntry => [1, i + 1, 'zone-a', `vllm-${i % 50}`, 5, []]);
    const placements = Array.from({ length: 6 }, (_, i): StateEntry => [4, 'zone-a', `vllm-${i}`, hashes(8192, i)]);
    const all = [...inFlight, ...placements, [3, 'zone-a', 'vllm-3', 9]] as StateEntry[];
    const parts = snapshotParts(all, 64 * 1024 * 1024);
    expect(parts.length).toBeGreaterThan(1);
    expect(parts.map(receive).flatMap((b) => b.entries)).toEqual(all);
    // A small budget leaves the rest out, still in order and still accepted.
    const small = snapshotParts(all, 100_000);
    const kept = small.map(receive).flatMap((b) => b.entries);
    expect(kept).toEqual(all.slice(0, kept.length));
    expect(kept.length).toBeLessThan(all.length);
    expect(snapshotParts([], 1024)).toEqual([[]]);
  });
});

describe('StatePublisher over a real nats-server', () => {
  let nats: NatsServerHandle;
  let nc: NatsConnection;
  let listener: NatsConnection;

  beforeAll(async () => {
    nats = await startNatsServer({ forcePrivate: true });
    nc = await connect({ servers: nats.url });
    listener = await connect({ servers: nats.url });
  });
  afterAll(async () => {
    await nc?.close();
    await listener?.close();
    await nats?.stop();
  });

  it('flushes a busy outbox (picks with long prompts, many releases) as batches every peer accepts, numbered one by one', async () => {
    const received: Uint8Array[] = [];
    const subscription = listener.subscribe(stateSubjectFor(SELF), { callback: (_error, msg) => void received.push(msg.data) });
    await listener.flush();
    const counters = new SharedStateCounters();
    const outbox = new StateOutbox({
      batchMs: 60_000,
      batchEntries: 100_000,
      maxBufferedEntries: 100_000,
      maxBufferedBytes: 256 * 1024 * 1024,
    });
    const context = { nc, self: SELF, counters, logger: pino({ level: 'silent' }), now: () => Date.now() };
    const publisher = new StatePublisher(context, outbox, 60_000);
    const pushed: StateEntry[] = [];
    for (let i = 0; i < 3000; i++) {
      const e: StateEntry =
        i % 3 === 0 ? [2, i, Date.now()] : [1, i, 'zone-a', `vllm-${i % 40}`, Date.now(), hashes(i % 500 === 1 ? 65_536 : 256, i)];
      pushed.push(e);
      outbox.push(e);
    }
    publisher.flush();
    await nc.flush();
    await listener.flush();
    subscription.unsubscribe();
    const batches = received.map((data) => {
      const decoded = decodeStateBatch(data, SELF);
      if (!decoded.ok) throw new Error(`a peer refuses this batch: ${decoded.reason}: ${decoded.detail}`);
      return decoded.batch;
    });
    expect(batches.length).toBeGreaterThan(3000 / MAX_STATE_ENTRIES);
    expect(batches.map((b) => b.seq)).toEqual(batches.map((_, i) => i + 1));
    expect(batches.flatMap((b) => b.entries)).toEqual(expected(pushed));
    expect(counters.dropped.oversized).toBe(0);
    expect(counters.batchesOut).toBe(batches.length);
  });
});
