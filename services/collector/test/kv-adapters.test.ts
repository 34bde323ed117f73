/**
 * Each engine's KV-event adapter against recorded-shape fixtures (test/fixtures/kv/*.json, each
 * naming the engine source it follows), over the real transports: a ZeroMQ PUB socket for vLLM
 * and SGLang, an HTTP server answering `POST /kv_cache_events` for TensorRT-LLM. The relay's
 * output is checked against the content keys an EPP computes for the same tokens.
 */
import { readFileSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { encode } from '@msgpack/msgpack';
import {
  encodeVllmSeq,
  KV_CLEARED,
  KV_REMOVED,
  KV_STORED,
  kvBlockKeys,
  kvKeySeed,
  type KvBatch,
  type KvSnapshotEvent,
} from '@spillway/events';
import { pino } from 'pino';
import { Agent } from 'undici';
import { afterEach, describe, expect, it } from 'vitest';
import { XPublisher } from 'zeromq';
import { KvRelay, type KvSink } from '../src/kv-relay.js';
import { CollectorMetrics } from '../src/self-metrics.js';

const fixture = <T>(name: string): T => JSON.parse(readFileSync(new URL(`./fixtures/kv/${name}.json`, import.meta.url), 'utf8')) as T;

/** Fixture values with `{$u64}` (a 64-bit hash) and `{$bin}` (a byte hash, hex) as msgpack would carry them. */
function revive(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(revive);
  if (value !== null && typeof value === 'object') {
    const o = value as Record<string, unknown>;
    if (typeof o['$u64'] === 'string') return BigInt(o['$u64']);
    if (typeof o['$bin'] === 'string') return Uint8Array.from(Buffer.from(o['$bin'], 'hex'));
    return Object.fromEntries(Object.entries(o).map(([k, v]) => [k, revive(v)]));
  }
  return value;
}

interface ZmqFixture {
  source: string;
  frames: Array<{ topic: string; seq: number; payload: unknown }>;
}

/** The token ids the fixture generator used (a deterministic spread over a 151k vocabulary). */
const toks = (start: number, n: number) => Array.from({ length: n }, (_, i) => ((start * 7919 + i * 104729) % 151000) + 10);

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
  events() {
    return this.batches.flatMap((b) => b.events);
  }
}

