// End-to-end, what precise routing must not credit (docs/kv-events.md "Hybrid models, tiers and
// extra keys"), from live simulator streams over ZeroMQ: real processes on loopback — NATS, two
// simulators reporting a hybrid model's second KV-cache group (sliding window) and a CPU offload
// tier in their KV events, a collector relaying them, an EPP tokenizing prompts (Qwen3) and a
// gateway. Prompts go straight to one simulator (a path no EPP sees); requests with the same
// prefix then go through the gateway, and the EPP's decision says what its index credits.
import { connect } from '@nats-io/transport-node';
import { decodeKvBatch, KV_REMOVED, KV_STORED, type KvBatch } from '@spillway/events';
import { describe, expect, it } from 'vitest';
import { eventually } from '@spillway/testkit';
import type { ManagedProcess } from '../../infra/demo/process.js';
import type { SimProcess } from '../../infra/demo/system.js';
import { MODEL } from '../../infra/demo/system.js';
import { complete, eppMetric, useSystem } from './helpers.js';

const ZONE = 'zone-a';
const WINDOW = 512;

/** A ~3,000-word context of its own per name (about 200 blocks of 16 tokens). */
function context(name: string): string {
  const words = 'river reservoir spillway crest chute gate basin flood inflow outflow weir dam culvert storm design freeboard'.split(' ');
  let s = [...name].reduce((h, c) => (h * 31 + c.charCodeAt(0)) % 2147483647, 11);
  const out = [`Report ${name}.`];
  for (let i = 0; i < 3000; i++) {
    s = (s * 16807) % 2147483647;
    out.push(words[s % words.length] as string);
  }
  return `${out.join(' ')}.\n`;
}

