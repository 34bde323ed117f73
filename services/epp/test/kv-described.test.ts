/**
 * What relayed KV batches say of their blocks, at a running EPP over a real nats-server
 * (docs/kv-events.md "What a relayed batch says of its blocks"): batches with and without the
 * optional descriptions are applied alike; stored keys described as off the GPU or extra-keyed are
 * not credited; the tiers and ranks are counted in the metrics; hostile values of the new fields
 * drop the batch whole, counted by reason, logged once per reason, never applied.
 */
import { connect } from '@nats-io/transport-node';
import { jetstreamManager } from '@nats-io/jetstream';
import type { NatsConnection } from '@nats-io/nats-core';
import { encode } from '@msgpack/msgpack';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ensureStream } from '@spillway/bus';
import { encodeKvBatch, kvBlockKeys, kvSubjectFor, type KvBatch } from '@spillway/events';
import type { RunningEpp } from '@spillway/epp';
import { eventually, startNatsServer, type NatsServerHandle } from '@spillway/testkit';
import { capturingLogger, POOL, startTestEpp, TestPublisher } from './helpers.js';

const ZONE = 'zone-d';
const POD = 'd-0';
const BS = 16;
const keysOf = (base: number, blocks: number) =>
  kvBlockKeys(
    Array.from({ length: blocks * BS }, (_, i) => base + i),
    BS,
  );

let nats: NatsServerHandle;
let publisher: TestPublisher;
let raw: NatsConnection;
let epp: RunningEpp;
const { logger, lines } = capturingLogger('warn');
let seq = 0;

beforeAll(async () => {
  nats = await startNatsServer({ forcePrivate: true });
  publisher = await TestPublisher.connect(nats.url);
  raw = await connect({ servers: nats.url });
  await ensureStream(await jetstreamManager(raw), { name: 'SPILLWAY' });
  await publisher.pods([{ pod: POD, zone: ZONE, address: '10.78.0.1:8000', waiting: 0, running: 0 }]);
  epp = await startTestEpp(nats.url, ZONE, ['--metrics-stale-ms', '600000'], logger);
  await epp.ready;
}, 60_000);

afterAll(async () => {
  await epp?.close();
  await raw?.close();
  await publisher?.close();
  await nats?.stop();
});

const SUBJECT = kvSubjectFor({ pool: POOL, zone: ZONE, pod: POD });
const batch = (extra: Partial<KvBatch>): KvBatch => ({
  v: 1,
  pool: POOL,
  zone: ZONE,
  pod: POD,
  seq: ++seq,
  observedAt: Date.now(),
  blockSize: BS,
  events: [],
  ...extra,
});

async function send(...payloads: Uint8Array[]): Promise<void> {
  for (const p of payloads) raw.publish(SUBJECT, p);
  await raw.flush();
}

async function metric(name: string, labels: string): Promise<number> {
  const text = await (await fetch(`http://127.0.0.1:${epp.metricsPort}/metrics`)).text();
  const line = text.split('\n').find((l) => l.startsWith(`${name}{${labels}} `));
  return line === undefined ? Number.NaN : Number(line.split(' ').at(-1));
}

