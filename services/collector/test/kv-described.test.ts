/**
 * What relayed batches say of their blocks, end to end with real processes: a private nats-server,
 * the `spillway-collector` binary, and a model server's two data-parallel ranks as ZeroMQ PUB
 * sockets sending vLLM's newest layout (maps) with every field: GPU and CPU tiers, a hybrid
 * model's two groups, a LoRA adapter, multimodal extra keys. The relayed batches on NATS carry
 * each rank, what the server said of the blocks relayed as cached, and tallies of those not
 * relayed; the pod's snapshot its ranks and tiers. (Build first: `npx tsc -b services/sim services/collector`.)
 */
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { connect, type NatsConnection } from '@nats-io/transport-node';
import {
  decodeEvent,
  decodeKvBatch,
  encodeVllmKvBatch,
  encodeVllmSeq,
  KV_STORED,
  kvBlockKeys,
  kvKeySeed,
  type KvBatch,
  type KvSnapshotEvent,
  type VllmKvEventInput,
} from '@spillway/events';
import { eventually, freePort, startNatsServer, type NatsServerHandle } from '@spillway/testkit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { XPublisher } from 'zeromq';
import { spawnCollector, spawnSim, type Child, type SimChild } from './helpers/processes.js';

const BS = 16;
const tokens = (n: number, base: number) => Array.from({ length: n }, (_, i) => ((base + i) * 7919) % 151_000);
const full = { medium: 'GPU', group: 0, groupKind: 'full_attention' };
const stored = (hashes: number[], tokenIds: number[], extra: Partial<Extract<VllmKvEventInput, { type: 'stored' }>> = {}) =>
  ({ type: 'stored', hashes, parent: null, tokenIds, blockSize: BS, loraId: null, medium: 'GPU', loraName: null, ...extra }) as const;

/** Rank 0: a hybrid model's prompt in both groups, a LoRA prompt, a CPU copy, a multimodal prompt. */
const prompt = tokens(2 * BS, 1);
const loraPrompt = tokens(BS, 100);
const rank0: VllmKvEventInput[] = [
  stored([1, 2], prompt, full),
  stored([1, 2], prompt, { ...full, group: 1, groupKind: 'sliding_window', slidingWindow: 4096 }),
  stored([3], loraPrompt, { ...full, loraId: 1, loraName: 'sql-lora', extraKeys: [['sql-lora']] }),
  stored([1, 2], prompt, { ...full, medium: 'CPU' }),
  stored([4, 5], tokens(2 * BS, 200), { ...full, extraKeys: [['image-hash'], null] }),
];
/** Rank 1: one GPU block, one block only on the CPU tier. */
const own = tokens(BS, 300);
const rank1: VllmKvEventInput[] = [stored([11], own, full), stored([12], tokens(BS, 400), { ...full, medium: 'CPU' })];

