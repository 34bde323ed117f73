/**
 * `spillway_request_phase_seconds` (docs/metrics.md): where the EPP's time per request goes, timed
 * by the request path through its observer. Which phases each kind of request passes through
 * (routed, refused on its body, refused by the pick, without a body, tokenized), and that the
 * phases nest as documented: `decide` spans parse, tokenization, pick and answer. Real EPPs
 * in-process, a private nats-server, real ext_proc streams; no timing is asserted.
 */
import { connect } from '@nats-io/transport-node';
import { jetstreamManager } from '@nats-io/jetstream';
import type { NatsConnection } from '@nats-io/nats-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ensureStream } from '@spillway/bus';
import { encodeKvBatch, kvSubjectFor } from '@spillway/events';
import type { RunningEpp } from '@spillway/epp';
import { eventually, startNatsServer, type NatsServerHandle } from '@spillway/testkit';
import {
  completion,
  destinationOf,
  EnvoyStream,
  envoyRequestMessages,
  extProcClient,
  immediateOf,
  POOL,
  startTestEpp,
  TestPublisher,
} from './helpers.js';

const PHASES = ['receive', 'parse', 'tokenize', 'pick', 'answer', 'decide'] as const;
type Phase = (typeof PHASES)[number];
type Phases = Record<Phase, { count: number; sum: number }>;

let nats: NatsServerHandle;
let publisher: TestPublisher;
let raw: NatsConnection;
const running: RunningEpp[] = [];

beforeAll(async () => {
  nats = await startNatsServer({ forcePrivate: true });
  publisher = await TestPublisher.connect(nats.url);
  raw = await connect({ servers: nats.url });
  await ensureStream(await jetstreamManager(raw), { name: 'SPILLWAY' });
});

afterAll(async () => {
  for (const epp of running) await epp.close();
  await raw?.close();
  await publisher?.close();
  await nats?.stop();
});

async function startEpp(zone: string, extra: string[] = []): Promise<{ epp: RunningEpp; address: string }> {
  const address = `10.${zone === 'ph-a' ? 1 : 2}.0.1:8000`;
  const epp = await startTestEpp(nats.url, zone, ['--metrics-stale-ms', '600000', ...extra]);
  running.push(epp);
  await publisher.pods([{ pod: `${zone}-0`, zone, address, waiting: 0, running: 0 }]);
  await epp.ready;
  await eventually(() => expect(epp.core.fleet.pool(POOL)?.readyCount).toBeGreaterThanOrEqual(1));
  return { epp, address };
}

async function phases(epp: RunningEpp): Promise<Phases> {
  const text = await (await fetch(`http://127.0.0.1:${epp.metricsPort}/metrics`)).text();
  const read = (phase: Phase, what: 'count' | 'sum'): number =>
    Number(new RegExp(`^spillway_request_phase_seconds_${what}\\{phase="${phase}"\\} (\\S+)$`, 'm').exec(text)?.[1] ?? Number.NaN);
  return Object.fromEntries(PHASES.map((p) => [p, { count: read(p, 'count'), sum: read(p, 'sum') }])) as Phases;
}

/** Counts of each phase since `before`. */
function counted(before: Phases, after: Phases): Record<Phase, number> {
  return Object.fromEntries(PHASES.map((p) => [p, after[p].count - before[p].count])) as Record<Phase, number>;
}

/** One request through an ext_proc stream; the first reply. */
async function send(epp: RunningEpp, options: Parameters<typeof envoyRequestMessages>[0]) {
  const client = extProcClient(epp.grpcPort);
  const stream = new EnvoyStream(client);
  try {
    stream.send(envoyRequestMessages(options));
    const [first] = await stream.waitFor(1);
    return first;
  } finally {
    stream.close();
    client.close();
  }
}

describe('spillway_request_phase_seconds', () => {
  it('a routed request passes through receive, parse, pick, answer and decide; refusals and body-less requests only through what they reach', async () => {
    const { epp } = await startEpp('ph-a');
    const zero = await phases(epp);
    // Every series exists from the start (a fixed label set), at zero.
    for (const phase of PHASES) expect(zero[phase]).toEqual({ count: 0, sum: 0 });

    for (let i = 0; i < 3; i++) {
      const reply = await send(epp, { body: completion('llama', `Question ${i}: `.repeat(200)), chunks: 4 });
      expect(destinationOf(reply).header).toBeDefined();
    }
    const routed = await phases(epp);
    expect(counted(zero, routed)).toEqual({ receive: 3, parse: 3, tokenize: 0, pick: 3, answer: 3, decide: 3 });
    // decide runs from the end of the body to the destination written: it spans the phases in it.
    expect(routed.decide.sum).toBeGreaterThanOrEqual(routed.parse.sum + routed.pick.sum + routed.answer.sum);

    expect(immediateOf(await send(epp, { body: 'not json' }))?.status).toBe(400);
    const afterBadBody = await phases(epp);
    expect(counted(routed, afterBadBody)).toEqual({ receive: 1, parse: 1, tokenize: 0, pick: 0, answer: 0, decide: 0 });

    expect(immediateOf(await send(epp, { body: completion('llama'), subset: ['10.9.9.9:8000'] }))?.status).toBe(503);
    const afterNoEndpoint = await phases(epp);
    expect(counted(afterBadBody, afterNoEndpoint)).toEqual({ receive: 1, parse: 1, tokenize: 0, pick: 1, answer: 0, decide: 0 });

    // No body (end of stream on the headers): picked and answered, nothing received or parsed.
    expect(destinationOf(await send(epp, { path: '/v1/models' })).header).toBeDefined();
    expect(counted(afterNoEndpoint, await phases(epp))).toEqual({ receive: 0, parse: 0, tokenize: 0, pick: 1, answer: 1, decide: 0 });
  });

  it('with a tokenizer and KV data, the prompt’s tokenization is a phase of its own inside decide', async () => {
    const { epp } = await startEpp('ph-b', ['--tokenizer', '*=qwen3']);
    // Tokenizing waits for KV data: one pod reports an empty cache.
    raw.publish(
      kvSubjectFor({ pool: POOL, zone: 'ph-b', pod: 'ph-b-0' }),
      encodeKvBatch({ v: 1, pool: POOL, zone: 'ph-b', pod: 'ph-b-0', seq: 0, observedAt: Date.now(), blockSize: 16, events: [[3]] }),
    );
    await raw.flush();
    await eventually(() => expect(epp.core.scheduler.kvIndexStats.pods).toBe(1));
    const zero = await phases(epp);
    const body = JSON.stringify({ model: 'llama', messages: [{ role: 'user', content: 'How wide is the spillway? '.repeat(50) }] });
    await eventually(async () => {
      expect(destinationOf(await send(epp, { path: '/v1/chat/completions', body })).header).toBeDefined();
      expect((await phases(epp)).tokenize.count).toBeGreaterThan(0);
    });
    const after = await phases(epp);
    const n = counted(zero, after);
    expect(n.tokenize).toBeGreaterThan(0);
    expect(n.decide).toBe(n.pick);
    expect(after.decide.sum).toBeGreaterThanOrEqual(after.parse.sum + after.tokenize.sum + after.pick.sum + after.answer.sum);
  }, 60_000);
});
