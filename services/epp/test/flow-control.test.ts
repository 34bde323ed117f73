/**
 * Flow control end to end (docs/flow-control.md): real EPPs against a private nats-server, real
 * ext_proc streams. Pods are "full" with a persistent queue (two samples of 2 waiting: far past
 * the 10 ms hold budget); a sample with an empty queue shows room for one pick per pod (the pick
 * after it waits for the first one's prefill, past the budget), so each such sample releases
 * exactly one held request, in queue order. Each test uses pods and zones of its own.
 */
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { jetstreamManager } from '@nats-io/jetstream';
import { connect } from '@nats-io/transport-node';
import pino from 'pino';
import { ensureStream } from '@spillway/bus';
import { Fleet } from '@spillway/fleet';
import { Scheduler } from '@spillway/scheduler';
import { FlowControl, type HeldStream } from '../src/request/flow-control.js';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { loadEppConfig, startEpp, type RunningEpp } from '@spillway/epp';
import { eventually, startNatsServer, type NatsServerHandle } from '@spillway/testkit';
import {
  completion,
  destinationOf,
  EnvoyStream,
  envoyRequestMessages,
  extProcClient,
  immediateOf,
  POOL,
  TestPublisher,
  type PodSpec,
} from './helpers.js';

let nats: NatsServerHandle;
let publisher: TestPublisher;
const running: RunningEpp[] = [];
const streams: EnvoyStream[] = [];
const dir = mkdtempSync(join(tmpdir(), 'spillway-flow-'));

const OBJECTIVES = 'objectives: { chat: { priority: 10 }, batch: { priority: -1 } }\n';
const FLOW = (over: Record<string, number | boolean> = {}): string =>
  `flowControl: ${JSON.stringify({ enabled: true, holdAboveMs: 10, maxHoldMs: 60_000, ...over })}\n`;

beforeAll(async () => {
  nats = await startNatsServer({ forcePrivate: true });
  publisher = await TestPublisher.connect(nats.url);
  // The stream exists before any pod is published (an EPP would create it too).
  const raw = await connect({ servers: nats.url });
  await ensureStream(await jetstreamManager(raw), { name: 'SPILLWAY' });
  await raw.close();
});

afterEach(async () => {
  for (const stream of streams.splice(0)) stream.close();
  for (const epp of running.splice(0)) await epp.close();
});

afterAll(async () => {
  await publisher?.close();
  await nats?.stop();
});

let files = 0;
/** A ready EPP of `zone` whose config file is `text` (and whose view holds `pods`). */
async function epp(zone: string, text: string, pods: readonly PodSpec[], extra: string[] = []): Promise<RunningEpp> {
  const path = join(dir, `epp-${files++}.yaml`);
  writeFileSync(path, text);
  const config = loadEppConfig(
    [
      '--pool',
      POOL,
      '--zone',
      zone,
      '--nats',
      nats.url,
      '--host',
      '127.0.0.1',
      '--grpc-port',
      '0',
      '--health-port',
      '0',
      '--metrics-port',
      '0',
      '--config',
      path,
      '--metrics-stale-ms',
      '600000',
      ...extra,
    ],
    {},
  );
  if (!config) throw new Error('unexpected --help');
  const started = await startEpp(config, { logger: pino({ level: 'silent' }), tickMs: 50, configPollMs: 100 });
  running.push(started);
  await started.ready;
  // The stream replays each pod's latest sample only: two more of the full batch teach this EPP its size.
  await publisher.pods([...pods], Date.now() - 100);
  await publisher.pods([...pods]);
  await eventually(() =>
    expect(
      pods.every((p) => {
        const endpoint = started.core.fleet.get(POOL, p.zone, p.pod);
        return endpoint?.metrics?.waitingRequests === p.waiting && endpoint?.batchCapacity === p.running;
      }),
    ).toBe(true),
  );
  return { ...started, configPath: path } as RunningEpp & { configPath: string };
}

/**
 * Pods whose batch holds one request (a queue behind one running over two samples: the EPP learns
 * the batch size), full: every pick is held until a sample shows room.
 */
async function full(zone: string, count: number, base: number): Promise<PodSpec[]> {
  const pods = Array.from({ length: count }, (_, i): PodSpec => ({
    pod: `${zone}-${i}`,
    zone,
    address: `10.${base}.0.${i + 1}:8000`,
    waiting: 2,
    running: 1,
  }));
  await publisher.pods(pods, Date.now() - 200);
  await publisher.pods(pods);
  return pods;
}

/** A sample with an empty batch: room for one more pick per pod (its batch holds one). */
async function room(pods: readonly PodSpec[]): Promise<void> {
  await publisher.pods(pods.map((p) => ({ ...p, waiting: 0, running: 0 })));
}

interface Sent {
  readonly name: string;
  readonly stream: EnvoyStream;
}

