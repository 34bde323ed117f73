// End-to-end, precise prefix-cache routing (docs/kv-events.md): real processes on loopback — NATS,
// simulators publishing vLLM-layout KV events over ZeroMQ (Qwen3 tokenizer), per zone a collector
// relaying them over NATS and snapshotting them into the stream, an EPP tokenizing prompts with the
// same tokenizer, and a gateway. Every simulator runs two data-parallel ranks, each an engine with a
// KV cache and a KV-event stream of its own, as vLLM with --data-parallel-size 2: the collector
// follows both. Prompts are sent straight to a simulator (a path no EPP sees), then requests with
// the same prefix go through the gateways. Scenarios run in order; the restart last.
import { connect } from '@nats-io/transport-node';
import { decodeKvBatch, KV_STORED, type KvBatch } from '@spillway/events';
import { describe, expect, it } from 'vitest';
import { eventually } from '@spillway/testkit';
import type { ManagedProcess } from '../../infra/demo/process.js';
import type { SimProcess } from '../../infra/demo/system.js';
import { MODEL } from '../../infra/demo/system.js';
import { complete, eppMetric, useSystem, type Completion } from './helpers.js';

const ZONES = ['zone-a', 'zone-b'];

/** A ~3,000-token context of its own per scenario: its prefill outweighs any queue, round trip or zone bias. */
function context(name: string): string {
  const words = 'river reservoir spillway crest chute gate basin flood inflow outflow weir dam culvert storm design freeboard'.split(' ');
  let s = [...name].reduce((h, c) => (h * 31 + c.charCodeAt(0)) % 2147483647, 7);
  const out = [`Manual ${name}.`];
  for (let i = 0; i < 3000; i++) {
    s = (s * 16807) % 2147483647;
    out.push(words[s % words.length] as string);
  }
  return `${out.join(' ')}.\n`;
}

