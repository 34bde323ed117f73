/**
 * The KV relay end to end, with real processes: a private nats-server, several `spillway-sim`
 * processes publishing vLLM-layout KV events over ZeroMQ and the `spillway-collector` binary
 * relaying them to NATS (build first: `npx tsc -b services/sim services/collector`).
 */
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { connect, type NatsConnection } from '@nats-io/transport-node';
import { tokenize } from '@spillway/engine';
import {
  decodeEvent,
  decodeKvBatch,
  KV_CLEARED,
  KV_STORED,
  kvBlockKeys,
  type KvBatch,
  type KvSnapshotEvent,
  type MetricsEvent,
} from '@spillway/events';
import { eventually, freePort, startNatsServer, type NatsServerHandle } from '@spillway/testkit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { spawnCollector, spawnSim, type Child, type SimChild } from './helpers/processes.js';

const BLOCK = 16;
/** A prompt of `blocks` full blocks of the simulator's toy tokens (4 characters each), distinct per `tag`. */
const prompt = (tag: string, blocks: number) => `${tag}:`.padEnd(4, '.').repeat(blocks * BLOCK);
const keysOf = (text: string) => kvBlockKeys(tokenize(text), BLOCK);
const complete = (sim: SimChild, text: string) =>
  fetch(`${sim.url}/v1/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'm', prompt: text, max_tokens: 1 }),
  }).then((r) => {
    expect(r.status).toBe(200);
    return r.text();
  });

describe('spillway-collector KV relay against spillway-sim processes and nats-server', () => {
  let nats: NatsServerHandle;
  let nc: NatsConnection;
  let sims: Record<'a' | 'b' | 'c' | 'd', SimChild>;
  const late: SimChild[] = [];
  let deadKvPort: number;
  let collector: Child;
  let metricsPort: number;
  const batches = new Map<string, KvBatch[]>();
  const snapshots = new Map<string, KvSnapshotEvent[]>();
  const metrics = new Map<string, MetricsEvent[]>();
  const bad: string[] = [];
  const early = { a: prompt('ea', 3), b: prompt('eb', 3) };

  const storedKeys = (pod: string) =>
    new Set((batches.get(pod) ?? []).flatMap((b) => b.events.flatMap((e) => (e[0] === KV_STORED ? e[1] : []))));
  const collectorMetric = async (name: string, labels = '') => {
    const text = await (await fetch(`http://127.0.0.1:${metricsPort}/metrics`)).text();
    const line = text.split('\n').find((l) => l.startsWith(`${name}${labels ? `{${labels}}` : ''} `));
    return line === undefined ? 0 : Number(line.split(' ').at(-1));
  };

  beforeAll(async () => {
    nats = await startNatsServer({ forcePrivate: true });
    nc = await connect({ servers: nats.url });
    const kvSub = nc.subscribe('spillway.kv.llama.>');
    void (async () => {
      for await (const msg of kvSub) {
        const d = decodeKvBatch(msg.subject, msg.data);
        if (!d.ok) bad.push(`${msg.subject}: ${d.reason} ${d.detail}`);
        else batches.set(d.batch.pod, [...(batches.get(d.batch.pod) ?? []), d.batch]);
      }
    })();
    const v1Sub = nc.subscribe('spillway.v1.llama.>');
    void (async () => {
      for await (const msg of v1Sub) {
        const d = decodeEvent(msg.data, msg.subject);
        if (!d.ok) bad.push(`${msg.subject}: ${d.error.message}`);
        else if (d.event.kind === 'kv') snapshots.set(d.event.pod, [...(snapshots.get(d.event.pod) ?? []), d.event]);
        else if (d.event.kind === 'metrics') metrics.set(d.event.pod, [...(metrics.get(d.event.pod) ?? []), d.event]);
      }
    })();
    const kv = ['--preset', 'test', '--num-blocks', '4096', '--time-scale', '50', '--model', 'm', '--kv-events', 'tcp://127.0.0.1:*'];
    const [a, b, c, d] = await Promise.all([
      spawnSim([...kv, '--kv-replay', 'tcp://127.0.0.1:*']),
      spawnSim(kv),
      spawnSim(kv),
      // d publishes no KV events; the file sends the collector to a port nobody listens on.
      spawnSim(['--preset', 'test', '--time-scale', '50', '--model', 'm']),
    ]);
    sims = { a: a!, b: b!, c: c!, d: d! };
    // Served before the collector runs: a's are recovered by replay, b's (no replay socket) are not.
    await complete(sims.a, early.a);
    await complete(sims.b, early.b);
    deadKvPort = await freePort();
    const file = join(mkdtempSync(join(tmpdir(), 'spillway-kv-')), 'endpoints.yaml');
    writeFileSync(
      file,
      [
        `- { pod: sim-a, address: "${a!.address}", kvEvents: "${a!.kvEvents}", kvReplay: "${a!.kvReplay}" }`,
        `- { pod: sim-b, address: "${b!.address}", kvEvents: "${b!.kvEvents}" }`,
        `- { pod: sim-c, address: "${c!.address}", zone: zone-b, kvEvents: "${c!.kvEvents}" }`,
        `- { pod: sim-d, address: "${d!.address}", kvEvents: "tcp://127.0.0.1:${deadKvPort}" }`,
      ].join('\n'),
    );
    metricsPort = await freePort();
    collector = spawnCollector([
      '--pool',
      'llama',
      '--zone',
      'zone-a',
      '--endpoints',
      file,
      '--nats',
      nats.url,
      '--sample-interval-ms',
      '100',
      '--probe-interval-ms',
      '200',
      '--kv-snapshot-interval-ms',
      '300',
      '--kv-reconnect-max-ms',
      '400',
      '--metrics-port',
      String(metricsPort),
      '--log-level',
      'warn',
    ]);
    // The collector subscribes asynchronously: wait until each live sim's subscription is connected.
    await eventually(
      async () =>
        expect(await collectorMetric('spillway_collector_kv_connection_events_total', 'event="connect"')).toBeGreaterThanOrEqual(3),
      20_000,
    );
  });

  afterAll(async () => {
    if (process.env.KV_DEBUG) console.log(collector?.output.join('\n'));
    await collector?.kill();
    await Promise.all([...Object.values(sims ?? {}), ...late].map((s) => s.kill('SIGKILL')));
    await nc?.close();
    await nats?.stop();
  });

  it('relays each pod’s stored blocks as content keys, in order per pod', async () => {
    // A SUB socket may miss what was published while its connection was still being set up, and a
    // cached prompt publishes nothing again: retry with fresh prompts until one round arrives whole.
    let round = 0;
    await eventually(async () => {
      round++;
      const texts = { 'sim-a': prompt(`la${round}`, 4), 'sim-b': prompt(`lb${round}`, 2), 'sim-c': prompt(`lc${round}`, 5) };
      await Promise.all([complete(sims.a, texts['sim-a']), complete(sims.b, texts['sim-b']), complete(sims.c, texts['sim-c'])]);
      await new Promise((r) => setTimeout(r, 200));
      for (const [pod, text] of Object.entries(texts)) for (const key of keysOf(text)) expect(storedKeys(pod).has(key)).toBe(true);
    }, 20_000);
    for (const [pod, list] of batches) {
      for (let i = 1; i < list.length; i++) expect(list[i]?.seq, pod).toBe((list[i - 1]?.seq as number) + 1);
      expect(list[0]?.events[0], `${pod} starts afresh`).toEqual([KV_CLEARED]);
    }
    expect(batches.get('sim-c')?.[0]).toMatchObject({ pool: 'llama', zone: 'zone-b', pod: 'sim-c', blockSize: BLOCK });
    // Each batch says the rank it relays and what the simulator said of its stored blocks (as vLLM: GPU, group 0, full attention).
    const withStores = (batches.get('sim-a') ?? []).filter((b) => b.events.some((e) => e[0] === KV_STORED));
    expect(withStores.length).toBeGreaterThan(0);
    for (const b of withStores) {
      expect(b.rank).toBe(0);
      expect(b.stored?.reduce((n, run) => n + run.events, 0)).toBe(b.events.filter((e) => e[0] === KV_STORED).length);
      for (const run of b.stored ?? []) expect(run).toMatchObject({ medium: 'GPU', group: 0, kind: 'full_attention' });
    }
    expect(bad).toEqual([]);
  });

  it('recovers a gap from the replay socket, and without one starts the pod afresh', async () => {
    // The collector started after each server had published: sim-a's earlier blocks come back by replay.
    await eventually(() => {
      for (const key of keysOf(early.a)) expect(storedKeys('sim-a').has(key)).toBe(true);
    }, 10_000);
    for (const key of keysOf(early.b)) expect(storedKeys('sim-b').has(key)).toBe(false);
    expect(await collectorMetric('spillway_collector_kv_gaps_total', 'handling="replay"')).toBeGreaterThanOrEqual(1);
    expect(await collectorMetric('spillway_collector_kv_gaps_total', 'handling="cleared"')).toBeGreaterThanOrEqual(1);
  });

  it('says in every batch and snapshot whether it knows every block: a full replay does, a start without one does not', async () => {
    // sim-a's replay reached back to the server's first batch: every block it holds is known.
    // sim-b had stored blocks before the collector subscribed, with no replay socket: the relay cannot name them.
    for (const pod of ['sim-a', 'sim-b']) for (const b of batches.get(pod) ?? []) expect(b.known, pod).toBeDefined();
    expect((batches.get('sim-a') ?? []).map((b) => b.known?.complete)).not.toContain(false);
    expect(batches.get('sim-b')?.[0]?.known?.complete).toBe(false);
    const started = batches.get('sim-b')?.[0]?.known?.since as number;
    expect(started).toBeGreaterThan(Date.now() - 120_000);
    expect(started).toBeLessThanOrEqual(batches.get('sim-b')?.[0]?.observedAt as number);
    await eventually(() => {
      expect(snapshots.get('sim-a')?.at(-1)?.known?.complete).toBe(true);
      expect(snapshots.get('sim-b')?.at(-1)?.known).toEqual({ since: started, complete: false });
    }, 10_000);
    // sim-b's cache (4,096 blocks) has not turned over since: it stays partial, and the collector counts it.
    expect(await collectorMetric('spillway_collector_kv_partial_pods')).toBeGreaterThanOrEqual(1);
  });

  it('publishes each pod’s block set as a kv snapshot in the stream', async () => {
    await eventually(() => {
      const last = snapshots.get('sim-a')?.at(-1);
      expect(last).toBeDefined();
      const held = new Set(last?.keys);
      for (const key of keysOf(early.a)) expect(held.has(key)).toBe(true);
      // The snapshot's seq is the last relayed batch it includes.
      expect(batches.get('sim-a')?.some((b) => b.seq === last?.seq)).toBe(true);
    }, 10_000);
    await eventually(() => expect(snapshots.get('sim-c')?.at(-1)).toMatchObject({ kind: 'kv', zone: 'zone-b', blockSize: BLOCK }), 10_000);
    // ...with its one rank (all its blocks cached, on the GPU, in the full-attention group).
    const last = snapshots.get('sim-a')?.at(-1);
    expect(last?.ranks).toEqual([{ rank: 0, blocks: last?.keys.length, group: 0, kind: 'full_attention' }]);
    expect(last?.tiers).toEqual([{ medium: 'GPU', blocks: last?.keys.length }]);
  });

  it('relays evictions and a server restart', async () => {
    // A restarted server (same KV endpoint) has a new cache: the dropped connection starts the pod afresh.
    const port = Number(new URL(sims.b.kvEvents!.replace('tcp', 'http')).port);
    await sims.b.kill('SIGKILL');
    const b2 = await spawnSim([
      '--preset',
      'test',
      '--num-blocks',
      '16',
      '--time-scale',
      '50',
      '--model',
      'm',
      '--kv-events',
      `tcp://127.0.0.1:${port}`,
    ]);
    late.push(b2);
    const before = batches.get('sim-b')?.length ?? 0;
    let round = 0;
    await eventually(async () => {
      // 16 blocks: three 6-block prompts cannot stay cached together. Fresh prompts each round: a
      // block whose chain began before the subscription was live cannot be keyed (its parent is unknown).
      round++;
      for (const tag of ['r1', 'r2', 'r3']) await complete(b2, prompt(`${tag}-${round}`, 6));
      const after = (batches.get('sim-b') ?? []).slice(before);
      expect(after.some((b) => b.events.some((e) => e[0] === KV_CLEARED))).toBe(true);
      expect(after.some((b) => b.events.some((e) => e[0] === 2 && e[1].length > 0))).toBe(true);
    }, 40_000);
    // The dropped connection was seen and the pod started afresh on the next batch.
    let n = 0;
    await eventually(async () => {
      await complete(b2, prompt(`rx${++n}`, 1));
      expect(await collectorMetric('spillway_collector_kv_gaps_total', 'handling="reconnect"')).toBeGreaterThanOrEqual(1);
    }, 20_000);
    // A restart, a reconnect and a few rounds of requests take longer than the default on a busy machine.
  }, 90_000);

  it('keeps retrying a dead KV endpoint while that pod’s metrics flow, and relays once it answers', async () => {
    const seen = metrics.get('sim-d')?.length ?? 0;
    await eventually(async () => {
      expect(metrics.get('sim-d')?.length ?? 0).toBeGreaterThan(seen + 3);
      expect(await collectorMetric('spillway_collector_kv_connection_events_total', 'event="retry"')).toBeGreaterThanOrEqual(2);
    }, 15_000);
    expect(batches.has('sim-d')).toBe(false);
    // A server comes up on the dead endpoint: the relay connects on its own and its blocks arrive as sim-d's.
    const revived = await spawnSim([
      '--preset',
      'test',
      '--time-scale',
      '50',
      '--model',
      'm',
      '--kv-events',
      `tcp://127.0.0.1:${deadKvPort}`,
    ]);
    late.push(revived);
    let round = 0;
    await eventually(async () => {
      const text = prompt(`dd${++round}`, 3);
      await complete(revived, text);
      await new Promise((r) => setTimeout(r, 200));
      for (const key of keysOf(text)) expect(storedKeys('sim-d').has(key)).toBe(true);
    }, 30_000);
  }, 90_000);
});