/** Sends one request through `target`; `order` records the names of streams as their first reply arrives. */
function send(
  target: RunningEpp,
  name: string,
  subset: string[],
  options: { objective?: string; fairness?: string; body?: string },
  order: string[],
): Sent {
  const stream = new EnvoyStream(extProcClient(target.grpcPort));
  streams.push(stream);
  stream.call.once('data', () => order.push(name));
  const headers: Record<string, string> = {};
  if (options.objective !== undefined) headers['x-gateway-inference-objective'] = options.objective;
  if (options.fairness !== undefined) headers['x-gateway-inference-fairness-id'] = options.fairness;
  stream.send(envoyRequestMessages({ subset, headers, body: options.body ?? completion() }));
  return { name, stream };
}

const held = (target: RunningEpp): number => target.core.control.flow.size;

async function metric(target: RunningEpp, name: string, labels: Record<string, string>): Promise<number> {
  const metrics = await target.metrics.registry.getMetricsAsJSON();
  const found = metrics.find((m) => m.name === name);
  const values = (found?.values ?? []) as { value: number; labels: Record<string, string | number> }[];
  return values.filter((v) => Object.entries(labels).every(([k, want]) => String(v.labels[k]) === want)).reduce((a, v) => a + v.value, 0);
}

describe('flow control in the EPP', () => {
  it('holds every request while all pods are full, then dispatches one per sample with room: highest band first, round robin across flows, FCFS within one', async () => {
    const pods = await full('fc-a', 1, 11);
    const target = await epp('fc-a', OBJECTIVES + FLOW(), pods);
    const subset = pods.map((p) => p.address);
    const order: string[] = [];
    const sent: Sent[] = [];
    // Arrival order: four of tenant A, two of tenant B, then two high-priority requests.
    for (const name of ['a1', 'a2', 'a3', 'a4']) sent.push(send(target, name, subset, { fairness: 'tenant-a' }, order));
    await eventually(() => expect(held(target)).toBe(4));
    for (const name of ['b1', 'b2']) sent.push(send(target, name, subset, { fairness: 'tenant-b' }, order));
    await eventually(() => expect(held(target)).toBe(6));
    for (const name of ['h1', 'h2']) sent.push(send(target, name, subset, { objective: 'chat', fairness: 'tenant-a' }, order));
    await eventually(() => expect(held(target)).toBe(8));
    // Held: nothing answered, the streams open, the queue in the metrics.
    await new Promise((resolve) => setTimeout(resolve, 300));
    expect(order).toEqual([]);
    expect(await metric(target, 'spillway_flow_control_held_requests', { band: '10' })).toBe(2);
    expect(await metric(target, 'spillway_flow_control_held_requests', { band: '0' })).toBe(6);

    for (let n = 1; n <= 8; n++) {
      await room(pods);
      await eventually(() => expect(order.length).toBe(n));
      await publisher.pods(pods.map((p) => ({ ...p, waiting: 2 })));
    }
    expect(order).toEqual(['h1', 'h2', 'a1', 'b1', 'a2', 'b2', 'a3', 'a4']);
    for (const s of sent) expect(destinationOf(s.stream.responses[0]).header).toBe(subset[0]);
    expect(held(target)).toBe(0);
    expect(await metric(target, 'spillway_flow_control_requests_total', { outcome: 'dispatched' })).toBe(8);
    expect(await metric(target, 'spillway_flow_control_requests_total', { outcome: 'held', flow: 'tenant-b' })).toBe(2);
  }, 60_000);

  it('answers a request held past maxHoldMs with 503 queue_timeout, and a sheddable one with 429', async () => {
    const pods = await full('fc-t', 2, 12);
    const target = await epp('fc-t', OBJECTIVES + FLOW({ maxHoldMs: 400 }), pods);
    const subset = pods.map((p) => p.address);
    const order: string[] = [];
    const normal = send(target, 'normal', subset, {}, order);
    const sheddable = send(target, 'sheddable', subset, { objective: 'batch' }, order);
    await eventually(() => expect(order.length).toBe(2));
    const answers = Object.fromEntries([normal, sheddable].map((s) => [s.name, immediateOf(s.stream.responses[0])]));
    expect(answers['normal']?.status).toBe(503);
    expect(answers['normal']?.body.error.code).toBe('queue_timeout');
    expect(answers['normal']?.contentType).toBe('application/json');
    expect(answers['sheddable']?.status).toBe(429);
    expect(answers['sheddable']?.body.error.code).toBe('queue_timeout');
    expect(await normal.stream.ended).toBeUndefined();
    expect(held(target)).toBe(0);
    expect(await metric(target, 'spillway_flow_control_requests_total', { outcome: 'expired' })).toBe(2);
  }, 60_000);

  it('a held stream that goes away leaves the queue at once, and is never dispatched', async () => {
    const pods = await full('fc-c', 1, 13);
    const target = await epp('fc-c', OBJECTIVES + FLOW(), pods);
    const subset = pods.map((p) => p.address);
    const order: string[] = [];
    const gone = send(target, 'gone', subset, {}, order);
    const stays = send(target, 'stays', subset, {}, order);
    await eventually(() => expect(held(target)).toBe(2));
    gone.stream.call.cancel();
    await eventually(() => expect(held(target)).toBe(1));
    expect(await metric(target, 'spillway_flow_control_requests_total', { outcome: 'cancelled' })).toBe(1);
    await room(pods);
    await eventually(() => expect(order).toEqual(['stays']));
    expect(destinationOf(stays.stream.responses[0]).header).toBe(subset[0]);
  }, 60_000);

  it('keeps the queue within maxHeldBytes under a flood of distinct fairness ids; a higher band evicts the newest low request', async () => {
    const pods = await full('fc-b', 1, 14);
    // Each request holds its ~2 KB body and 1 KiB of stream overhead: about six fit in 20,000 bytes.
    const target = await epp('fc-b', OBJECTIVES + FLOW({ maxHeldBytes: 20_000 }), pods);
    const subset = pods.map((p) => p.address);
    const order: string[] = [];
    const body = completion('llama', 'x'.repeat(2000));
    const flood = Array.from({ length: 30 }, (_, i) => send(target, `f${i}`, subset, { fairness: `flood-${i}`, body }, order));
    await eventually(() => expect(held(target) + order.length).toBe(30));
    const kept = held(target);
    expect(kept).toBeGreaterThan(3);
    expect(kept).toBeLessThan(8);
    expect(target.core.control.flow.bytes).toBeLessThanOrEqual(20_000);
    for (const refused of flood.filter((f) => order.includes(f.name))) {
      const answer = immediateOf(refused.stream.responses[0]);
      expect(answer?.status).toBe(503);
      expect(answer?.body.error.code).toBe('queue_full');
    }
    expect(await metric(target, 'spillway_flow_control_requests_total', { outcome: 'refused' })).toBe(30 - kept);
    // Fairness ids past the first 16 share one label.
    expect(await metric(target, 'spillway_flow_control_requests_total', { flow: 'other' })).toBeGreaterThan(0);
    // A high-priority request takes the place of the newest held low one.
    const newestHeld = flood.filter((f) => !order.includes(f.name)).at(-1) as Sent;
    send(target, 'high', subset, { objective: 'chat', body }, order);
    await eventually(() => expect(order).toContain(newestHeld.name));
    expect(immediateOf(newestHeld.stream.responses[0])?.body.error.code).toBe('queue_full');
    expect(held(target)).toBe(kept);
    expect(target.core.control.flow.bytes).toBeLessThanOrEqual(20_000);
    await room(pods);
    await eventually(() => expect(order.at(-1)).toBe('high'));
  }, 60_000);

  it('held requests survive a config reload; turning flow control off dispatches them', async () => {
    const pods = await full('fc-r', 1, 15);
    const target = (await epp('fc-r', OBJECTIVES + FLOW(), pods)) as RunningEpp & { configPath: string };
    const subset = pods.map((p) => p.address);
    const order: string[] = [];
    send(target, 'one', subset, {}, order);
    send(target, 'two', subset, {}, order);
    await eventually(() => expect(held(target)).toBe(2));
    // A reload that changes another number keeps them held.
    writeFileSync(target.configPath, OBJECTIVES + FLOW({ maxHeldRequests: 50 }));
    await eventually(() => expect(target.core.scheduler.config.flowControl.maxHeldRequests).toBe(50));
    expect(held(target)).toBe(2);
    expect(order).toEqual([]);
    writeFileSync(target.configPath, OBJECTIVES + 'flowControl: { enabled: false }\n');
    await eventually(() => expect(order).toEqual(['one', 'two']));
    expect(held(target)).toBe(0);
  }, 60_000);
});