/** A completion sent straight to one simulator (to one of its ranks), as a client of another picker (or none) would. */
async function direct(sim: SimProcess, prompt: string, rank?: number): Promise<number> {
  const response = await fetch(`http://${sim.address}/v1/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...(rank === undefined ? {} : { 'x-data-parallel-rank': String(rank) }) },
    body: JSON.stringify({ model: MODEL, prompt, max_tokens: 2 }),
    signal: AbortSignal.timeout(60_000),
  });
  await response.text();
  return response.status;
}

interface DecisionSummary {
  destination: string;
  prefixSource: 'precise' | 'approximate';
  kvMatchedTokens: number;
}

async function lastDecision(metricsPort: number): Promise<DecisionSummary | undefined> {
  const response = await fetch(`http://127.0.0.1:${metricsPort}/debug/decisions?limit=1`, { signal: AbortSignal.timeout(5_000) });
  const body = (await response.json()) as { decisions?: DecisionSummary[] } | DecisionSummary[];
  const list = Array.isArray(body) ? body : (body.decisions ?? []);
  return list[0];
}

describe.sequential("e2e: precise prefix-cache routing from the model servers' KV events", () => {
  const e2e = useSystem('kv-events', {
    zones: ZONES.map((zone) => ({ zone, region: 'r1', servers: 2 })),
    natsTopology: 'single',
    simArgs: ['--max-num-seqs', '4', '--time-scale', '4', '--admin', '--data-parallel-size', '2'],
    collectorArgs: ['--kv-snapshot-interval-ms', '500'],
    kvEvents: { tokenizer: 'qwen3' },
  });
  const sims = (zone: string) => e2e.system.simsOf(zone);
  const metricsPort = (zone: string) => e2e.system.zone(zone).eppPorts.metrics;
  const gateway = (zone: string) => e2e.system.zone(zone).gatewayUrl;
  const blocks = (zone: string) => eppMetric(metricsPort(zone), 'spillway_kv_index_blocks');

  /** A request with `prefix` through a zone's gateway. */
  const ask = (zone: string, prefix: string, question: string): Promise<Completion> =>
    complete(e2e.system, gateway(zone), { prompt: `${prefix}${question}`, maxTokens: 2 });

  it("every EPP follows the KV events of every zone's servers", async () => {
    // One prompt of a few blocks straight to every server: each reports the blocks it stored.
    for (const sim of e2e.system.sims)
      expect(
        await direct(sim, `Warm-up of ${sim.pod}: ${'a prompt long enough to fill several blocks of sixteen tokens; '.repeat(8)}`),
      ).toBe(200);
    for (const zone of ZONES) {
      await eventually(async () => expect(await eppMetric(metricsPort(zone), 'spillway_kv_index_pods')).toBe(4), 30_000, 200);
      expect(await eppMetric(metricsPort(zone), 'spillway_kv_batches_total', { result: 'applied' })).toBeGreaterThan(0);
    }
  }, 120_000);

  it('after a pod served a prompt through a path the EPP never saw, a request with the same prefix picks it; after it evicts the blocks, it does not', async () => {
    const x = sims('zone-a')[1] as SimProcess;
    const prefix = context('local');
    const before = await blocks('zone-a');
    expect(await direct(x, `${prefix}First question, asked directly.`)).toBe(200);
    await eventually(async () => expect(await blocks('zone-a')).toBeGreaterThan(before + 150), 30_000, 100);
    for (let i = 0; i < 3; i++) {
      const result = await ask('zone-a', prefix, `Question ${i} through the gateway.`);
      expect(result.status).toBe(200);
      expect(result.served).toBe(x.address);
      const decision = await lastDecision(metricsPort('zone-a'));
      expect(decision?.prefixSource).toBe('precise');
      expect(decision?.kvMatchedTokens).toBeGreaterThan(2500);
    }

    // X drops its prefix cache (an AllBlocksCleared event): the EPP no longer believes X holds the prefix.
    const reset = await fetch(`http://${x.address}/reset_prefix_cache`, { method: 'POST', signal: AbortSignal.timeout(10_000) });
    expect(reset.status).toBe(200);
    await eventually(async () => expect(await blocks('zone-a')).toBeLessThan(before + 150), 30_000, 100);
    const after = await ask('zone-a', prefix, 'A question after the eviction.');
    expect(after.status).toBe(200);
    const decision = await lastDecision(metricsPort('zone-a'));
    expect(decision?.kvMatchedTokens).toBe(0);
  }, 120_000);

  it('two data-parallel ranks of one pod: what either rank caches routes requests to the pod', async () => {
    const x = sims('zone-a')[0] as SimProcess;
    expect(x.kvRanks).toHaveLength(2);
    // What the collector relays on NATS for the pod, as every EPP receives it.
    const port = (e2e.system.nats.servers.get('single') as (ManagedProcess & { port: number }) | undefined)?.port;
    const nc = await connect({ servers: `nats://127.0.0.1:${port}` });
    const relayed: KvBatch[] = [];
    const sub = nc.subscribe('spillway.kv.>', {
      callback: (_err, msg) => {
        const d = decodeKvBatch(msg.subject, msg.data);
        if (d.ok && d.batch.pod === x.pod) relayed.push(d.batch);
      },
    });
    await nc.flush();
    for (const rank of [1, 0]) {
      const prefix = context(`rank-${rank}`);
      const before = await blocks('zone-a');
      // Straight to one rank: only that rank's stream reports the blocks.
      expect(await direct(x, `${prefix}Asked of rank ${rank}.`, rank)).toBe(200);
      await eventually(async () => expect(await blocks('zone-a')).toBeGreaterThan(before + 150), 30_000, 100);
      const result = await ask('zone-a', prefix, `Rank ${rank}, through the gateway.`);
      expect(result.status).toBe(200);
      expect(result.served).toBe(x.address);
      const decision = await lastDecision(metricsPort('zone-a'));
      expect(decision?.prefixSource).toBe('precise');
      expect(decision?.kvMatchedTokens).toBeGreaterThan(2500);
    }
    // Each rank's stored blocks came in batches saying that rank, and the tier, group and kind the simulator said (as vLLM).
    sub.unsubscribe();
    await nc.close();
    for (const rank of [0, 1]) {
      const stores = relayed.filter((b) => b.rank === rank && b.events.some((e) => e[0] === KV_STORED));
      expect(stores.length, `rank ${rank}`).toBeGreaterThan(0);
      for (const b of stores) {
        expect(b.stored?.reduce((n, run) => n + run.events, 0)).toBe(b.events.filter((e) => e[0] === KV_STORED).length);
        for (const run of b.stored ?? []) expect(run).toMatchObject({ medium: 'GPU', group: 0, kind: 'full_attention' });
      }
    }
    // The EPPs count them by rank and tier.
    for (const zone of ZONES) {
      expect(await eppMetric(metricsPort(zone), 'spillway_kv_rank_batches_total', { rank: '1' })).toBeGreaterThan(0);
      expect(await eppMetric(metricsPort(zone), 'spillway_kv_stored_blocks_total', { tier: 'gpu', credited: 'true' })).toBeGreaterThan(300);
    }
  }, 120_000);

  it('cross-zone: a request goes to the remote pod holding its prefix', async () => {
    const y = sims('zone-b')[0] as SimProcess;
    const prefix = context('remote');
    const before = await blocks('zone-a');
    expect(await direct(y, `${prefix}Asked in zone-b.`)).toBe(200);
    await eventually(async () => expect(await blocks('zone-a')).toBeGreaterThan(before + 150), 30_000, 100);
    for (let i = 0; i < 2; i++) {
      const result = await ask('zone-a', prefix, `Question ${i} from zone-a.`);
      expect(result.status).toBe(200);
      expect(result.served).toBe(y.address);
      expect(result.zone).toBe('zone-b');
    }
    const decision = await lastDecision(metricsPort('zone-a'));
    expect(decision?.kvMatchedTokens).toBeGreaterThan(2500);
  }, 120_000);

  it("a restarted EPP replays the pods' KV snapshots and routes by them before any new event", async () => {
    const x = sims('zone-a')[0] as SimProcess;
    const prefix = context('restart');
    expect(await direct(x, `${prefix}Before the restart.`)).toBe(200);
    // The collector snapshots each pod every 500 ms: wait for one that holds the prefix.
    await eventually(async () => expect(await blocks('zone-a')).toBeGreaterThan(150), 30_000, 100);
    await new Promise((r) => setTimeout(r, 1500));
    const epp = e2e.system.zone('zone-a').epp;
    await epp.stop();
    await epp.start();
    const snapshots = await eppMetric(metricsPort('zone-a'), 'spillway_kv_snapshots_total');
    expect(snapshots).toBeGreaterThan(0);
    const result = await ask('zone-a', prefix, 'After the restart.');
    expect(result.status).toBe(200);
    expect(result.served).toBe(x.address);
  }, 120_000);
});
