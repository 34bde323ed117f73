import { kvBlockKeys } from '@spillway/events';
import { EppKv } from '@spillway/epp';
import { Fleet } from '@spillway/fleet';
import { BodyAccumulator, prepareRequest, routedResponses } from '@spillway/protocol';
import { Scheduler, type PickRequest } from '@spillway/scheduler';
import type { PromptTokenizer } from '@spillway/tokenizer';
import { percentile } from './part.js';

/**
 * The kv part's 100,000-token prompt (issue 29: body in → destination out, p50 < 2.5 ms, tokenizer
 * on), through the EPP's request-path functions in the order its ext_proc stream calls them
 * (request/stream.ts `onRequestBody` → `completeRequest` → `route` → control.ts `pick` → `send`):
 * BodyAccumulator, prepareRequest, EppKv.promptTokenIds, scheduler.pick with the ids,
 * routedResponses. In process: no gRPC framing, no socket (extproc-phases measures those).
 */
const POOL = 'bench';
const ZONES = ['zone-a', 'zone-b', 'zone-c'];
const PODS = 24;
const BLOCK = 16;
const TARGET_TOKENS = 100_000;
/** Envoy forwards a body in frames; the EPP's stream gets them one message each. */
const CHUNK_BYTES = 16 * 1024;
/** `--tokenize-max-chars`: the EPP's default, and what a user sets to tokenize a 100,000-token prompt. */
const DEFAULT_MAX_CHARS = 256 * 1024;
const RAISED_MAX_CHARS = 1 << 20;
const RAISED = '--tokenize-max-chars 1048576';
const MAX_BODY_BYTES = 8 * 1024 * 1024;

export interface HugeCase {
  name: string;
  flags: string;
  outcome: string;
  /** µs */
  p50: number;
  p99: number;
  cpuUs: number;
  tokens: number;
  requests: number;
  /** p50 of each step, µs: body in and parsed, prompt tokens, pick + destination. */
  steps: { parse: number; tokenize: number; pick: number };
  /** Whether the target is judged on this row. */
  judged: boolean;
}

const words =
  'river mill dam crest chute basin flood gate spill weir culvert reservoir inflow outflow design storm return period freeboard'.split(' ');

/** `count` words of the kv part's kind of text, different for each seed. */
function longContext(seed: number, count: number): string {
  let s = seed * 104729 + 7919;
  const out: string[] = [`Archive ${seed}.`];
  for (let i = 0; i < count; i++) {
    s = (s * 16807) % 2147483647;
    out.push(words[s % words.length] as string);
    if (i % 17 === 16) out.push('.\n');
  }
  return out.join(' ');
}

const question = (i: number) => `Question ${i}: which gate opens first when the inflow exceeds the design storm of ${100 + i} years?`;

function body(system: string, i: number): Uint8Array {
  return new TextEncoder().encode(
    JSON.stringify({
      model: 'llama',
      max_tokens: 64,
      messages: [
        { role: 'system', content: system },
        { role: 'user', content: question(i) },
      ],
    }),
  );
}