describe('flow control with two EPPs of one zone', () => {
  it('a sample with room for one request releases one, not one per EPP: the later EPP sees the earlier one’s pick', async () => {
    const pods = await full('fc-2', 1, 16);
    // A peer is kept for a minute, far past the time this test watches, even on a machine that
    // stalls it for seconds.
    const text =
      OBJECTIVES +
      // A second of stagger: the later EPP's pass waits for the earlier one's batch even on a machine
      // busy enough to delay it by most of that.
      FLOW({ dispatchStaggerMs: 1000 }) +
      'sharedState: { enabled: true, heartbeatMs: 100, peerTimeoutMs: 60000, warmStartMs: 2000 }\n';
    const one = await epp('fc-2', text, pods);
    const two = await epp('fc-2', text, pods);
    await eventually(() => expect([one.core.scheduler.shared.peerCount, two.core.scheduler.shared.peerCount]).toEqual([1, 1]));
    const subset = pods.map((p) => p.address);
    const order: string[] = [];
    for (let i = 0; i < 3; i++) {
      send(one, `one-${i}`, subset, {}, order);
      send(two, `two-${i}`, subset, {}, order);
    }
    await eventually(() => expect(held(one) + held(two)).toBe(6));
    await room(pods);
    await eventually(() => expect(order.length).toBe(1));
    // Long enough for the other EPP's turn (its rank × (batch delay + 1 s of stagger)), the peer's
    // batch and the passes its heartbeats trigger.
    await new Promise((resolve) => setTimeout(resolve, 2500));
    expect(order.length).toBe(1);
    expect(held(one) + held(two)).toBe(5);
  }, 60_000);
});

