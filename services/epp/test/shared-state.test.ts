/**
 * Active-active EPPs sharing picks in flight, prefix placements and penalties over core NATS
 * (docs/sharing.md): real EPPs against one private nats-server, real ext_proc streams, the
 * shared-state channel as deployed. Each test uses zones of its own, so pods and EPPs of earlier
 * tests never take part.
 */
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { connect } from '@nats-io/transport-node';
import { jetstreamManager } from '@nats-io/jetstream';
import { ensureStream } from '@spillway/bus';
import type { NatsConnection } from '@nats-io/nats-core';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { encodeStateBatch, stateSubjectFor, type StateBatch } from '@spillway/events';
import type { RunningEpp } from '@spillway/epp';
import { eventually, startNatsServer, type NatsServerHandle } from '@spillway/testkit';
import {
  completion,
  destinationOf,
  EnvoyStream,
  envoyRequestMessages,
  extProcClient,
  startTestEpp,
  TestPublisher,
  type PodSpec,
} from './helpers.js';

let nats: NatsServerHandle;
let publisher: TestPublisher;
let raw: NatsConnection;
const running: RunningEpp[] = [];
const streams: EnvoyStream[] = [];
const published: PodSpec[] = [];
const dir = mkdtempSync(join(tmpdir(), 'spillway-shared-'));
const config = join(dir, 'epp.yaml');
// Fast heartbeats and a short peer timeout keep the tests short; samples never go stale meanwhile.
writeFileSync(config, 'sharedState: { heartbeatMs: 100, peerTimeoutMs: 1000, warmStartMs: 3000 }\n');
const ARGS = ['--config', config, '--metrics-stale-ms', '600000'];

beforeAll(async () => {
  nats = await startNatsServer({ forcePrivate: true });
  publisher = await TestPublisher.connect(nats.url);
  raw = await connect({ servers: nats.url });
  // The stream exists before any pod is published (an EPP would create it too).
  await ensureStream(await jetstreamManager(raw), { name: 'SPILLWAY' });
});

afterEach(async () => {
  for (const stream of streams.splice(0)) stream.close();
  for (const epp of running.splice(0)) await epp.close();
  // The next test's EPPs (in locality mode, any zone) must not see this test's pods as candidates.
  await publisher.pods(published.splice(0).map((p) => ({ ...p, ready: false })));
});

afterAll(async () => {
  await raw?.close();
  await publisher?.close();
  await nats?.stop();
});

/** An EPP of `zone`, ready, its view holding `pods`. */
async function epp(zone: string, pods: readonly PodSpec[], extra: string[] = []): Promise<RunningEpp> {
  const started = await startTestEpp(nats.url, zone, [...ARGS, ...extra]);
  running.push(started);
  await started.ready;
  await eventually(() =>
    expect(pods.every((p) => started.core.fleet.get('llama', p.zone, p.pod)?.metrics?.waitingRequests === p.waiting)).toBe(true),
  );
  return started;
}

/** Pods with a persistent queue (two samples), so every pick since the latest sample counts as load. */
async function backlogged(zone: string, count: number, waiting = 1, base = 1): Promise<PodSpec[]> {
  const pods = Array.from({ length: count }, (_, i): PodSpec => ({
    pod: `${zone}-${i}`,
    zone,
    address: `10.${base}.0.${i + 1}:8000`,
    waiting,
    running: 8,
  }));
  await publisher.pods(pods, Date.now() - 200);
  await publisher.pods(pods);
  published.push(...pods);
  return pods;
}

/** One request through `target` held open after its pick (no response yet): the primary it was sent to. */
async function hold(target: RunningEpp, subset: string[], body?: string): Promise<string> {
  const stream = new EnvoyStream(extProcClient(target.grpcPort));
  streams.push(stream);
  stream.send(envoyRequestMessages({ subset, body }));
  const [first] = await stream.waitFor(1);
  const header = destinationOf(first).header;
  if (header === undefined) throw new Error('no destination');
  return header.split(',')[0] as string;
}

const unsampled = (target: RunningEpp, zone: string, pod: string) => target.core.fleet.get('llama', zone, pod)?.unsampledPicks ?? 0;
const peersOf = (target: RunningEpp) => target.core.scheduler.shared.peerCount;

