/**
 * Hostile KV-event publishers against the relay: a raw ZeroMQ PUB socket sends what no vLLM would
 * (garbage, unknown tags, huge batches, wrong frames, a flood of blocks, megabytes of nested
 * one-element arrays). Everything is dropped or bounded and counted; the relay keeps relaying
 * valid batches and never throws.
 */
import { encode } from '@msgpack/msgpack';
import {
  DEFAULT_VLLM_KV_LIMITS,
  encodeVllmKvBatch,
  encodeVllmSeq,
  KV_CLEARED,
  KV_REMOVED,
  KV_STORED,
  kvBlockKeys,
  type KvBatch,
  type KvSnapshotEvent,
  type VllmKvLimits,
} from '@spillway/events';
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Publisher } from 'zeromq';
import { KvRelay, type KvSink } from '../src/kv-relay.js';
import { CollectorMetrics } from '../src/self-metrics.js';

class MemoryKvSink implements KvSink {
  readonly batches: KvBatch[] = [];
  readonly snapshots: KvSnapshotEvent[] = [];
  publishKvBatch(batch: KvBatch): boolean {
    this.batches.push(batch);
    return true;
  }
  publishKvSnapshot(event: KvSnapshotEvent): boolean {
    this.snapshots.push(event);
    return true;
  }
  maxPayload(): number {
    return 1024 * 1024;
  }
}