describe('flow control in process', () => {
  /** One pod with a persisting queue (so every pick holds), a scheduler on it, and flow control counting its picks. */
  function heldPod(dispatchDelayMs?: () => number): { flow: FlowControl; picks: () => number; subset: string[]; scheduler: Scheduler } {
    const now = Date.now();
    const fleet = new Fleet();
    const pod = { zone: 'fc-i', pod: 'fc-i-0', address: '10.17.0.1:8000' };
    fleet.apply({ v: 1, kind: 'readiness', pool: POOL, ...pod, ready: true, observedAt: now - 1000 }, now - 1000);
    for (const at of [now - 200, now]) {
      fleet.apply(
        {
          v: 1,
          kind: 'metrics',
          pool: POOL,
          zone: pod.zone,
          pod: pod.pod,
          observedAt: at,
          waitingRequests: 2,
          runningRequests: 0,
          kvCacheUsage: 0.1,
        },
        at,
      );
    }
    const scheduler = new Scheduler({ fleet, pool: POOL, zone: 'fc-i', config: { flowControl: { enabled: true, holdAboveMs: 10 } } });
    let picks = 0;
    const flow = new FlowControl({
      pick: (request) => {
        picks++;
        return scheduler.pick(request, Date.now());
      },
      config: scheduler.config.flowControl,
      observer: { flowHeld: () => undefined, flowLeft: () => undefined },
      now: Date.now,
      ...(dispatchDelayMs === undefined ? {} : { dispatchDelayMs }),
    });
    return { flow, picks: () => picks, subset: [pod.address], scheduler };
  }

  function heldStream(name: string, subset: string[], answered: string[]): HeldStream {
    return {
      pickRequest: () => ({ model: 'llama', subset }),
      prepared: undefined,
      dispatch: () => answered.push(`${name} dispatched`),
      refuse: (_status, code) => answered.push(`${name} ${code}`),
    };
  }

  it('makes one dispatch pass however many events arrive in one turn of the event loop', async () => {
    const { flow, picks, subset, scheduler } = heldPod();
    const answered: string[] = [];
    const first = scheduler.pick({ model: 'llama', subset }, Date.now());
    expect(first.hold).toBe(true);
    for (const name of ['one', 'two', 'three'])
      expect(flow.hold(heldStream(name, subset, answered), { priority: 0, flow: undefined, bytes: 100 })).toBeDefined();
    for (let i = 0; i < 1000; i++) flow.onRoom(i % 2 === 0 ? 'sample' : 'peer');
    await new Promise((resolve) => setImmediate(resolve));
    await new Promise((resolve) => setImmediate(resolve));
    // One pass: the head's pick still finds no room, and the pass stops there.
    expect(picks()).toBe(1);
    expect(answered).toEqual([]);
    flow.close();
    expect(answered).toEqual(['one shutting_down', 'two shutting_down', 'three shutting_down']);
    expect(flow.size).toBe(0);
  });
  it('a peer batch during a sample’s wait runs no pass of its own: it folds into that pass', async () => {
    // A long turn (1.5 s), so a stalled machine cannot make the sample's pass run before the check.
    const { flow, picks, subset } = heldPod(() => 1500);
    const answered: string[] = [];
    expect(flow.hold(heldStream('one', subset, answered), { priority: 0, flow: undefined, bytes: 100 })).toBeDefined();
    flow.onRoom('sample');
    for (let i = 0; i < 10; i++) flow.onRoom('peer');
    await new Promise((resolve) => setTimeout(resolve, 50));
    // The peers' batches waited for the sample's turn.
    expect(picks()).toBe(0);
    await eventually(() => expect(picks()).toBe(1), 10_000);
    // With no sample pass pending, a peer's batch runs a pass at once.
    flow.onRoom('peer');
    await new Promise((resolve) => setImmediate(resolve));
    await new Promise((resolve) => setImmediate(resolve));
    expect(picks()).toBe(2);
    flow.close();
    expect(answered).toEqual(['one shutting_down']);
  });
});
