/**
 * spillway-sim's KV events, read as an outside consumer would: a ZeroMQ SUB socket and msgpackr (a
 * msgpack decoder independent of the one the simulator encodes with), checked field by field
 * against the layout of vLLM's kv_events.py (docs/kv-events.md).
 */
import { tokenize } from '@spillway/engine';
import { loadTokenizer } from '@spillway/tokenizer';
import { Unpackr } from 'msgpackr';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Dealer, Subscriber } from 'zeromq';
import { rankEndpoint, startSim } from '../src/index.js';
import type { SimServer } from '../src/index.js';
import { post } from './helpers.js';

const MODEL = 'm';
const BLOCK = 16;
const unpackr = new Unpackr({ useRecords: false, int64AsType: 'bigint' });

interface Message {
  topic: string;
  seq: bigint;
  batch: unknown[];
}

/** vLLM's field order (kv_events.py): map-encoded events (the newest vLLM) read as the array form. */
const FIELDS: Record<string, string[]> = {
  BlockStored: [
    'block_hashes',
    'parent_block_hash',
    'token_ids',
    'block_size',
    'lora_id',
    'medium',
    'lora_name',
    'extra_keys',
    'group_idx',
    'kv_cache_spec_kind',
    'kv_cache_spec_sliding_window',
  ],
  BlockRemoved: ['block_hashes', 'medium', 'group_idx'],
  AllBlocksCleared: [],
};
/** Fields without a default (always sent) per event: the array form ends with the last one at least. */
const REQUIRED: Record<string, number> = { BlockStored: 7, BlockRemoved: 2, AllBlocksCleared: 0 };
function asArray(e: unknown): unknown[] {
  if (Array.isArray(e)) return e;
  const m = e as Record<string, unknown>;
  const type = m['type'] as string;
  const out = [type, ...(FIELDS[type] ?? []).map((f) => m[f] ?? null)];
  while (out.length > (REQUIRED[type] ?? 0) + 1 && out[out.length - 1] === null) out.pop();
  return out;
}

/** Collects every message a SUB socket receives (events as arrays, whichever struct encoding the batch used). */
async function subscribe(endpoint: string): Promise<{ messages: Message[]; stored: Set<unknown>; sub: Subscriber }> {
  const sub = new Subscriber({ linger: 0 });
  sub.connect(endpoint);
  sub.subscribe();
  const messages: Message[] = [];
  /** Every block hash ever reported stored. */
  const stored = new Set<unknown>();
  void (async () => {
    try {
      for await (const frames of sub) {
        expect(frames).toHaveLength(3);
        const [topic, seq, payload] = frames as [Buffer, Buffer, Buffer];
        expect(seq.byteLength).toBe(8);
        const batch = unpackr.unpack(payload) as unknown[];
        batch[1] = (batch[1] as unknown[]).map(asArray);
        for (const e of batch[1] as unknown[][]) if (e[0] === 'BlockStored') for (const h of e[1] as unknown[]) stored.add(h);
        messages.push({ topic: topic.toString('utf8'), seq: seq.readBigUInt64BE(0), batch });
      }
    } catch {
      // closed
    }
  })();
  return { messages, stored, sub };
}