describe('relayed KV batches with what the servers said of their blocks, at a running EPP', () => {
  const gpu = keysOf(1000, 3);
  const lora = keysOf(2000, 2);
  const cpu = keysOf(3000, 4);
  const old = keysOf(4000, 1);

  it('credits GPU keys only, counts tiers and ranks, and applies a batch without descriptions as before', async () => {
    await send(
      encodeKvBatch(
        batch({
          events: [[3], [1, gpu], [1, lora], [1, cpu]],
          rank: 1,
          stored: [
            { events: 1, medium: 'GPU', group: 0, kind: 'full_attention' },
            { events: 1, medium: 'GPU', group: 0, kind: 'full_attention', lora: 'sql-lora' },
            // A publisher that relays CPU-tier keys: described as such, they are not credited.
            { events: 1, medium: 'CPU', group: 0, kind: 'full_attention' },
          ],
          skipped: [
            { reason: 'other-medium', medium: 'CPU_PINNED', stored: 40 },
            { reason: 'other-group', medium: 'GPU', group: 1, kind: 'sliding_window', window: 4096, stored: 7 },
            { reason: 'extra-keys', medium: 'DISK', extraKeys: true, stored: 2 },
          ],
        }),
      ),
      // A collector from before the descriptions: no rank, nothing said.
      encodeKvBatch(batch({ events: [[1, old]] })),
    );
    await eventually(() => expect(epp.core.scheduler.kvIndexStats.blocks).toBe(gpu.length + lora.length + old.length), 15_000);
    expect(epp.core.scheduler.kvIndexStats.uncredited).toBe(cpu.length);
    expect(await metric('spillway_kv_index_events_total', 'event="uncredited"')).toBe(cpu.length);
    expect(await metric('spillway_kv_stored_blocks_total', 'tier="gpu",credited="true"')).toBe(gpu.length + lora.length);
    expect(await metric('spillway_kv_stored_blocks_total', 'tier="gpu",credited="false"')).toBe(7);
    expect(await metric('spillway_kv_stored_blocks_total', 'tier="cpu",credited="false"')).toBe(cpu.length + 40);
    expect(await metric('spillway_kv_stored_blocks_total', 'tier="disk",credited="false"')).toBe(2);
    expect(await metric('spillway_kv_stored_blocks_total', 'tier="unsaid",credited="true"')).toBe(old.length);
    expect(await metric('spillway_kv_rank_batches_total', 'rank="1"')).toBe(1);
    expect(await metric('spillway_kv_rank_batches_total', 'rank="none"')).toBe(1);
    expect(await metric('spillway_kv_batches_total', 'result="applied"')).toBe(2);
  });

  it('hostile values of the new fields: each batch dropped whole, counted as invalid, logged once, never applied', async () => {
    const blocks = epp.core.scheduler.kvIndexStats.blocks;
    const rejectedBefore = await metric('spillway_kv_batches_rejected_total', 'reason="invalid"');
    const stored = (extra: Record<string, unknown>) => encode({ ...batch({ events: [[1, keysOf(9000, 2)]] }), ...extra });
    const hostile = [
      stored({ rank: -1 }),
      stored({ rank: 1e9 }),
      stored({ rank: 'rank-0' }),
      stored({ stored: Array.from({ length: 17 }, () => ({ events: 1 })) }),
      stored({ stored: [{ events: 0, medium: 'GPU' }] }),
      stored({ stored: [{ events: 1, medium: 'x'.repeat(1000) }] }),
      stored({ stored: [{ events: 1, lora: '' }] }),
      stored({ stored: [{ events: 1, extraKeys: 'no' }] }),
      stored({ skipped: Array.from({ length: 13 }, () => ({ stored: 1 })) }),
      stored({ skipped: [{ stored: -40 }] }),
      stored({ skipped: [{ reason: 'other-medium', window: 2 ** 40 }] }),
      stored({ skipped: [{ reason: 'x', medium: [[[[['deep']]]]] }] }),
    ];
    await send(...hostile);
    await eventually(
      async () => expect(await metric('spillway_kv_batches_rejected_total', 'reason="invalid"')).toBe(rejectedBefore + hostile.length),
      15_000,
    );
    expect(epp.core.scheduler.kvIndexStats.blocks).toBe(blocks);
    expect(await metric('spillway_kv_rank_batches_total', 'rank="1"')).toBe(1);
    const drops = lines.filter((l) => l['msg'] === 'dropped a KV block batch' && l['reason'] === 'invalid');
    expect(drops).toHaveLength(1);
    expect(String(drops[0]?.['detail'])).toMatch(/^rank/);
    // The pod's next good batch is a gap (the dropped ones took sequence numbers): it waits for a clear or a snapshot.
    await send(encodeKvBatch(batch({ events: [[3], [1, gpu]], rank: 0, stored: [{ events: 1, medium: 'GPU' }] })));
    await eventually(() => expect(epp.core.scheduler.kvIndexStats.blocks).toBe(gpu.length), 15_000);
    expect(await metric('spillway_kv_rank_batches_total', 'rank="0"')).toBe(1);
  });
});