export async function hugePromptCases(options: {
  quick: boolean;
  tokenizer: PromptTokenizer;
}): Promise<{ cases: HugeCase[]; promptTokens: number; promptChars: number; bodyBytes: number }> {
  const { tokenizer } = options;
  // Words for ~100,000 tokens (the text's tokens per word measured on a sample).
  const sample = longContext(0, 2000);
  const perWord = tokenizer.encodeText(sample).length / 2000;
  const wordCount = Math.round(TARGET_TOKENS / perWord);
  const shared = longContext(1, wordCount);
  const sharedIds = tokenizer.encodeChat([{ role: 'system', content: shared }]);
  const keys = kvBlockKeys(sharedIds, BLOCK);

  const t0 = 1_764_420_000_000;
  const fleet = new Fleet();
  for (let i = 0; i < PODS; i++) {
    const zone = ZONES[i % ZONES.length] as string;
    fleet.apply(
      { v: 1, kind: 'readiness', pool: POOL, zone, pod: `pod-${i}`, address: `10.0.0.${i + 1}:8000`, ready: true, observedAt: t0 - 1000 },
      t0 - 1000,
    );
    fleet.apply(
      {
        v: 1,
        kind: 'metrics',
        pool: POOL,
        zone,
        pod: `pod-${i}`,
        observedAt: t0,
        waitingRequests: i % 3,
        runningRequests: 4 + (i % 5),
        kvCacheUsage: 0.4,
        cache: { blockSize: BLOCK, numBlocks: 200_000 },
      },
      t0,
    );
  }
  const scheduler = new Scheduler({ fleet, pool: POOL, zone: 'zone-a', region: 'r1', seed: 1, config: { subsetMode: 'locality' } });
  // The shared context's blocks on 3 pods, as their servers would report them.
  for (let r = 0; r < 3; r++) {
    const pod = r * 7;
    scheduler.applyKvBatch(
      {
        v: 1,
        pool: POOL,
        zone: ZONES[pod % ZONES.length] as string,
        pod: `pod-${pod}`,
        seq: r,
        observedAt: t0,
        blockSize: BLOCK,
        events: [[1, keys]],
      },
      t0,
    );
  }
  const headers = { path: '/v1/chat/completions', modelRewrite: undefined };
  const yieldToLoop = (): Promise<void> => new Promise((resolve) => setImmediate(resolve));

  interface Plan {
    name: string;
    flags: string;
    maxChars: number;
    /** A context never seen for each request (else the shared one, cached). */
    fresh: boolean;
    requests: number;
    judged: boolean;
  }
  const run = async ({ name, flags, maxChars, fresh, requests, judged }: Plan): Promise<HugeCase> => {
    const kv = new EppKv(
      { enabled: true, pool: POOL, tokenizers: new Map([['*', tokenizer]]), cacheBytes: 64 * 1024 * 1024, maxChars },
      scheduler,
    );
    // A running EPP is past PromptTokens' first misses, which are all checked at once (tokenized
    // twice): small conversations take them, so the measured misses are the steady state's.
    for (let i = 0; i < 17; i++) {
      const small = prepareRequest(body(`warm-up ${i}`, i), headers, undefined, Math.random);
      if (small.ok) kv.promptTokenIds(small.request);
    }
    const warmup = fresh ? 2 : 3;
    const latencies = new Float64Array(requests);
    const parse = new Float64Array(requests);
    const tokenize = new Float64Array(requests);
    const picking = new Float64Array(requests);
    let cpu = 0;
    let tokens = 0;
    const outcomes = new Set<string>();
    for (let i = -warmup; i < requests; i++) {
      const bytes = body(fresh ? longContext(1000 + i + warmup, wordCount) : shared, i + warmup);
      const startCpu = process.cpuUsage();
      const started = process.hrtime.bigint();
      const accumulator = new BodyAccumulator(MAX_BODY_BYTES);
      for (let at = 0; at < bytes.length; at += CHUNK_BYTES) accumulator.push(bytes.subarray(at, at + CHUNK_BYTES));
      const prepared = prepareRequest(accumulator.take(), headers, undefined, Math.random);
      if (!prepared.ok) throw new Error(prepared.error.message);
      const request = prepared.request;
      const parsedAt = process.hrtime.bigint();
      const tokenized = kv.promptTokenIds(request);
      const tokenizedAt = process.hrtime.bigint();
      const pick: PickRequest = { model: request.model, prompt: request.prompt, promptTokenIds: tokenized?.ids };
      const decision = scheduler.pick(pick, t0 + i);
      if (decision.status !== 'routed') throw new Error(`not routed: ${decision.status}`);
      routedResponses({ mode: 'full-duplex', destination: decision.destination, body: request.body, bodyChanged: request.bodyChanged });
      const elapsed = Number(process.hrtime.bigint() - started) / 1000;
      scheduler.commit(decision, t0 + i);
      scheduler.release(decision);
      await yieldToLoop();
      const used = process.cpuUsage(startCpu);
      if (i >= 0) {
        latencies[i] = elapsed;
        const parseUs = Number(parsedAt - started) / 1000;
        const tokenizeUs = Number(tokenizedAt - parsedAt) / 1000;
        parse[i] = parseUs;
        tokenize[i] = tokenizeUs;
        picking[i] = elapsed - parseUs - tokenizeUs;
        cpu += used.user + used.system;
        tokens += tokenized?.ids.length ?? 0;
        outcomes.add(tokenized?.outcome ?? `no (${kv.counters.tokenizeSkipped > 0 ? 'over --tokenize-max-chars' : 'no data'})`);
      }
    }
    for (const a of [latencies, parse, tokenize, picking]) a.sort();
    return {
      steps: { parse: percentile(parse, 50), tokenize: percentile(tokenize, 50), pick: percentile(picking, 50) },
      name,
      flags,
      outcome: [...outcomes].join(', '),
      p50: percentile(latencies, 50),
      p99: percentile(latencies, 99),
      cpuUs: cpu / requests,
      tokens: tokens / requests,
      requests,
      judged,
    };
  };

  const n = (full: number, quick: number) => (options.quick ? quick : full);
  const cases = [
    await run({
      name: 'EPP defaults: not tokenized',
      flags: '(defaults)',
      maxChars: DEFAULT_MAX_CHARS,
      fresh: true,
      requests: n(40, 10),
      judged: false,
    }),
    await run({
      name: 'cold: the whole prompt tokenized',
      flags: RAISED,
      maxChars: RAISED_MAX_CHARS,
      fresh: true,
      requests: n(40, 10),
      judged: true,
    }),
    await run({
      name: 'warm: context cached, question tokenized',
      flags: RAISED,
      maxChars: RAISED_MAX_CHARS,
      fresh: false,
      requests: n(300, 50),
      judged: true,
    }),
  ];
  return { cases, promptTokens: sharedIds.length, promptChars: shared.length, bodyBytes: body(shared, 0).length };
}
