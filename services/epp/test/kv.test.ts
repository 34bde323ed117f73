/**
 * Precise prefix-cache routing in the EPP (docs/kv-events.md, "In the EPP"): real EPPs against a
 * private nats-server, the real Qwen3 tokenizer, real ext_proc streams. KV batches are published on
 * `spillway.kv.<pool>.<zone>.<pod>` as a collector relays them, snapshots into the stream as a
 * collector publishes them. Each test uses zones of its own, so earlier tests' pods never take part.
 */
import { connect } from '@nats-io/transport-node';
import { jetstreamManager } from '@nats-io/jetstream';
import type { NatsConnection } from '@nats-io/nats-core';
import { encode } from '@msgpack/msgpack';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { ensureStream, EventPublisher } from '@spillway/bus';
import { encodeKvBatch, kvBlockKeys, kvSubjectFor, type KvBatch } from '@spillway/events';
import { loadTokenizer } from '@spillway/tokenizer';
import type { RunningEpp } from '@spillway/epp';
import { eventually, startNatsServer, type NatsServerHandle } from '@spillway/testkit';
import {
  capturingLogger,
  destinationOf,
  EnvoyStream,
  envoyRequestMessages,
  extProcClient,
  POOL,
  startTestEpp,
  TestPublisher,
  type PodSpec,
} from './helpers.js';

const BLOCK = 16;
const tokenizer = loadTokenizer({ preset: 'qwen3' });
// A long shared context (~1,700 tokens): its prefill saved outweighs a small queue difference.
const CONTEXT =
  'You are the support assistant of a river-engineering firm. Cite the standard, never guess a figure, answer in metric units. '.repeat(70);
const messages = (question: string) => [
  { role: 'system', content: CONTEXT },
  { role: 'user', content: question },
];
const chatBody = (question: string) => JSON.stringify({ model: 'llama', messages: messages(question), max_tokens: 4 });
/** The content keys of the blocks a model server holds after serving `question` (the prompt as vLLM tokenizes it). */
const keysOf = (question: string) => kvBlockKeys(tokenizer.encodeChat(messages(question)), BLOCK);

let nats: NatsServerHandle;
let publisher: TestPublisher;
let raw: NatsConnection;
const running: RunningEpp[] = [];
const published: PodSpec[] = [];
const seqs = new Map<string, number>();

beforeAll(async () => {
  nats = await startNatsServer({ forcePrivate: true });
  publisher = await TestPublisher.connect(nats.url);
  raw = await connect({ servers: nats.url });
  await ensureStream(await jetstreamManager(raw), { name: 'SPILLWAY' });
});

afterEach(async () => {
  for (const epp of running.splice(0)) await epp.close();
  await publisher.pods(published.splice(0).map((p) => ({ ...p, ready: false })));
});

afterAll(async () => {
  await raw?.close();
  await publisher?.close();
  await nats?.stop();
});

async function startEpp(zone: string, extra: string[] = [], logger = capturingLogger('warn').logger): Promise<RunningEpp> {
  const epp = await startTestEpp(nats.url, zone, ['--tokenizer', '*=qwen3', '--metrics-stale-ms', '600000', ...extra], logger);
  running.push(epp);
  await epp.ready;
  return epp;
}

async function podsOf(zone: string, specs: Partial<PodSpec>[], base: number): Promise<PodSpec[]> {
  const pods = specs.map((s, i): PodSpec => ({
    pod: `${zone}-${i}`,
    zone,
    address: `10.${base}.0.${i + 1}:8000`,
    waiting: 0,
    running: 0,
    ...s,
  }));
  await publisher.pods(pods);
  published.push(...pods);
  return pods;
}

/** Publishes one relayed batch for a pod, with the pod's next sequence number (and what the relay knows of the pod, when given). */
async function relay(pod: PodSpec, events: KvBatch['events'], known?: KvBatch['known']): Promise<void> {
  const id = `${pod.zone}/${pod.pod}`;
  const seq = (seqs.get(id) ?? -1) + 1;
  seqs.set(id, seq);
  raw.publish(
    kvSubjectFor({ pool: POOL, zone: pod.zone, pod: pod.pod }),
    encodeKvBatch({ v: 1, pool: POOL, zone: pod.zone, pod: pod.pod, seq, observedAt: Date.now(), blockSize: BLOCK, events, known }),
  );
  await raw.flush();
}