async function until<T>(fn: () => T | undefined, what: string, timeoutMs = 10_000): Promise<T> {
  const end = Date.now() + timeoutMs;
  for (;;) {
    const v = fn();
    if (v !== undefined) return v;
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

/** Events of every batch received so far, in order. */
const eventsOf = (messages: Message[]) => messages.flatMap((m) => m.batch[1] as unknown[][]);

describe('spillway-sim --kv-events', () => {
  let sim: SimServer;
  let messages: Message[];
  let everStored: Set<unknown>;
  let sub: Subscriber;

  beforeAll(async () => {
    sim = await startSim({
      port: 0,
      preset: 'test',
      numBlocks: 12,
      maxNumSeqs: 1,
      timeScale: 200,
      model: MODEL,
      lora: ['sql-lora'],
      logLevel: 'silent',
      admin: true,
      kvEvents: 'tcp://127.0.0.1:*',
      kvReplay: 'tcp://127.0.0.1:*',
      kvTopic: 'kv@pod-a@m',
      // vLLM's array_like structs, whose positions this suite checks (the map form: below).
      kvEventsLayout: 'array',
    });
    ({ messages, stored: everStored, sub } = await subscribe(sim.kvEvents?.endpoint as string));
    // A SUB socket's subscription reaches the PUB socket asynchronously: publish until one arrives.
    await until(() => (messages.length > 0 ? true : void sim.engine.resetPrefixCache()), 'the subscription to take effect');
    messages.length = 0;
  });
  afterAll(async () => {
    sub.close();
    await sim.close();
  });

  it('publishes BlockStored with the prompt token ids, laid out as vLLM does', async () => {
    const prompt = 'x'.repeat(4 * 4 * BLOCK + 7); // 4 full blocks of toy tokens plus a partial one
    const res = await post(`${sim.url}/v1/completions`, { model: MODEL, prompt, max_tokens: 2 });
    expect(res.status).toBe(200);
    const msg = await until(() => messages.find((m) => (m.batch[1] as unknown[][]).some((e) => e[0] === 'BlockStored')), 'BlockStored');
    expect(msg.topic).toBe('kv@pod-a@m');
    const [ts, events, rank] = msg.batch;
    expect(typeof ts).toBe('number');
    expect(Math.abs((ts as number) * 1000 - Date.now())).toBeLessThan(60_000);
    expect(rank).toBe(0);
    const stored = (events as unknown[][]).find((e) => e[0] === 'BlockStored') as unknown[];
    // Every field vLLM fills; the sliding window, at its default (nil), is left out (omit_defaults).
    expect(stored).toHaveLength(11);
    const [tag, hashes, parent, tokenIds, blockSize, loraId, medium, loraName, extraKeys, group, kind] = stored;
    expect(tag).toBe('BlockStored');
    expect(hashes).toHaveLength(4);
    for (const h of hashes as unknown[]) expect(Number.isSafeInteger(h)).toBe(true);
    expect(parent).toBeNull();
    expect(tokenIds).toEqual(Array.from(tokenize(prompt).slice(0, 4 * BLOCK)));
    expect(blockSize).toBe(BLOCK);
    expect(loraId).toBeNull();
    expect(medium).toBe('GPU');
    expect(loraName).toBeNull();
    expect(extraKeys).toEqual([null, null, null, null]);
    expect(group).toBe(0);
    expect(kind).toBe('full_attention');
  });

  it('chains a continuation to its parent and names the LoRA adapter', async () => {
    messages.length = 0;
    const prompt = 'y'.repeat(2 * 4 * BLOCK);
    await post(`${sim.url}/v1/completions`, { model: 'sql-lora', prompt, max_tokens: 1 });
    await post(`${sim.url}/v1/completions`, { model: 'sql-lora', prompt: prompt + 'z'.repeat(4 * BLOCK), max_tokens: 1 });
    const stored = await until(() => {
      const s = eventsOf(messages).filter((e) => e[0] === 'BlockStored');
      return s.length >= 2 ? s : undefined;
    }, 'two BlockStored');
    expect(stored[0]?.[5]).toBe(1);
    expect(stored[0]?.[7]).toBe('sql-lora');
    // vLLM folds the adapter's name into each block's extra keys.
    expect(stored[0]?.[8]).toEqual([['sql-lora'], ['sql-lora']]);
    expect(stored[1]?.[1]).toHaveLength(1);
    expect(stored[1]?.[2]).toBe((stored[0]?.[1] as number[])[1]); // parent = the last block of the first prompt
    expect(stored[1]?.[3]).toEqual(Array.from(tokenize('z'.repeat(4 * BLOCK))));
  });

  it('numbers batches consecutively and reports evictions as BlockRemoved', async () => {
    messages.length = 0;
    // 12 blocks in all: three different 4-block prompts cannot all stay cached.
    for (const c of ['p', 'q', 'r', 's'])
      await post(`${sim.url}/v1/completions`, { model: MODEL, prompt: c.repeat(4 * 4 * BLOCK), max_tokens: 1 });
    const removed = await until(() => eventsOf(messages).find((e) => e[0] === 'BlockRemoved'), 'BlockRemoved');
    expect(removed).toHaveLength(4);
    expect(removed[2]).toBe('GPU');
    expect(removed[3]).toBe(0);
    expect((removed[1] as unknown[]).length).toBeGreaterThan(0);
    // Every removed block was reported stored before (in this test or the ones above).
    for (const h of removed[1] as unknown[]) expect(everStored.has(h)).toBe(true);
    for (let i = 1; i < messages.length; i++) expect(messages[i]?.seq).toBe((messages[i - 1]?.seq as bigint) + 1n);
  });

  it('reports a prefix-cache reset as AllBlocksCleared', async () => {
    messages.length = 0;
    const res = await post(`${sim.url}/reset_prefix_cache`, {});
    expect(res.status).toBe(200);
    const cleared = await until(() => eventsOf(messages).find((e) => e[0] === 'AllBlocksCleared'), 'AllBlocksCleared');
    expect(cleared).toEqual(['AllBlocksCleared']);
  });

  it('replays buffered batches from a sequence number on the ROUTER socket', async () => {
    const dealer = new Dealer({ linger: 0 });
    dealer.connect(sim.kvEvents?.replayEndpoint as string);
    const from = 2n;
    const start = Buffer.alloc(8);
    start.writeBigUInt64BE(from);
    await dealer.send(['', start]);
    const replayed: Array<[bigint, Buffer]> = [];
    for (;;) {
      const [empty, seq, payload] = (await dealer.receive()) as [Buffer, Buffer, Buffer];
      expect(empty.byteLength).toBe(0);
      if (seq.readBigInt64BE(0) === -1n) {
        expect(payload.byteLength).toBe(0);
        break;
      }
      replayed.push([seq.readBigUInt64BE(0), payload]);
    }
    dealer.close();
    expect(replayed.length).toBeGreaterThan(3);
    replayed.forEach(([seq], i) => expect(seq).toBe(from + BigInt(i)));
    for (const [, payload] of replayed) expect(Array.isArray(unpackr.unpack(payload))).toBe(true);
    expect(sim.kvEvents?.counters.replays).toBe(1);
  });
});

describe('spillway-sim --tokenizer', () => {
  it('keys chat blocks by the real tokenizer ids through the chat template', async () => {
    const sim = await startSim({
      port: 0,
      preset: 'test',
      timeScale: 200,
      model: MODEL,
      logLevel: 'silent',
      kvEvents: 'tcp://127.0.0.1:*',
      tokenizer: 'qwen3',
    });
    const { messages, sub } = await subscribe(sim.kvEvents?.endpoint as string);
    try {
      const chat = [
        { role: 'system', content: 'You answer questions about the shared context. '.repeat(20) },
        { role: 'user', content: 'What is in it?' },
      ];
      const expected = Array.from(loadTokenizer({ preset: 'qwen3' }).encodeChat(chat));
      // Until the subscription is live, earlier requests' events are lost; repeat with fresh prompts.
      const stored = await until(() => {
        const s = eventsOf(messages).find((e) => e[0] === 'BlockStored');
        // Fire and forget: one still in flight when the test closes the simulator fails, harmlessly.
        if (!s)
          void post(`${sim.url}/v1/chat/completions`, { model: MODEL, messages: chat, max_tokens: 1 })
            .then(() => sim.engine.resetPrefixCache())
            .catch(() => undefined);
        return s;
      }, 'BlockStored from a chat request');
      const blocks = Math.floor(expected.length / BLOCK);
      expect(stored[3]).toEqual(expected.slice(0, blocks * BLOCK));
      expect(stored[1]).toHaveLength(blocks);
    } finally {
      sub.close();
      await sim.close();
    }
  });

  it('refuses to start with a bad tokenizer, naming it', async () => {
    await expect(startSim({ port: 0, logLevel: 'silent', tokenizer: '/nonexistent/tokenizer.json' })).rejects.toThrow(
      /cannot read tokenizer.json \/nonexistent\/tokenizer.json/,
    );
  });
});

describe('spillway-sim --data-parallel-size', () => {
  it("binds rank r's endpoints on the configured port + r, as vLLM's offset_endpoint_port", () => {
    expect(rankEndpoint('tcp://*:5557', 0)).toBe('tcp://*:5557');
    expect(rankEndpoint('tcp://*:5557', 3)).toBe('tcp://*:5560');
    expect(rankEndpoint('tcp://[::1]:5557', 1)).toBe('tcp://[::1]:5558');
    expect(rankEndpoint('tcp://127.0.0.1:*', 2)).toBe('tcp://127.0.0.1:*');
    // A list names each rank's endpoint (ranks past it: the last one's port + offset).
    expect(rankEndpoint('tcp://a:7001,tcp://a:7050', 1)).toBe('tcp://a:7050');
    expect(rankEndpoint('tcp://a:7001,tcp://a:7050', 3)).toBe('tcp://a:7052');
  });

  it('runs one engine per rank, each publishing its own stream, map-encoded as the newest vLLM', async () => {
    const sim = await startSim({
      port: 0,
      preset: 'test',
      timeScale: 200,
      model: MODEL,
      logLevel: 'silent',
      // A free port per rank (the offset rule, base + rank, is checked on its own below: bound here it could collide).
      kvEvents: 'tcp://127.0.0.1:*',
      dataParallelSize: 2,
    });
    const subs = await Promise.all(sim.kvPublishers.map((p) => subscribe(p.endpoint)));
    const raw: unknown[][] = [];
    const rawSub = new Subscriber({ linger: 0 });
    rawSub.connect(sim.kvPublishers[1]?.endpoint as string);
    rawSub.subscribe();
    void (async () => {
      try {
        for await (const [, , payload] of rawSub) raw.push(unpackr.unpack(payload as Buffer) as unknown[]);
      } catch {
        // closed
      }
    })();
    try {
      expect(new Set(sim.kvPublishers.map((p) => p.endpoint)).size).toBe(2);
      expect(sim.engines).toHaveLength(2);
      // The X-data-parallel-rank header sends a request to one rank: only that rank's stream reports its blocks.
      const prompt = (rank: number) => `rank ${rank} `.repeat(5 * BLOCK);
      const stored = (rank: number) =>
        until(() => {
          const s = eventsOf(subs[rank]?.messages ?? []).find((e) => e[0] === 'BlockStored');
          if (!s) {
            void fetch(`${sim.url}/v1/completions`, {
              method: 'POST',
              headers: { 'content-type': 'application/json', 'x-data-parallel-rank': String(rank) },
              body: JSON.stringify({ model: MODEL, prompt: prompt(rank), max_tokens: 1 }),
            }).then((r) => r.text().then(() => sim.engines[rank]?.resetPrefixCache()));
          }
          return s;
        }, `BlockStored of rank ${rank}`);
      const s0 = await stored(0);
      const s1 = await stored(1);
      expect(s0[3]).toEqual(Array.from(tokenize(prompt(0)).slice(0, (s0[1] as unknown[]).length * BLOCK)));
      expect(s1[3]).toEqual(Array.from(tokenize(prompt(1)).slice(0, (s1[1] as unknown[]).length * BLOCK)));
      for (const m of subs[0]?.messages ?? []) expect(m.batch[2]).toBe(0);
      for (const m of subs[1]?.messages ?? []) expect(m.batch[2]).toBe(1);
      // Rank 1's stream never carries rank 0's blocks.
      for (const e of eventsOf(subs[1]?.messages ?? [])) if (e[0] === 'BlockStored') expect(e[3]).not.toEqual(s0[3]);
      // The newest vLLM's encoding: each event a map with its tag in `type`, defaults left out.
      const event = (raw.flatMap((b) => b[1] as unknown[]).find((e) => (e as { type?: string }).type === 'BlockStored') ?? {}) as Record<
        string,
        unknown
      >;
      expect(Object.keys(event)).toEqual([
        'type',
        'block_hashes',
        'parent_block_hash',
        'token_ids',
        'block_size',
        'lora_id',
        'medium',
        'lora_name',
        'extra_keys',
        'group_idx',
        'kv_cache_spec_kind',
      ]);
      // A header naming no rank is refused.
      const bad = await fetch(`${sim.url}/v1/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'x-data-parallel-rank': '2' },
        body: JSON.stringify({ model: MODEL, prompt: 'x', max_tokens: 1 }),
      });
      expect(bad.status).toBe(400);
      // Metrics: one series per engine, labelled as vLLM labels them.
      const text = await (await fetch(`${sim.url}/metrics`)).text();
      expect(text).toMatch(/vllm:num_requests_running\{model_name="m",engine="1"\}/);
      expect(text).toMatch(/vllm:cache_config_info\{block_size="16",num_gpu_blocks="\d+",enable_prefix_caching="True",engine="1"\} 1/);
      expect(text).not.toContain('vllm:gpu_cache_usage_perc');
    } finally {
      rawSub.close();
      for (const s of subs) s.sub.close();
      await sim.close();
    }
  });
});

describe('spillway-sim --kv-sliding-window, --kv-offload-blocks and cache_salt', () => {
  let sim: SimServer;
  let messages: Message[];
  let sub: Subscriber;

  beforeAll(async () => {
    sim = await startSim({
      port: 0,
      preset: 'test',
      numBlocks: 12,
      maxNumSeqs: 1,
      timeScale: 200,
      model: MODEL,
      lora: ['sql-lora'],
      logLevel: 'silent',
      admin: true,
      kvEvents: 'tcp://127.0.0.1:*',
      kvSlidingWindow: 32,
      kvOffloadBlocks: 6,
    });
    ({ messages, sub } = await subscribe(sim.kvEvents?.endpoint as string));
    await until(() => (messages.length > 0 ? true : void sim.engine.resetPrefixCache()), 'the subscription to take effect');
    messages.length = 0;
  });
  afterAll(async () => {
    sub.close();
    await sim.close();
  });

  const storedOf = (medium: string, group: number) =>
    eventsOf(messages).filter((e) => e[0] === 'BlockStored' && e[6] === medium && e[9] === group);
  const removedOf = (medium: string, group: number) =>
    eventsOf(messages).filter((e) => e[0] === 'BlockRemoved' && e[2] === medium && e[3] === group);

  it("a hybrid model's blocks in both groups under the same hashes, and a CPU copy of each", async () => {
    const prompt = 'h'.repeat(4 * 4 * BLOCK);
    expect((await post(`${sim.url}/v1/completions`, { model: MODEL, prompt, max_tokens: 1 })).status).toBe(200);
    const cpu = await until(() => storedOf('CPU', 0)[0], 'a CPU-tier BlockStored');
    const [full] = storedOf('GPU', 0);
    const [window] = storedOf('GPU', 1);
    expect(full?.[1]).toHaveLength(4);
    // Group 1: the same blocks, hashes and tokens, of kind sliding_window with its window.
    expect(window?.slice(1, 8)).toEqual(full?.slice(1, 8));
    expect(window?.slice(9)).toEqual([1, 'sliding_window', 32]);
    expect(full?.slice(9)).toEqual([0, 'full_attention']);
    // The CPU copy: the same blocks on the CPU medium, in the full-attention group.
    expect(cpu.slice(1, 6)).toEqual(full?.slice(1, 6));
    expect(cpu.slice(6)).toEqual(['CPU', null, [null, null, null, null], 0, 'full_attention']);
  });

  it("evictions: the engine's from both groups; the CPU tier's of its own, least recently offloaded first", async () => {
    messages.length = 0;
    for (const c of ['i', 'j', 'k', 'l'])
      await post(`${sim.url}/v1/completions`, { model: MODEL, prompt: c.repeat(4 * 4 * BLOCK), max_tokens: 1 });
    const gpu = await until(() => (removedOf('GPU', 0).length > 0 ? removedOf('GPU', 0) : undefined), 'a GPU BlockRemoved');
    await until(() => (removedOf('GPU', 1).length > 0 ? true : undefined), 'the window group removal');
    const hashes = (events: unknown[][]) => events.flatMap((e) => e[1] as unknown[]);
    expect(hashes(removedOf('GPU', 1))).toEqual(hashes(gpu));
    // Six CPU blocks hold the first prompt's four; four prompts of four more push out 14, oldest first.
    const cpuGone = await until(
      () => (hashes(removedOf('CPU', 0)).length >= 14 ? hashes(removedOf('CPU', 0)) : undefined),
      'CPU evictions',
    );
    expect(cpuGone).toHaveLength(14);
    const offloaded = hashes(storedOf('CPU', 0));
    expect(offloaded).toHaveLength(16);
    expect(cpuGone.slice(4)).toEqual(offloaded.slice(0, 10));
  });

  it('a cache salt keys the first block apart and is its extra key; an empty salt is refused as vLLM refuses it', async () => {
    messages.length = 0;
    const prompt = 's'.repeat(2 * 4 * BLOCK);
    await post(`${sim.url}/v1/completions`, { model: MODEL, prompt, max_tokens: 1 });
    await post(`${sim.url}/v1/completions`, { model: MODEL, prompt, max_tokens: 1, cache_salt: 'tenant-1' });
    await post(`${sim.url}/v1/completions`, { model: 'sql-lora', prompt, max_tokens: 1, cache_salt: 'tenant-1' });
    const [plain, salted, saltedLora] = await until(
      () => (storedOf('GPU', 0).length >= 3 ? storedOf('GPU', 0) : undefined),
      'three BlockStored',
    );
    // The same tokens, stored again (no hit on the unsalted blocks) under other hashes.
    expect(salted?.[3]).toEqual(plain?.[3]);
    expect(salted?.[1]).toHaveLength(2);
    expect((salted?.[1] as unknown[]).some((h) => (plain?.[1] as unknown[]).includes(h))).toBe(false);
    expect(plain?.[8]).toEqual([null, null]);
    expect(salted?.[8]).toEqual([['tenant-1'], null]);
    // vLLM's order: the LoRA name, then the salt on the prompt's first block only.
    expect(saltedLora?.[8]).toEqual([['sql-lora', 'tenant-1'], ['sql-lora']]);
    const refused = await post(`${sim.url}/v1/completions`, { model: MODEL, prompt, max_tokens: 1, cache_salt: '' });
    expect(refused.status).toBe(400);
    expect(await refused.text()).toContain("Parameter 'cache_salt' must be a non-empty string");
  });
});