describe('two EPPs of one zone', () => {
  it('a burst held open through EPP 1 makes EPP 2 avoid the endpoints EPP 1 loaded, before any new sample', async () => {
    const pods = await backlogged('zone-a', 4);
    const addresses = pods.map((p) => p.address);
    const [one, two] = [await epp('zone-a', pods), await epp('zone-a', pods)];
    await eventually(() => expect([peersOf(one), peersOf(two)]).toEqual([1, 1]));

    const loaded = addresses.slice(0, 2);
    for (let i = 0; i < 6; i++) expect(loaded).toContain(await hold(one, loaded));
    await eventually(() => expect(unsampled(two, 'zone-a', 'zone-a-0') + unsampled(two, 'zone-a', 'zone-a-1')).toBe(6));
    // No sample has arrived since: EPP 2 knows only from EPP 1.
    const picked: string[] = [];
    // Short prompts: EPP 2's own picks put next to no prefill ahead of its next ones, so what tells
    // the endpoints apart is what EPP 1 put there.
    for (let i = 0; i < 4; i++) picked.push(await hold(two, addresses, completion('llama', `Hello ${i}`)));
    expect(picked.every((a) => a === addresses[2] || a === addresses[3])).toBe(true);
    expect(two.sharedState?.entriesIn).toBeGreaterThanOrEqual(6);
    expect(two.core.scheduler.shared.remoteInFlight).toBe(6);

    // The requests end: their releases reach EPP 2 too.
    for (const stream of streams.splice(0)) stream.close();
    await eventually(() => expect(two.core.scheduler.shared.remoteInFlight).toBe(0));
  }, 30_000);

  it('a prompt routed by EPP 1 goes to the same endpoint through EPP 2 (prefix placement shared)', async () => {
    const pods = await backlogged('zone-p', 4, 0, 2);
    const addresses = pods.map((p) => p.address);
    const [one, two] = [await epp('zone-p', pods), await epp('zone-p', pods)];
    await eventually(() => expect([peersOf(one), peersOf(two)]).toEqual([1, 1]));
    for (let k = 0; k < 3; k++) {
      const body = completion('llama', `Prompt family ${k}: ${'you answer questions about the sea. '.repeat(60)}`);
      const first = await hold(one, addresses, body);
      const blocks = one.core.scheduler.prefixIndexBlocks;
      await eventually(() => expect(two.core.scheduler.prefixIndexBlocks).toBe(blocks));
      expect(await hold(two, addresses, body)).toBe(first);
    }
  }, 30_000);
});

describe('across zones', () => {
  it("zone-a's EPP spilling into zone-b and zone-b's EPP see each other's picks", async () => {
    const hot = await backlogged('zone-c', 2, 40, 3); // the hot zone: a long queue
    const remote = await backlogged('zone-d', 2, 1, 4);
    const a = await epp('zone-c', [...hot, ...remote], ['--subset-mode', 'locality']);
    const b = await epp('zone-d', [...hot, ...remote]);
    await eventually(() => expect([peersOf(a), peersOf(b)]).toEqual([1, 1]));
    const spilled: string[] = [];
    for (let i = 0; i < 3; i++) spilled.push(await hold(a, ['10.3.0.1:8000', '10.3.0.2:8000']));
    expect(spilled.every((address) => remote.some((p) => p.address === address))).toBe(true);
    await eventually(() => expect(unsampled(b, 'zone-d', 'zone-d-0') + unsampled(b, 'zone-d', 'zone-d-1')).toBe(3));
    // And back: zone-d's own EPP loads zone-d-1; zone-c's EPP sees it.
    const before = unsampled(a, 'zone-d', 'zone-d-1');
    await hold(b, ['10.4.0.2:8000']);
    await eventually(() => expect(unsampled(a, 'zone-d', 'zone-d-1')).toBe(before + 1));
  }, 30_000);
});

describe('warm start', () => {
  it('a lone EPP starts empty at once; a restarted EPP routes a known prefix to the same endpoint as before its restart', async () => {
    const pods = await backlogged('zone-w', 4, 0, 5);
    const addresses = pods.map((p) => p.address);
    const one = await epp('zone-w', pods);
    expect(one.sharedState).toMatchObject({ warmStartPeers: 0, warmStartEntries: 0 });
    const two = await epp('zone-w', pods);
    await eventually(() => expect([peersOf(one), peersOf(two)]).toEqual([1, 1]));

    const prompts = [0, 1, 2].map((k) => completion('llama', `Tenant ${k} system prompt: ${'be brief and exact. '.repeat(80)}`));
    const before: string[] = [];
    for (const body of prompts) before.push(await hold(one, addresses, body));
    await eventually(() => expect(two.core.scheduler.prefixIndexBlocks).toBe(one.core.scheduler.prefixIndexBlocks));
    for (const stream of streams.splice(0)) stream.close();

    // EPP 1 restarts: a new process, a new id, an empty index until its peers answer.
    await one.close();
    running.splice(running.indexOf(one), 1);
    const restarted = await epp('zone-w', pods);
    expect(restarted.eppId).not.toBe(one.eppId);
    expect(restarted.sharedState?.warmStartPeers).toBe(1);
    expect(restarted.core.scheduler.prefixIndexBlocks).toBe(two.core.scheduler.prefixIndexBlocks);
    const after: string[] = [];
    for (const body of prompts) after.push(await hold(restarted, addresses, body));
    expect(after).toEqual(before);
    expect(two.sharedState?.syncAnswered).toBe(1);
  }, 40_000);
});