async function until(check: () => boolean | Promise<boolean>, what: string): Promise<void> {
  const end = Date.now() + 15_000;
  while (!(await check())) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

const cleanups: Array<() => unknown> = [];
afterEach(async () => {
  for (const c of cleanups.splice(0)) await c();
});

function startRelay(extra: Partial<ConstructorParameters<typeof KvRelay>[0]> = {}) {
  const sink = new MemoryKvSink();
  const metrics = new CollectorMetrics();
  const relay = new KvRelay({
    pool: 'llama',
    limits: { maxPayloadBytes: 1 << 20, maxEvents: 256, maxHashes: 256, maxTokens: 4096 },
    maxBytesPerPod: 1 << 20,
    snapshotIntervalMs: 60_000,
    replayTimeoutMs: 1000,
    reconnectMs: 50,
    reconnectMaxMs: 200,
    topic: '',
    sink,
    logger: pino({ level: 'silent' }),
    metrics,
    ...extra,
  });
  cleanups.push(() => relay.stop());
  const counter = async (name: string, labels: Record<string, string>) =>
    (await metrics.registry.getSingleMetric(name)?.get())?.values.find((v) => Object.entries(labels).every(([k, l]) => v.labels[k] === l))
      ?.value ?? 0;
  return { sink, relay, counter };
}

const endpoint = (pod: string, extra: Record<string, unknown>) => ({
  pod,
  address: '127.0.0.1:1',
  zone: 'zone-a',
  region: undefined,
  engine: undefined,
  labels: undefined,
  sourceReady: true,
  ...extra,
});

/** Publishes a ZeroMQ fixture's frames once the relay has subscribed (an XPUB socket hears the subscription). */
async function playZmq(name: string, pod = 'p'): Promise<{ sink: MemoryKvSink; counter: ReturnType<typeof startRelay>['counter'] }> {
  const f = fixture<ZmqFixture>(name);
  const pub = new XPublisher({ linger: 0 });
  await pub.bind('tcp://127.0.0.1:*');
  cleanups.push(() => pub.close());
  const { sink, relay, counter } = startRelay();
  relay.setEndpoints([endpoint(pod, { kvEvents: pub.lastEndpoint })]);
  const [subscription] = await pub.receive();
  expect(subscription?.[0]).toBe(1);
  for (const frame of f.frames)
    await pub.send([Buffer.from(frame.topic, 'utf8'), encodeVllmSeq(frame.seq), encode(revive(frame.payload), { useBigInt64: true })]);
  await until(async () => (await counter('spillway_collector_kv_batches_received_total', {})) >= f.frames.length, 'every frame');
  return { sink, counter };
}

const stored = (keys: number[]) => [KV_STORED, keys];
const removedOf = (keys: number[]) => [KV_REMOVED, keys];

describe('vLLM adapter against its fixtures', () => {
  it('the newest vLLM (map-encoded events): every field read, GPU blocks keyed, LoRA seeded, CPU and multimodal blocks not credited', async () => {
    const { sink, counter } = await playZmq('vllm-map');
    const first = kvBlockKeys(toks(1, 32), 16);
    const chained = kvBlockKeys([...toks(1, 32), ...toks(2, 16)], 16)[2] as number;
    const lora = kvBlockKeys(toks(3, 16), 16, { seed: kvKeySeed('sql-lora') });
    await until(() => sink.events().some((e) => e[0] === KV_CLEARED && sink.events().indexOf(e) > 0), 'the clear');
    expect(sink.events()).toEqual([[KV_CLEARED], stored(first), stored([chained]), stored(lora), removedOf([chained]), [KV_CLEARED]]);
    expect(await counter('spillway_collector_kv_skipped_blocks_total', { reason: 'other-medium' })).toBe(1);
    expect(await counter('spillway_collector_kv_skipped_blocks_total', { reason: 'extra-keys' })).toBe(1);
    expect(await counter('spillway_collector_kv_dropped_total', { reason: 'malformed' })).toBe(0);
    // What the server said rides along: its rank, each stored run's tier, group and adapter, the blocks not relayed by tier.
    expect(sink.batches.every((b) => b.rank === 0)).toBe(true);
    const runs = sink.batches.flatMap((b) => b.stored ?? []);
    expect(runs.map((r) => r.lora)).toEqual([undefined, undefined, 'sql-lora']);
    for (const run of runs) expect(run).toMatchObject({ medium: 'GPU', group: 0, kind: 'full_attention' });
    const skipped = sink.batches.flatMap((b) => b.skipped ?? []);
    expect(skipped).toContainEqual(expect.objectContaining({ reason: 'other-medium', medium: 'CPU', stored: 1 }));
    expect(skipped).toContainEqual(expect.objectContaining({ reason: 'extra-keys', extraKeys: true, stored: 1 }));
  });

  it('array-encoded vLLM structs with trailing fields omitted, 64-bit and byte hashes, a data-parallel rank', async () => {
    const { sink } = await playZmq('vllm-array');
    const a = kvBlockKeys(toks(5, 32), 16);
    const chained = kvBlockKeys([...toks(5, 32), ...toks(6, 16)], 16)[2] as number;
    const c = kvBlockKeys(toks(7, 16), 16);
    await until(() => sink.events().length >= 6, 'the removals');
    expect(sink.events()).toEqual([[KV_CLEARED], stored(a), stored([chained]), stored(c), removedOf([a[1] as number]), removedOf(c)]);
    // The batch's data_parallel_rank, on the rank the relay follows in the pod's first place.
    expect(sink.batches.every((b) => b.rank === 1)).toBe(true);
  });

  it('a hybrid-attention model: the full-attention group is followed, whatever its index; the sliding-window group never removes its blocks', async () => {
    const { sink, counter } = await playZmq('vllm-hybrid');
    await until(async () => (await counter('spillway_collector_kv_skipped_blocks_total', { reason: 'other-group' })) >= 5, 'both batches');
    expect(sink.events()).toEqual([[KV_CLEARED], stored(kvBlockKeys(toks(8, 48), 16))]);
  });
});

describe('SGLang adapter against its fixture', () => {
  it('its shorter structs, an unhashed cache salt never aliasing the unsalted block, its tiers, and a new publisher epoch', async () => {
    const { sink, counter } = await playZmq('sglang');
    const k = kvBlockKeys(toks(9, 32), 16);
    await until(() => sink.events().length >= 5, 'the new epoch');
    expect(sink.events()).toEqual([
      [KV_CLEARED],
      stored(k),
      removedOf([k[0] as number]),
      // The restarted publisher: what the old one reported is gone.
      [KV_CLEARED],
      stored(kvBlockKeys(toks(11, 16), 16)),
    ]);
    expect(await counter('spillway_collector_kv_skipped_blocks_total', { reason: 'extra-keys' })).toBe(1);
    expect(await counter('spillway_collector_kv_skipped_blocks_total', { reason: 'other-medium' })).toBe(2);
    expect(await counter('spillway_collector_kv_gaps_total', { handling: 'restart' })).toBe(1);
  });
});

describe('TensorRT-LLM adapter against its fixtures', () => {
  /** Serves the answers in turn (a string as it is: JSON with 64-bit integers JavaScript cannot hold). */
  async function serve(answers: (unknown[] | string)[]): Promise<{ url: string; polls: () => number }> {
    let polls = 0;
    const server: Server = createServer((req, res) => {
      if (req.method !== 'POST' || req.url !== '/kv_cache_events') return void res.writeHead(404).end();
      const answer = answers[polls++] ?? [];
      res.writeHead(200, { 'content-type': 'application/json' }).end(typeof answer === 'string' ? answer : JSON.stringify(answer));
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    cleanups.push(() => new Promise((r) => server.close(r)));
    return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/kv_cache_events`, polls: () => polls };
  }

  function relayFor(url: string) {
    const dispatcher = new Agent();
    cleanups.push(() => dispatcher.destroy());
    const r = startRelay({ dispatcher, pollIntervalMs: 20 });
    r.relay.setEndpoints([endpoint('trt', { engine: 'trtllm', kvEvents: url })]);
    return r;
  }

  it('V1 events: created, stored chains, a token with an extra id, a move to the host tier and a removal', async () => {
    const f = fixture<{ answers: unknown[][] }>('trtllm-v1');
    const { url, polls } = await serve(f.answers);
    const { sink, counter } = relayFor(url);
    await until(() => polls() > f.answers.length, 'every answer');
    const prompt = [...toks(12, 32), ...toks(13, 16)];
    const k = kvBlockKeys(prompt, 16);
    expect(sink.events()).toEqual([
      [KV_CLEARED],
      stored(k.slice(0, 2)),
      stored([k[2] as number]),
      removedOf([k[2] as number]),
      removedOf([k[0] as number]),
    ]);
    expect(await counter('spillway_collector_kv_skipped_blocks_total', { reason: 'extra-keys' })).toBe(1);
    // Followed from the server's `created` cache (event 0): the relay knows every block.
    expect(sink.batches.map((b) => b.known?.complete)).toEqual(sink.batches.map(() => true));
  });

  it('V2 events with attention-DP ranks, hex hashes and mm_keys; a lost event starts its rank afresh', async () => {
    const f = fixture<{ answers: unknown[][] }>('trtllm-v2');
    const { url, polls } = await serve(f.answers);
    const { sink, counter } = relayFor(url);
    await until(() => polls() > f.answers.length, 'every answer');
    const k = [...kvBlockKeys(toks(15, 16), 16), ...kvBlockKeys([...toks(15, 16), ...toks(16, 16)], 16).slice(1)];
    expect(sink.events()).toEqual([[KV_CLEARED], stored(k), [KV_CLEARED]]);
    expect(await counter('spillway_collector_kv_skipped_blocks_total', { reason: 'extra-keys' })).toBe(1);
    expect(await counter('spillway_collector_kv_gaps_total', { handling: 'cleared' })).toBe(1);
    // Both ranks followed from their `created` caches until rank 0 lost an event: from then on the pod is partial.
    expect(sink.batches.map((b) => b.known?.complete)).toEqual([...sink.batches.slice(0, -1).map(() => true), false]);
    // Each attention-DP rank's batches say their rank; the group is the V2 layer group, the window its size.
    const stores = sink.batches.filter((b) => b.events.some((e) => e[0] === KV_STORED));
    expect(stores.map((b) => b.rank)).toEqual([0]);
    expect(stores[0]?.stored).toEqual([{ events: 1, medium: 'GPU', group: 0, window: 128 }]);
    // Rank 1's multimodal block is relayed as a tally only: a batch with no events, saying its rank.
    const tallied = sink.batches.filter((b) => b.skipped !== undefined);
    expect(tallied.map((b) => [b.rank, b.events, b.skipped])).toEqual([
      [1, [], [{ reason: 'extra-keys', medium: 'GPU', group: 0, window: 128, extraKeys: true, stored: 1 }]],
    ]);
  });

  it("V1 hashes: once a chain start's hash is its tokens' alone, a chain start whose hash is not (a LoRA adapter's) is not credited", async () => {
    // hash_v1_block_key (tensorrt_llm/runtime/kv_cache_hash.py) of these blocks: plain, and under LoRA task 3.
    const first = Array.from({ length: 16 }, (_, i) => ((i * 7919) % 151000) + 10);
    const next = toks(0, 16);
    const hashes = {
      base: '17242229429749233524',
      baseNext: '15537621839669429045',
      lora: '14058571575069113074',
      loraNext: '17820102608953805074',
    };
    const tokens = (ids: number[]) => JSON.stringify(ids.map((token_id) => ({ type: 'unique_token', token_id, token_extra_id: 0 })));
    const storedEvent = (id: number, parent: string, blocks: [string, number[]][]) =>
      `{"event_id":${id},"window_size":4096,"data":{"type":"stored","parent_hash":${parent},"blocks":[${blocks
        .map(([h, ids]) => `{"type":"stored_block","block_hash":${h},"tokens":${tokens(ids)},"cache_level":0,"priority":35}`)
        .join(',')}]}}`;
    const { url, polls } = await serve([
      `[{"event_id":0,"window_size":4096,"data":{"type":"created","num_blocks_per_cache_level":[8000,0]}},${storedEvent(1, 'null', [
        [hashes.base, first],
        [hashes.baseNext, next],
      ])}]`,
      // The same tokens for an adapter (the V1 serializer sends no lora_id), its chain continued in a later event.
      `[${storedEvent(2, 'null', [[hashes.lora, first]])},${storedEvent(3, hashes.lora, [[hashes.loraNext, next]])}]`,
    ]);
    const { sink, counter } = relayFor(url);
    await until(() => polls() > 2, 'both answers');
    expect(sink.events()).toEqual([[KV_CLEARED], stored(kvBlockKeys([...first, ...next], 16))]);
    expect(await counter('spillway_collector_kv_skipped_blocks_total', { reason: 'extra-keys' })).toBe(2);
  });

  it('an attention-DP rank past what a pod can have: the answer is dropped as malformed, and the ranks start afresh', async () => {
    const answer = fixture<{ answers: unknown[][] }>('trtllm-v2').answers[0] as Array<Record<string, unknown>>;
    const { url, polls } = await serve([answer, [{ ...answer[0], event_id: 9, attention_dp_rank: 40 }]]);
    const { sink, counter } = relayFor(url);
    await until(() => polls() > 2, 'both answers');
    expect(await counter('spillway_collector_kv_dropped_total', { reason: 'malformed' })).toBe(1);
    expect(sink.batches.every((b) => b.rank === undefined || b.rank < 32)).toBe(true);
  });

  it('an answer that is not the documented JSON is dropped, counted, and starts the ranks afresh', async () => {
    const nested = `${'['.repeat(100_000)}${']'.repeat(100_000)}`;
    let polls = 0;
    const server = createServer((_req, res) => {
      polls++;
      res
        .writeHead(200)
        .end(polls === 1 ? JSON.stringify(fixture<{ answers: unknown[][] }>('trtllm-v1').answers[0]) : polls === 2 ? nested : 'not json');
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    cleanups.push(() => new Promise((r) => server.close(r)));
    const { sink, counter } = relayFor(`http://127.0.0.1:${(server.address() as AddressInfo).port}/kv_cache_events`);
    await until(() => polls >= 4, 'the bad answers');
    expect(await counter('spillway_collector_kv_dropped_total', { reason: 'too-complex' })).toBe(1);
    expect(await counter('spillway_collector_kv_dropped_total', { reason: 'not-json' })).toBeGreaterThanOrEqual(1);
    expect(sink.events().at(-1)).toEqual([KV_CLEARED]);
  });
});