async function until(check: () => boolean, what: string): Promise<void> {
  const end = Date.now() + 10_000;
  while (!check()) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

/** A relay following one pod, `evil`, whose KV events come from `pub`. */
function relayOf(pub: Publisher, sink: KvSink, metrics: CollectorMetrics, limits: VllmKvLimits, maxBytesPerPod: number): KvRelay {
  const relay = new KvRelay({
    pool: 'llama',
    limits,
    maxBytesPerPod,
    snapshotIntervalMs: 60_000,
    replayTimeoutMs: 500,
    reconnectMs: 50,
    reconnectMaxMs: 200,
    topic: '',
    sink,
    logger: pino({ level: 'silent' }),
    metrics,
  });
  relay.setEndpoints([
    {
      pod: 'evil',
      address: '127.0.0.1:1',
      zone: 'zone-a',
      region: undefined,
      engine: undefined,
      labels: undefined,
      sourceReady: true,
      kvEvents: pub.lastEndpoint as string,
    },
  ]);
  return relay;
}

const BS = 4;
const tokens = (n: number, base = 0) => Array.from({ length: n }, (_, i) => base + i);

describe('KV relay against a hostile publisher', () => {
  let pub: Publisher;
  let relay: KvRelay;
  let sink: MemoryKvSink;
  let metrics: CollectorMetrics;
  let seq = 0;
  const counter = async (name: string, labels: Record<string, string> = {}) => {
    const m = (await metrics.registry.getSingleMetric(name)?.get())?.values.find((v) =>
      Object.entries(labels).every(([k, l]) => v.labels[k] === l),
    );
    return m?.value ?? 0;
  };
  const send = (payload: Uint8Array, s = seq++) => pub.send(['', encodeVllmSeq(s), payload]);
  const valid = (hashes: number[], parent: number | null, base: number) =>
    encodeVllmKvBatch(1, [
      {
        type: 'stored',
        hashes,
        parent,
        tokenIds: tokens(hashes.length * BS, base),
        blockSize: BS,
        loraId: null,
        medium: 'GPU',
        loraName: null,
      },
    ]);
  const relayedKeys = () => sink.batches.flatMap((b) => b.events.flatMap((e) => (e[0] === KV_STORED ? e[1] : [])));

  beforeAll(async () => {
    pub = new Publisher({ linger: 0 });
    await pub.bind('tcp://127.0.0.1:*');
    sink = new MemoryKvSink();
    metrics = new CollectorMetrics();
    relay = relayOf(pub, sink, metrics, { maxPayloadBytes: 64 * 1024, maxEvents: 64, maxHashes: 256, maxTokens: 1024 }, 176 * 100);
    // Publish valid batches until one arrives: the subscription is live from then on.
    await until(() => {
      void send(valid([seq + 1_000_000], null, seq * 100));
      return sink.batches.length > 0;
    }, 'the subscription');
  });
  afterAll(() => {
    relay.stop();
    pub.close();
  });

  it('drops garbage, unknown tags, huge batches and bad frames, counting each, and keeps relaying', async () => {
    await send(new Uint8Array([0xc1, 0xff, 0x00]));
    await send(encode({ not: 'a batch' }));
    await send(encode([1, [['BlockExploded', [1, 2]], ['AllBlocksCleared']]]));
    await send(encode([1, Array.from({ length: 65 }, () => ['AllBlocksCleared'])]));
    await send(new Uint8Array(128 * 1024));
    await pub.send(['', 'short', encode([1, []])]);
    await pub.send(['only-one-frame']);
    await send(valid([7001, 7002], null, 5000));
    await until(() => relayedKeys().includes(kvBlockKeys(tokens(8, 5000), BS)[1] as number), 'the valid batch after the junk');
    expect(await counter('spillway_collector_kv_dropped_total', { reason: 'not-msgpack' })).toBe(1);
    expect(await counter('spillway_collector_kv_dropped_total', { reason: 'malformed' })).toBe(1);
    expect(await counter('spillway_collector_kv_dropped_total', { reason: 'unknown-tag' })).toBe(1);
    expect(await counter('spillway_collector_kv_dropped_total', { reason: 'too-many-events' })).toBe(1);
    expect(await counter('spillway_collector_kv_dropped_total', { reason: 'oversized' })).toBe(1);
    expect(await counter('spillway_collector_kv_dropped_total', { reason: 'bad-seq' })).toBe(1);
    expect(await counter('spillway_collector_kv_dropped_total', { reason: 'bad-frames' })).toBe(1);
    // A dropped batch may have carried removals: the pod is started afresh, never left claiming
    // stale blocks: what was relayed before the junk is cleared before the valid batch's blocks.
    const validKey = kvBlockKeys(tokens(8, 5000), BS)[1] as number;
    const validAt = sink.batches.findIndex((b) => b.events.some((e) => e[0] === KV_STORED && e[1].includes(validKey)));
    const lastStoreBefore = sink.batches.slice(0, validAt).findLastIndex((b) => b.events.some((e) => e[0] === KV_STORED));
    const clearedAt = sink.batches.slice(0, validAt).findLastIndex((b) => b.events.some((e) => e[0] === KV_CLEARED));
    expect(clearedAt).toBeGreaterThan(lastStoreBefore);
    for (let i = 1; i < sink.batches.length; i++) expect(sink.batches[i]?.seq).toBe((sink.batches[i - 1]?.seq as number) + 1);
  });

  it('bounds a pod that floods blocks, relaying the forgotten ones as removed', async () => {
    const before = sink.batches.length;
    for (let i = 0; i < 20; i++) await send(valid(tokens(50, 10_000 + i * 50), null, i * 1000));
    await until(() => (relay.status()[0]?.blocks ?? 0) > 0 && sink.batches.length >= before + 20, 'the flood');
    const status = relay.status()[0];
    expect(status?.bytes).toBeLessThanOrEqual(176 * 100);
    expect(status?.blocks).toBeLessThanOrEqual(100);
    expect(await counter('spillway_collector_kv_skipped_blocks_total', { reason: 'pod-overflow' })).toBeGreaterThanOrEqual(900);
    const removed = sink.batches.slice(before).flatMap((b) => b.events.filter((e) => e[0] === KV_REMOVED));
    expect(removed.flatMap((e) => e[1] as number[]).length).toBeGreaterThanOrEqual(900);
  });

  it('publishes a snapshot of what it holds, newest last', () => {
    relay.publishSnapshots();
    const snap = sink.snapshots.at(-1);
    expect(snap).toMatchObject({
      v: 1,
      kind: 'kv',
      pool: 'llama',
      zone: 'zone-a',
      pod: 'evil',
      blockSize: BS,
      seq: sink.batches.at(-1)?.seq,
    });
    expect(snap?.keys.length).toBe(relay.status()[0]?.blocks);
    // The last flood batch's blocks are the newest.
    expect(snap?.keys.slice(-50)).toEqual(kvBlockKeys(tokens(200, 19_000), BS));
  });
});

/** `bytes` of nested one-element arrays with a nil at the bottom: valid msgpack, one array per byte. */
function nestedArrays(bytes: number): Uint8Array {
  const payload = new Uint8Array(bytes).fill(0x91);
  payload[bytes - 1] = 0xc0;
  return payload;
}

describe('KV relay at its default limits against megabytes of nested arrays', () => {
  let pub: Publisher;
  let relay: KvRelay;
  let sink: MemoryKvSink;
  let metrics: CollectorMetrics;
  let seq = 0;
  const send = (payload: Uint8Array, s = seq++) => pub.send(['', encodeVllmSeq(s), payload]);
  const valid = (hash: number, base: number) =>
    encodeVllmKvBatch(1, [
      {
        type: 'stored',
        hashes: [hash],
        parent: null,
        tokenIds: tokens(BS, base),
        blockSize: BS,
        loraId: null,
        medium: 'GPU',
        loraName: null,
      },
    ]);
  const storedAt = (key: number) => sink.batches.findIndex((b) => b.events.some((e) => e[0] === KV_STORED && e[1].includes(key)));

  beforeAll(async () => {
    pub = new Publisher({ linger: 0 });
    await pub.bind('tcp://127.0.0.1:*');
    sink = new MemoryKvSink();
    metrics = new CollectorMetrics();
    // The collector's own limits (app.ts): the 8 MiB default of --kv-max-batch-bytes.
    relay = relayOf(pub, sink, metrics, DEFAULT_VLLM_KV_LIMITS, 1024 * 1024);
    await until(() => {
      void send(valid(seq + 1_000_000, seq * 100));
      return sink.batches.length > 0;
    }, 'the subscription');
  });
  afterAll(() => {
    relay.stop();
    pub.close();
  });

  it('refuses 1 MiB and 8 MiB of nested one-element arrays as too complex, counts them, and relays the valid batch after them', async () => {
    const dropped = (reason: string) =>
      metrics.registry
        .getSingleMetric('spillway_collector_kv_dropped_total')
        ?.get()
        .then((m) => m.values.find((v) => v.labels['reason'] === reason)?.value ?? 0);
    const relayedBefore = sink.batches.length;
    await send(nestedArrays(1024 * 1024));
    await send(nestedArrays(DEFAULT_VLLM_KV_LIMITS.maxPayloadBytes));
    await send(valid(4242, 90_000));
    const key = kvBlockKeys(tokens(BS, 90_000), BS)[0] as number;
    await until(() => storedAt(key) >= 0, 'the valid batch after the nested arrays');
    expect(await dropped('too-complex')).toBe(2);
    // Nothing else was counted against them: they were refused on their shape, not decoded.
    for (const reason of ['not-msgpack', 'malformed', 'oversized', 'too-many-events']) expect(await dropped(reason)).toBe(0);
    // A refused batch may have carried removals: the pod's blocks were cleared before the valid one's.
    const cleared = sink.batches.slice(relayedBefore, storedAt(key)).some((b) => b.events.some((e) => e[0] === KV_CLEARED));
    expect(cleared).toBe(true);
  });
});