/** A completion straight to one simulator, optionally with vLLM's `cache_salt`. */
async function direct(sim: SimProcess, prompt: string, cacheSalt?: string): Promise<number> {
  const response = await fetch(`http://${sim.address}/v1/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: MODEL, prompt, max_tokens: 2, ...(cacheSalt === undefined ? {} : { cache_salt: cacheSalt }) }),
    signal: AbortSignal.timeout(60_000),
  });
  await response.text();
  return response.status;
}

async function lastDecision(
  metricsPort: number,
): Promise<{ destination: string; prefixSource: string; kvMatchedTokens: number } | undefined> {
  const response = await fetch(`http://127.0.0.1:${metricsPort}/debug/decisions?limit=1`, { signal: AbortSignal.timeout(5_000) });
  const body = (await response.json()) as { decisions?: unknown[] } | unknown[];
  const list = (Array.isArray(body) ? body : (body.decisions ?? [])) as {
    destination: string;
    prefixSource: string;
    kvMatchedTokens: number;
  }[];
  return list[0];
}

/** Blocks a pod's relayed batches tallied as not relayed, by reason, with what the server said of them. */
function skippedOf(batches: readonly KvBatch[], reason: string, what: Record<string, unknown> = {}): { stored: number; removed: number } {
  let stored = 0;
  let removed = 0;
  for (const b of batches)
    for (const t of b.skipped ?? [])
      if (t.reason === reason && Object.entries(what).every(([k, v]) => (t as Record<string, unknown>)[k] === v)) {
        stored += t.stored ?? 0;
        removed += t.removed ?? 0;
      }
  return { stored, removed };
}

describe.sequential('e2e: a live hybrid-attention, CPU-offloading, salted stream is credited only for what a request can hit', () => {
  const e2e = useSystem('kv-sim-fields', {
    zones: [{ zone: ZONE, region: 'r1', servers: 2 }],
    natsTopology: 'single',
    simArgs: [
      ...['--max-num-seqs', '4', '--time-scale', '4', '--num-blocks', '700'],
      ...['--kv-sliding-window', String(WINDOW), '--kv-offload-blocks', '20000'],
    ],
    collectorArgs: ['--kv-snapshot-interval-ms', '500'],
    kvEvents: { tokenizer: 'qwen3' },
  });
  const metricsPort = () => e2e.system.zone(ZONE).eppPorts.metrics;
  const blocks = () => eppMetric(metricsPort(), 'spillway_kv_index_blocks');
  const stored = (tier: string, credited: boolean) =>
    eppMetric(metricsPort(), 'spillway_kv_stored_blocks_total', { tier, credited: String(credited) });
  const ask = (prefix: string, question: string) =>
    complete(e2e.system, e2e.system.zone(ZONE).gatewayUrl, { prompt: `${prefix}${question}`, maxTokens: 2 });
  const x = () => e2e.system.simsOf(ZONE)[0] as SimProcess;

  /** What the collector relays for X, as every EPP receives it. */
  const relayed: KvBatch[] = [];
  const follow = async () => {
    const port = (e2e.system.nats.servers.get('single') as (ManagedProcess & { port: number }) | undefined)?.port;
    const nc = await connect({ servers: `nats://127.0.0.1:${port}` });
    nc.subscribe('spillway.kv.>', {
      callback: (_err, msg) => {
        const d = decodeKvBatch(msg.subject, msg.data);
        if (d.ok && d.batch.pod === x().pod) relayed.push(d.batch);
      },
    });
    await nc.flush();
    return nc;
  };

  it("the window group's copies and the CPU tier's are counted, never credited; the full-attention GPU blocks route", async () => {
    const nc = await follow();
    try {
      const before = {
        blocks: await blocks(),
        gpu: await stored('gpu', true),
        other: await stored('gpu', false),
        cpu: await stored('cpu', false),
        cpuCredited: await stored('cpu', true),
      };
      const prefix = context('hybrid');
      expect(await direct(x(), `${prefix}Asked directly.`)).toBe(200);
      await eventually(async () => expect(await blocks()).toBeGreaterThan(before.blocks + 150), 30_000, 100);
      // Every block three times in the stream (group 0 and group 1 on the GPU, a CPU copy): credited once.
      let credited = 0;
      await eventually(
        async () => {
          credited = (await stored('gpu', true)) - before.gpu;
          expect(credited).toBeGreaterThan(150);
          expect((await stored('gpu', false)) - before.other).toBeGreaterThanOrEqual(credited);
          expect((await stored('cpu', false)) - before.cpu).toBeGreaterThanOrEqual(credited);
        },
        30_000,
        100,
      );
      expect((await blocks()) - before.blocks).toBeLessThanOrEqual(credited);
      expect(await stored('cpu', true)).toBe(before.cpuCredited);
      // The relayed keys are the full-attention group's GPU blocks; the rest only tallied, with what the server said.
      for (const b of relayed.filter((r) => r.events.some((e) => e[0] === KV_STORED)))
        for (const run of b.stored ?? []) expect(run).toMatchObject({ medium: 'GPU', group: 0, kind: 'full_attention' });
      expect(skippedOf(relayed, 'other-group', { group: 1, kind: 'sliding_window', window: WINDOW }).stored).toBeGreaterThanOrEqual(
        credited,
      );
      expect(skippedOf(relayed, 'other-medium', { medium: 'CPU' }).stored).toBeGreaterThanOrEqual(credited);

      const result = await ask(prefix, 'Through the gateway.');
      expect(result.status).toBe(200);
      expect(result.served).toBe(x().address);
      const decision = await lastDecision(metricsPort());
      expect(decision?.prefixSource).toBe('precise');
      expect(decision?.kvMatchedTokens).toBeGreaterThan(2500);
    } finally {
      await nc.close();
    }
  }, 180_000);

  it('salted blocks are never credited: an unsalted request with the same prefix matches nothing', async () => {
    relayed.length = 0;
    const nc = await follow();
    try {
      const before = await blocks();
      const prefix = context('salted');
      expect(await direct(x(), `${prefix}Asked with a salt.`, 'tenant-1')).toBe(200);
      // The server reports the blocks; the collector tallies them as extra-keyed and relays no key.
      await eventually(() => expect(skippedOf(relayed, 'extra-keys').stored).toBeGreaterThan(150), 30_000, 100);
      expect(Math.abs((await blocks()) - before)).toBeLessThan(10);
      const result = await ask(prefix, 'Without the salt.');
      expect(result.status).toBe(200);
      const decision = await lastDecision(metricsPort());
      expect(decision?.kvMatchedTokens).toBe(0);
    } finally {
      await nc.close();
    }
  }, 180_000);

  it('a prefix the GPU evicted is not credited for its copy on the CPU tier', async () => {
    relayed.length = 0;
    const nc = await follow();
    try {
      const prefix = context('evicted');
      const before = await stored('gpu', true);
      expect(await direct(x(), `${prefix}Asked before the others.`)).toBe(200);
      // Asked only once the EPP knows X holds it (else the request could cache it on the other pod).
      // (X's 700 blocks are nearly full by now: its index count moves little, its credited stores do.)
      await eventually(async () => expect(await stored('gpu', true)).toBeGreaterThan(before + 150), 30_000, 100);
      const cached = await ask(prefix, 'Is it cached?');
      expect(cached.served).toBe(x().address);
      expect((await lastDecision(metricsPort()))?.kvMatchedTokens).toBeGreaterThan(2500);
      // 700 GPU blocks: five other contexts of ~200 push every block of the first one out (the CPU tier keeps 20,000).
      for (const other of ['one', 'two', 'three', 'four', 'five']) expect(await direct(x(), `${context(other)}Another.`)).toBe(200);
      const removedKeys = () => relayed.reduce((n, b) => n + b.events.reduce((m, e) => m + (e[0] === KV_REMOVED ? e[1].length : 0), 0), 0);
      await eventually(() => expect(removedKeys()).toBeGreaterThan(300), 30_000, 100);
      // The EPP applies the same batches; one question after they reached it (each miss would store the prefix again).
      await new Promise((r) => setTimeout(r, 1000));
      const after = await ask(prefix, 'And now?');
      expect(after.status).toBe(200);
      expect((await lastDecision(metricsPort()))?.kvMatchedTokens).toBe(0);
      // The CPU tier evicted nothing: its copies were there all along, and counted only.
      expect(skippedOf(relayed, 'other-medium', { medium: 'CPU' }).removed).toBe(0);
    } finally {
      await nc.close();
    }
  }, 240_000);
});