describe('bad input', () => {
  it('malformed, forged-origin, replayed and misplaced batches are dropped and counted, and change nothing', async () => {
    const target = await epp('zone-x', await backlogged('zone-x', 2, 1, 6));
    const evil = { pool: 'llama', zone: 'zone-x', epp: 'evil' };
    const batch = (overrides: Partial<StateBatch>): StateBatch => ({
      v: 1,
      ...evil,
      seq: 1,
      sentAt: Date.now(),
      entries: [[1, 1, 'zone-x', 'zone-x-0', Date.now(), []]],
      ...overrides,
    });
    raw.publish(stateSubjectFor(evil), new TextEncoder().encode('{"not":"msgpack"'));
    raw.publish(stateSubjectFor(evil), encodeStateBatch(batch({ v: 2 as 1 })));
    raw.publish(stateSubjectFor(evil), encodeStateBatch(batch({ epp: 'victim' })));
    raw.publish(stateSubjectFor(evil), encodeStateBatch(batch({ snapshot: { last: true } })));
    const many = Array.from({ length: 20 }, (_, i): StateBatch['entries'][number] => [
      1,
      i,
      'zone-x',
      'zone-x-0',
      Date.now(),
      Array.from({ length: 8000 }, (_, k) => k % 100),
    ]);
    raw.publish(stateSubjectFor(evil), encodeStateBatch(batch({ entries: many })));
    // One good batch, then the same sequence number again: a replay.
    raw.publish(stateSubjectFor(evil), encodeStateBatch(batch({ seq: 5 })));
    raw.publish(stateSubjectFor(evil), encodeStateBatch(batch({ seq: 5, entries: [[1, 2, 'zone-x', 'zone-x-1', Date.now(), []]] })));
    await raw.flush();
    await eventually(() =>
      expect(target.sharedState?.rejected).toEqual({
        'not-msgpack': 1,
        invalid: 1,
        'subject-mismatch': 1,
        'misplaced-snapshot': 1,
        'too-many-hashes': 1,
        replayed: 1,
      }),
    );
    // Only the good batch applied: one pick on zone-x-0, none on zone-x-1.
    expect(unsampled(target, 'zone-x', 'zone-x-0')).toBe(1);
    expect(unsampled(target, 'zone-x', 'zone-x-1')).toBe(0);
    const text = await (await fetch(`http://127.0.0.1:${target.metricsPort}/metrics`)).text();
    for (const reason of ['not-msgpack', 'invalid', 'subject-mismatch', 'misplaced-snapshot', 'too-many-hashes', 'replayed']) {
      expect(text).toContain(`spillway_shared_state_rejected_total{reason="${reason}"} 1`);
    }
    expect(text).toMatch(/spillway_shared_state_peers 1/);
  }, 30_000);

  it('--share-state false: nothing is published or taken in, and no shared-state metrics', async () => {
    const pods = await backlogged('zone-o', 2, 1, 7);
    const on = await epp('zone-o', pods);
    const off = await epp('zone-o', pods, ['--share-state', 'false']);
    expect(off.sharedState).toBeUndefined();
    await hold(on, [pods[0]?.address as string]);
    await hold(off, [pods[1]?.address as string]);
    // Three more heartbeats from the sharing EPP: time enough for the other's pick to have arrived, were it sent.
    const sent = on.sharedState?.batchesOut ?? 0;
    await eventually(() => expect(on.sharedState?.batchesOut).toBeGreaterThanOrEqual(sent + 3));
    expect(on.sharedState?.batchesIn).toBe(0);
    expect(peersOf(on)).toBe(0);
    expect(unsampled(on, 'zone-o', 'zone-o-1')).toBe(0);
    expect(unsampled(off, 'zone-o', 'zone-o-0')).toBe(0);
    const text = await (await fetch(`http://127.0.0.1:${off.metricsPort}/metrics`)).text();
    expect(text).not.toContain('spillway_shared_state');
  }, 30_000);
});