describe('spillway-collector: relayed batches say which rank, which tier, which group', () => {
  let nats: NatsServerHandle;
  let nc: NatsConnection;
  let sim: SimChild;
  let collector: Child;
  const pubs: XPublisher[] = [];
  const batches: KvBatch[] = [];
  const snapshots: KvSnapshotEvent[] = [];
  let samples = 0;
  const bad: string[] = [];

  beforeAll(async () => {
    nats = await startNatsServer({ forcePrivate: true });
    nc = await connect({ servers: nats.url });
    const kvSub = nc.subscribe('spillway.kv.llama.>');
    void (async () => {
      for await (const msg of kvSub) {
        const d = decodeKvBatch(msg.subject, msg.data);
        if (d.ok) batches.push(d.batch);
        else bad.push(`${d.reason} ${d.detail}`);
      }
    })();
    const v1Sub = nc.subscribe('spillway.v1.llama.>');
    void (async () => {
      for await (const msg of v1Sub) {
        const d = decodeEvent(msg.data, msg.subject);
        if (!d.ok) bad.push(d.error.message);
        else if (d.event.kind === 'kv') snapshots.push(d.event);
        else if (d.event.kind === 'metrics') samples++;
      }
    })();
    for (let r = 0; r < 2; r++) {
      const pub = new XPublisher({ linger: 0 });
      await pub.bind('tcp://127.0.0.1:*');
      pubs.push(pub);
    }
    // The server's HTTP side (scraped for metrics) is a simulator; its KV events are the two sockets above.
    sim = await spawnSim(['--preset', 'test', '--time-scale', '50', '--model', 'm']);
    const file = join(mkdtempSync(join(tmpdir(), 'spillway-kv-')), 'endpoints.yaml');
    writeFileSync(file, `- { pod: dp, address: "${sim.address}", kvEvents: ["${pubs[0]?.lastEndpoint}", "${pubs[1]?.lastEndpoint}"] }\n`);
    collector = spawnCollector([
      ...['--pool', 'llama', '--zone', 'zone-a', '--endpoints', file, '--nats', nats.url],
      ...['--kv-snapshot-interval-ms', '300', '--metrics-port', String(await freePort()), '--log-level', 'warn'],
    ]);
    // Each rank's SUB socket subscribes (the XPUB socket hears it), and the collector is on NATS
    // (its metrics samples arrive; batches relayed before that are dropped): then the batches go out.
    await Promise.all(pubs.map((pub) => pub.receive()));
    await eventually(() => expect(samples).toBeGreaterThan(0), 20_000);
    const send = (rank: number, seq: number, events: VllmKvEventInput[], said: number | null = rank) =>
      pubs[rank]?.send(['', encodeVllmSeq(seq), encodeVllmKvBatch(Date.now() / 1000, events, said, 'map')]);
    await send(0, 0, rank0);
    await send(1, 0, rank1);
    // A rank number no batch field can carry: relayed as the rank's place in the pod's list.
    await send(1, 1, [stored([13], tokens(BS, 500), full)], 70_000);
  }, 60_000);

  afterAll(async () => {
    if (process.env.KV_DEBUG) console.log(collector?.output.join('\n'));
    await collector?.kill();
    await sim?.kill('SIGKILL');
    for (const pub of pubs) pub.close();
    await nc?.close();
    await nats?.stop();
  });

  const ofRank = (rank: number) => batches.filter((b) => b.rank === rank);

  it('each rank’s batches carry its rank, and what the server said of the blocks relayed as cached', async () => {
    await eventually(
      () =>
        expect(
          ofRank(1)
            .flatMap((b) => b.events)
            .filter((e) => e[0] === KV_STORED),
        ).toHaveLength(2),
      20_000,
    );
    await eventually(
      () =>
        expect(
          ofRank(0)
            .flatMap((b) => b.events)
            .filter((e) => e[0] === KV_STORED),
        ).toHaveLength(2),
      20_000,
    );
    const [a, b] = ofRank(0).flatMap((x) => x.events.filter((e) => e[0] === KV_STORED));
    expect(a).toEqual([KV_STORED, kvBlockKeys(prompt, BS)]);
    expect(b).toEqual([KV_STORED, kvBlockKeys(loraPrompt, BS, { seed: kvKeySeed('sql-lora') })]);
    expect(ofRank(0).flatMap((x) => x.stored ?? [])).toEqual([
      { events: 1, medium: 'GPU', group: 0, kind: 'full_attention' },
      { events: 1, medium: 'GPU', group: 0, kind: 'full_attention', lora: 'sql-lora' },
    ]);
    expect(ofRank(1).flatMap((x) => x.stored ?? [])).toEqual([
      { events: 1, medium: 'GPU', group: 0, kind: 'full_attention' },
      { events: 1, medium: 'GPU', group: 0, kind: 'full_attention' },
    ]);
    expect(batches.every((x) => x.rank === 0 || x.rank === 1)).toBe(true);
    expect(bad).toEqual([]);
  });

  it('blocks not relayed as cached are tallied with their tier, group and extra keys, never as keys', () => {
    expect(ofRank(0).flatMap((x) => x.skipped ?? [])).toEqual([
      { reason: 'other-group', medium: 'GPU', group: 1, kind: 'sliding_window', window: 4096, stored: 2 },
      { reason: 'other-medium', medium: 'CPU', group: 0, kind: 'full_attention', stored: 2 },
      { reason: 'extra-keys', medium: 'GPU', group: 0, kind: 'full_attention', extraKeys: true, stored: 2 },
    ]);
    expect(ofRank(1).flatMap((x) => x.skipped ?? [])).toEqual([
      { reason: 'other-medium', medium: 'CPU', group: 0, kind: 'full_attention', stored: 1 },
    ]);
    // The CPU-only block's key is in no batch.
    const cpuOnly = kvBlockKeys(tokens(BS, 400), BS)[0];
    expect(batches.some((x) => x.events.some((e) => e[0] === KV_STORED && e[1].includes(cpuOnly as number)))).toBe(false);
  });

  it('the pod’s snapshot says each rank’s blocks and group, and every block followed by tier', async () => {
    await eventually(() => expect(snapshots.at(-1)?.keys).toHaveLength(5), 10_000);
    const last = snapshots.at(-1);
    expect(last?.ranks).toEqual([
      { rank: 0, blocks: 3, group: 0, kind: 'full_attention' },
      { rank: 1, blocks: 2, group: 0, kind: 'full_attention' },
    ]);
    // Rank 0: 2 + 1 blocks cached and 2 multimodal ones (on the GPU, not in keys); rank 1: 2 cached, 1 on the CPU only.
    expect(last?.tiers).toEqual([
      { medium: 'GPU', blocks: 7 },
      { medium: 'CPU', blocks: 1 },
    ]);
  });
});