/** One chat request through the EPP (the stream ended once answered): its primary's address. */
async function primary(epp: RunningEpp, question: string, subset?: string[]): Promise<string> {
  const stream = new EnvoyStream(extProcClient(epp.grpcPort));
  try {
    stream.send(envoyRequestMessages({ path: '/v1/chat/completions', body: chatBody(question), subset }));
    const [first] = await stream.waitFor(1);
    const header = destinationOf(first).header;
    if (header === undefined) throw new Error('no destination');
    return header.split(',')[0] as string;
  } finally {
    stream.close();
  }
}

async function metricsText(epp: RunningEpp): Promise<string> {
  const response = await fetch(`http://127.0.0.1:${epp.metricsPort}/metrics`);
  return response.text();
}

describe('precise prefix-cache routing from KV events', () => {
  it('picks the pod that reports holding the prompt, and stops once it reports the blocks evicted', async () => {
    const epp = await startEpp('kv-a');
    // X is a little busier than the others: without KV data it is never the cheapest.
    const [p0, x, p2] = await podsOf('kv-a', [{}, { waiting: 1, running: 2 }, {}], 41);
    await eventually(() => expect(epp.core.fleet.get(POOL, 'kv-a', 'kv-a-1')?.metrics?.waitingRequests).toBe(1));
    const subset = [p0, x, p2].map((p) => (p as PodSpec).address);
    // Every pod's server reports its KV events (here: an empty cache), so none is priced by this EPP's own guesses.
    for (const pod of [p0, x, p2]) await relay(pod as PodSpec, [[3]]);
    for (let i = 0; i < 3; i++)
      expect(await primary(epp, `Question ${i}: what spillway capacity do we need?`, subset)).not.toBe(x?.address);

    // X served such a request through a path this EPP never saw; its server reports the blocks.
    await relay(x as PodSpec, [[1, keysOf('What spillway capacity do we need?')]]);
    await eventually(() => expect(epp.core.scheduler.kvIndexStats.blocks).toBeGreaterThan(100));
    for (let i = 0; i < 3; i++) expect(await primary(epp, `Another question ${i}: how wide is a spillway?`, subset)).toBe(x?.address);

    // X evicts them: it is no longer preferred.
    await relay(x as PodSpec, [[2, keysOf('What spillway capacity do we need?')]]);
    await eventually(() => expect(epp.core.scheduler.kvIndexStats.blocks).toBe(0));
    for (let i = 0; i < 3; i++) expect(await primary(epp, `Last question ${i}: how deep is a spillway?`, subset)).not.toBe(x?.address);

    const text = await metricsText(epp);
    expect(text).toMatch(/spillway_kv_batches_total\{result="applied"\} 5/);
    expect(text).toMatch(/spillway_kv_tokenized_requests_total\{tokens="prefix-cached"\} [1-9]/);
    expect(text).toMatch(/spillway_kv_tokenize_seconds_count\{tokens="full"\} [1-9]/);
    expect(text).toMatch(/spillway_kv_index_events_total\{event="hit"\} [1-9]/);
  }, 60_000);

  it('without KV data or a tokenizer, requests are priced by the approximate index as before', async () => {
    const epp = await startEpp('kv-n', ['--tokenizer', '']);
    const pods = await podsOf('kv-n', [{}, {}], 42);
    await eventually(() => expect(epp.core.fleet.get(POOL, 'kv-n', 'kv-n-1')?.metrics).toBeDefined());
    await relay(pods[1] as PodSpec, [[1, keysOf('Q')]]);
    await eventually(() => expect(epp.core.scheduler.kvIndexStats.blocks).toBeGreaterThan(0));
    await primary(
      epp,
      'Q',
      pods.map((p) => p.address),
    );
    expect(epp.core.kv.counters.tokenizedFresh + epp.core.kv.counters.tokenizedPartly).toBe(0);
    expect(epp.core.scheduler.kvIndexStats.lookups).toBe(0);
  }, 60_000);

  it('a spilled request goes to the remote pod that holds its prefix', async () => {
    const epp = await startEpp('kv-x', ['--subset-mode', 'locality']);
    // The local zone is saturated; two pods in another zone, the busier one holding the prefix.
    const local = await podsOf(
      'kv-x',
      [
        { waiting: 20, running: 64 },
        { waiting: 20, running: 64 },
      ],
      43,
    );
    const remote = await podsOf('kv-y', [{}, { waiting: 1, running: 2 }], 44);
    for (const pod of [...local, ...remote]) await relay(pod, [[3]]);
    await eventually(() => expect(epp.core.fleet.get(POOL, 'kv-y', 'kv-y-1')?.metrics).toBeDefined());
    await relay(remote[1] as PodSpec, [[1, keysOf('Which gate opens first?')]]);
    await eventually(() => expect(epp.core.scheduler.kvIndexStats.blocks).toBeGreaterThan(100));
    for (let i = 0; i < 4; i++) {
      expect(
        await primary(
          epp,
          `Spilled ${i}: which gate opens first?`,
          local.map((p) => p.address),
        ),
      ).toBe(remote[1]?.address);
    }
  }, 60_000);

  it("a restarting EPP replays the pods' KV snapshots from the stream and is not blind", async () => {
    const pods = await podsOf('kv-r', [{}, { waiting: 1, running: 2 }], 45);
    const x = pods[1] as PodSpec;
    const events = new EventPublisher(raw);
    events.publishKvSnapshot({
      v: 1,
      kind: 'kv',
      pool: POOL,
      zone: x.zone,
      pod: x.pod,
      observedAt: Date.now(),
      blockSize: BLOCK,
      seq: 7,
      keys: keysOf('How is the dam inspected?'),
    });
    await raw.flush();
    const epp = await startEpp('kv-r');
    await eventually(() => expect(epp.core.scheduler.kvIndexStats.pods).toBeGreaterThan(0));
    expect(epp.core.kv.counters.snapshotsApplied).toBeGreaterThanOrEqual(1);
    for (let i = 0; i < 3; i++)
      expect(
        await primary(
          epp,
          `After restart ${i}: how is the dam inspected?`,
          pods.map((p) => p.address),
        ),
      ).toBe(x.address);
    expect(await metricsText(epp)).toMatch(/spillway_kv_snapshots_total [1-9]/);
  }, 60_000);

  it('a collector restarted without a replay says its view is partial: the pods are priced by both indexes until it vouches for them again', async () => {
    const epp = await startEpp('kv-p');
    const [p0, x, p2] = await podsOf('kv-p', [{}, { waiting: 1, running: 2 }, {}], 47);
    await eventually(() => expect(epp.core.fleet.get(POOL, 'kv-p', 'kv-p-1')?.metrics?.waitingRequests).toBe(1));
    const all = [p0, x, p2].map((p) => (p as PodSpec).address);
    const since = Date.now() - 60_000;
    for (const pod of [p0, x, p2]) await relay(pod as PodSpec, [[3]], { since, complete: true });
    // The stream's snapshots of earlier tests' pods are replayed too.
    const others = epp.core.scheduler.kvIndexStats.blocks;
    // X served the context through this EPP (the approximate index learns it); its server reports the blocks.
    expect(await primary(epp, 'Before the restart: how is a weir sized?', [(x as PodSpec).address])).toBe(x?.address);
    await relay(x as PodSpec, [[1, keysOf('Before the restart: how is a weir sized?')]], { since, complete: true });
    await eventually(() => expect(epp.core.scheduler.kvIndexStats.blocks).toBeGreaterThan(others + 100));
    expect(await primary(epp, 'Still before: how is a weir sized?', all)).toBe(x?.address);

    // A new collector: its first batch per pod clears it at every EPP, and says it cannot name what the servers held before.
    const restarted = Date.now();
    for (const pod of [p0, x, p2]) await relay(pod as PodSpec, [[3]], { since: restarted, complete: false });
    await eventually(() => expect(epp.core.scheduler.kvIndexStats).toMatchObject({ blocks: others, partialPods: 3 }));
    // X still holds the context (vLLM never announces it again): the approximate index's word keeps it there.
    for (let i = 0; i < 3; i++) expect(await primary(epp, `After the restart ${i}: how is a weir sized?`, all)).toBe(x?.address);
    const decisions = (await (await fetch(`http://127.0.0.1:${epp.metricsPort}/debug/decisions?limit=1`)).json()) as
      { decisions?: Array<{ prefixSource: string; kvMatchedTokens: number }> } | Array<{ prefixSource: string; kvMatchedTokens: number }>;
    const last = (Array.isArray(decisions) ? decisions : (decisions.decisions ?? []))[0];
    expect(last).toMatchObject({ prefixSource: 'precise+approximate', kvMatchedTokens: 0 });
    expect(await metricsText(epp)).toMatch(/spillway_kv_index_partial_pods 3/);

    // X's cache turned over since (the relay vouches for every block again): it holds none of the context.
    await relay(x as PodSpec, [], { since: restarted, complete: true });
    await eventually(() => expect(epp.core.scheduler.kvIndexStats.partialPods).toBe(2));
    for (let i = 0; i < 3; i++) expect(await primary(epp, `Turned over ${i}: how is a weir sized?`, all)).not.toBe(x?.address);
  }, 60_000);

  it('drops malformed, unknown, oversized, forged and flooding input, counts it by reason, and keeps serving', async () => {
    const { logger, lines } = capturingLogger('warn');
    const epp = await startEpp('kv-b', [], logger);
    const pods = await podsOf('kv-b', [{}, {}], 46);
    const target = pods[0] as PodSpec;
    const subject = kvSubjectFor({ pool: POOL, zone: target.zone, pod: target.pod });
    const blocksBefore = epp.core.scheduler.kvIndexStats.blocks;
    const batch = (events: unknown, extra: Record<string, unknown> = {}) =>
      encode({ v: 1, pool: POOL, zone: target.zone, pod: target.pod, seq: 1, observedAt: Date.now(), blockSize: BLOCK, events, ...extra });

    raw.publish(subject, new Uint8Array([0xc1, 0xff, 0x00])); // not msgpack
    raw.publish(subject, batch([[9, [1, 2, 3]]])); // an unknown event tag
    raw.publish(subject, batch([[1, [-5]]])); // a key out of range
    raw.publish(
      subject,
      batch([
        [1, Array.from({ length: 5000 }, (_, i) => i)],
        [2, Array.from({ length: 5000 }, (_, i) => i)],
      ]),
    ); // 10,000 keys in one batch
    raw.publish(subject, batch([[3]], { pod: 'someone-else' })); // a payload naming another pod than its subject
    raw.publish(subject, encode({ v: 1, junk: 'x'.repeat(1000) }));
    await raw.flush();
    await eventually(() => {
      const rejected = epp.core.kv.counters.rejected;
      expect(rejected).toMatchObject({ 'not-msgpack': 1, invalid: 3, 'too-many-keys': 1, 'subject-mismatch': 1 });
    });
    // The batch of another pod's subject is its own pod's; an oversized one never reaches NATS's default max_payload, so it is fed as received.
    epp.core.kv.subscription?.onMessage(subject, new Uint8Array(1024 * 1024 + 1));
    expect(epp.core.kv.counters.rejected.oversized).toBe(1);
    expect(epp.core.scheduler.kvIndexStats.blocks).toBe(blocksBefore);

    // A pod flooding blocks: bounded by the index's per-pod cap, the oldest evicted and counted.
    const flood = pods[1] as PodSpec;
    for (let b = 0; b < 20; b++) await relay(flood, [[1, Array.from({ length: 8000 }, (_, i) => 1_000_000 + b * 8000 + i)]]);
    await eventually(() => expect(epp.core.kv.counters.batchesApplied).toBe(20));
    const stats = epp.core.scheduler.kvIndexStats;
    expect(stats.blocks - blocksBefore).toBeLessThanOrEqual(131_072);
    expect(stats.evicted).toBeGreaterThan(0);

    // Still serving; each reason logged once (rate-limited), not once per batch.
    expect(
      await primary(
        epp,
        'still there?',
        pods.map((p) => p.address),
      ),
    ).toMatch(/^10\.46\.0\./);
    const drops = lines.filter((l) => l['msg'] === 'dropped a KV block batch');
    expect(new Set(drops.map((l) => l['reason']))).toEqual(
      new Set(['not-msgpack', 'invalid', 'too-many-keys', 'subject-mismatch', 'oversized']),
    );
    expect(drops.length).toBe(5);
    const text = await metricsText(epp);
    expect(text).toMatch(/spillway_kv_batches_rejected_total\{reason="invalid"\} 3/);
    expect(text).toMatch(/spillway_kv_index_events_total\{event="evicted"\} [1-9]/);
  }, 60_000);
});
