/**
 * A collector that starts after a long-running server: its replay buffer no longer reaches back to
 * the first batch, so the relay starts the pod afresh at the oldest batch the buffer holds and
 * replays from there. The blocks stored since are relayed at once; older ones stay unknown (never
 * claimed). A real `spillway-sim` process (build first: `npx tsc -b services/sim`).
 */
import { tokenize } from '@spillway/engine';
import { KV_CLEARED, KV_STORED, kvBlockKeys, type KvBatch, type KvSnapshotEvent } from '@spillway/events';
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { KvRelay, type KvSink } from '../src/kv-relay.js';
import { CollectorMetrics } from '../src/self-metrics.js';
import { spawnSim, type SimChild } from './helpers/processes.js';

const BLOCK = 16;
/** A prompt of `blocks` full blocks of the simulator's toy tokens (4 characters each), distinct per `tag`. */
const prompt = (tag: string, blocks: number) => `${tag}:`.padEnd(4, '.').repeat(blocks * BLOCK);
const keysOf = (text: string) => kvBlockKeys(tokenize(text), BLOCK);

describe('KV relay: a collector that starts after the server, its replay buffer shorter than the server’s life', () => {
  let sim: SimChild;
  const batches: KvBatch[] = [];
  let relay: KvRelay;
  const metrics = new CollectorMetrics();
  const prompts = Array.from({ length: 8 }, (_, i) => prompt(`p${i}`, 2));

  beforeAll(async () => {
    // One batch per request (one engine step each), and a buffer of the last 5.
    sim = await spawnSim([
      '--preset',
      'test',
      '--num-blocks',
      '4096',
      '--model',
      'm',
      '--kv-events',
      'tcp://127.0.0.1:*',
      '--kv-replay',
      'tcp://127.0.0.1:*',
      '--kv-replay-buffer',
      '5',
      '--time-scale',
      '50',
    ]);
    for (const p of prompts) {
      const r = await fetch(`${sim.url}/v1/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ model: 'm', prompt: p, max_tokens: 1 }),
      });
      expect(r.status).toBe(200);
      await r.text();
    }
    const sink: KvSink = {
      publishKvBatch: (b) => {
        batches.push(b);
        return true;
      },
      publishKvSnapshot: (_e: KvSnapshotEvent) => true,
      maxPayload: () => 1 << 20,
    };
    relay = new KvRelay({
      pool: 'llama',
      limits: { maxPayloadBytes: 1 << 20, maxEvents: 256, maxHashes: 1024, maxTokens: 65536 },
      maxBytesPerPod: 1 << 20,
      snapshotIntervalMs: 60_000,
      replayTimeoutMs: 2000,
      reconnectMs: 50,
      reconnectMaxMs: 200,
      topic: '',
      sink,
      logger: pino({ level: 'silent' }),
      metrics,
    });
    relay.setEndpoints([
      {
        pod: 'late',
        address: sim.address,
        zone: 'zone-a',
        region: undefined,
        engine: undefined,
        labels: undefined,
        sourceReady: true,
        kvEvents: sim.kvEvents,
        kvReplay: sim.kvReplay,
      },
    ]);
  }, 60_000);
  afterAll(async () => {
    relay?.stop();
    await sim?.kill();
  });

  it('relays the blocks of the batches the buffer still holds, and none of the older ones', async () => {
    // The first live batch the relay sees reveals the gap (it starts at 0). Until the subscription
    // is live a batch is lost, so each try stores a new prompt (the buffer keeps the newest five).
    const stored = () => new Set(batches.flatMap((b) => b.events.flatMap((e) => (e[0] === KV_STORED ? e[1] : []))));
    const connected = async () =>
      ((await metrics.registry.getSingleMetric('spillway_collector_kv_connection_events_total')?.get())?.values ?? []).some(
        (v) => v.labels['event'] === 'connect' && v.value > 0,
      );
    const deadline = Date.now() + 20_000;
    while (!(await connected())) {
      if (Date.now() > deadline) throw new Error('the relay never connected');
      await new Promise((r) => setTimeout(r, 50));
    }
    for (let i = 0; ; i++) {
      if (i > 3) throw new Error(`the live batch never arrived: ${JSON.stringify(batches)}`);
      const live = prompt(`L${i}`, 2);
      await fetch(`${sim.url}/v1/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ model: 'm', prompt: live, max_tokens: 1 }),
      }).then((r) => r.text());
      await new Promise((r) => setTimeout(r, 500));
      if (keysOf(live).every((k) => stored().has(k))) break;
    }
    const held = stored();
    // The relay started the pod afresh before anything it relayed.
    expect(batches[0]?.events[0]).toEqual([KV_CLEARED]);
    // The newest prompts (still in the buffer) are known; the oldest are not claimed.
    for (const k of keysOf(prompts[7] as string)) expect(held.has(k)).toBe(true);
    for (const k of keysOf(prompts[0] as string)) expect(held.has(k)).toBe(false);
    const gaps = (await metrics.registry.getSingleMetric('spillway_collector_kv_gaps_total')?.get())?.values ?? [];
    expect(gaps.find((v) => v.labels['handling'] === 'replay-tail')?.value).toBe(1);
    // Only the tail was replayed: the server may hold blocks the relay never heard of, and every batch says so.
    expect(batches.map((b) => b.known?.complete)).toEqual(batches.map(() => false));
    expect(relay.status()[0]?.known?.complete).toBe(false);
  });

  it('knows every block again once the server stored as many blocks as its cache holds, none chained to an unknown one', async () => {
    // The server's metrics say its cache size (here as small as a test can turn over: 6 blocks).
    relay.setCacheBlocks('late', 6);
    const seen = batches.length;
    for (let i = 0; i < 3; i++) {
      const r = await fetch(`${sim.url}/v1/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ model: 'm', prompt: prompt(`T${i}`, 2), max_tokens: 1 }),
      });
      await r.text();
    }
    const deadline = Date.now() + 10_000;
    while (!batches.slice(seen).some((b) => b.known?.complete === true)) {
      if (Date.now() > deadline) throw new Error(`never complete: ${JSON.stringify(batches.slice(seen).map((b) => b.known))}`);
      await new Promise((r) => setTimeout(r, 50));
    }
    const first = batches.slice(seen).findIndex((b) => b.known?.complete === true);
    // Complete at the first batch that finds six blocks stored since the tail's fresh start (the tail's and the live prompts', two blocks each).
    const storedBefore = batches
      .slice(0, seen + first + 1)
      .flatMap((b) => b.events)
      .reduce((n, e) => n + (e[0] === KV_STORED ? e[1].length : 0), 0);
    expect(storedBefore).toBeGreaterThanOrEqual(6);
    expect(batches[seen + first]?.known?.since).toBe(batches[0]?.known?.since);
    expect(relay.status()[0]?.known?.complete).toBe(true);
  });
});
