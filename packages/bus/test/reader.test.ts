import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { jetstreamManager, type JetStreamManager } from '@nats-io/jetstream';
import type { NatsConnection } from '@nats-io/nats-core';
import { encodeEvent, MAX_EVENT_BYTES, MAX_KV_SNAPSHOT_KEYS, subjectFor, type KvSnapshotEvent, type SpillwayEvent } from '@spillway/events';
import { Fleet, snapshotPool } from '@spillway/fleet';
import { eventually, startNatsServer, type NatsServerHandle } from '@spillway/testkit';
import { connectNats, ensureStream, EventPublisher, startReader, type EventReader, type ReaderSink, type Logger } from '../src/index.js';
import { metrics, podEvents, publishAll, readiness, waitForStored, zoneOf } from './helpers.js';

let server: NatsServerHandle;
let nc: NatsConnection;
let jsm: JetStreamManager;
let publisher: EventPublisher;
const readers: EventReader[] = [];

beforeAll(async () => {
  server = await startNatsServer({ forcePrivate: true });
  nc = await connectNats({ servers: [server.url] });
  jsm = await jetstreamManager(nc);
  await ensureStream(jsm);
  publisher = new EventPublisher(nc);
});

afterAll(async () => {
  await Promise.all(readers.map((r) => r.close()));
  await nc?.close();
  await server?.stop();
});

function reader(pool: string, fleet: ReaderSink, extra: { logger?: Logger; now?: () => number } = {}): EventReader {
  const r = startReader(nc, { pool, sink: fleet, ...extra });
  readers.push(r);
  return r;
}

function fedDirectly(events: readonly SpillwayEvent[]): Fleet {
  const fleet = new Fleet();
  // Received when observed: these tests are about replay, not clock skew.
  for (const e of events) fleet.apply(e, e.observedAt);
  return fleet;
}

async function stored(): Promise<number> {
  return (await jsm.streams.info('SPILLWAY')).state.messages;
}

describe('EventReader', () => {
  it('replays the stream into the same view as applying the events directly', async () => {
    const t = Date.now();
    // Older values first: the stream keeps only the last per subject, and so must the view.
    const old = podEvents('replay', 0, 30, t - 5_000);
    const latest = [
      ...podEvents('replay', 0, 30, t),
      readiness('replay', 3, t + 1, { ready: false }),
      readiness('replay', 4, t + 1, { ready: false, deleted: true }),
    ];
    const before = await stored();
    await publishAll(publisher, old);
    await publishAll(publisher, latest);
    await waitForStored(jsm, 'SPILLWAY', before + 60);

    const fleet = new Fleet();
    const r = reader('replay', fleet);
    await r.caughtUp;
    expect(r.status.caughtUp).toBe(true);
    expect(snapshotPool(fleet, 'replay')).toEqual(snapshotPool(fedDirectly([...old, ...latest]), 'replay'));
    expect(fleet.get('replay', zoneOf(3), 'vllm-3')?.ready).toBe(false);
    expect(fleet.pool('replay')?.readyCount).toBe(28);
    // last_per_subject: 30 readiness + 30 metrics subjects, the superseded values are not replayed.
    expect(r.status.received).toBe(60);
    expect(fleet.counters.rejected).toBe(0);
    expect(r.status.pending).toBe(0);
    expect(r.status.lastReceivedAt).toBeGreaterThanOrEqual(t);
    expect(r.status.lastDelayMs).toBeGreaterThanOrEqual(0);
  });

  it('tells how far behind the stream the reader was at each message (its backlog)', async () => {
    const t = Date.now();
    const before = await stored();
    await publishAll(publisher, podEvents('backlog', 0, 10, t));
    await waitForStored(jsm, 'SPILLWAY', before + 20);
    const fleet = new Fleet();
    const seen: number[] = [];
    const r: EventReader = reader('backlog', {
      apply: (event, receivedAt) => {
        seen.push(r.status.pending);
        return fleet.apply(event, receivedAt);
      },
      recordRejected: () => fleet.recordRejected(),
    });
    await r.caughtUp;
    // 20 messages replayed: 19 were still ahead of the first, none of the last.
    expect(seen).toEqual(Array.from({ length: 20 }, (_, i) => 19 - i));
  });

  it('is caught up at once when the pool has nothing in the stream', async () => {
    const fleet = new Fleet();
    const r = reader('empty-pool', fleet);
    await r.caughtUp;
    expect(r.status).toMatchObject({
      caughtUp: true,
      received: 0,
      connection: 'connected',
      staleSince: undefined,
      pending: 0,
      lastReceivedAt: undefined,
      lastDelayMs: undefined,
    });
  });

  it('follows live after the replay, and a later reader reaches the same view', async () => {
    const t = Date.now();
    const first = new Fleet();
    const r1 = reader('live', first);
    await r1.caughtUp;
    const events = podEvents('live', 0, 20, t);
    await publishAll(publisher, events);
    await eventually(() => expect(snapshotPool(first, 'live')).toEqual(snapshotPool(fedDirectly(events), 'live')), 15_000);

    const update = metrics('live', 5, t + 100, { waitingRequests: 42 });
    publisher.publishMetrics(update);
    await eventually(() => expect(first.get('live', zoneOf(5), 'vllm-5')?.metrics?.waitingRequests).toBe(42), 15_000);

    const second = new Fleet();
    const r2 = reader('live', second);
    await r2.caughtUp;
    expect(snapshotPool(second, 'live')).toEqual(snapshotPool(first, 'live'));
    // Both keep following.
    await publisher.publishReadiness(readiness('live', 99, t + 200));
    await eventually(() => {
      expect(first.get('live', zoneOf(99), 'vllm-99')?.ready).toBe(true);
      expect(second.get('live', zoneOf(99), 'vllm-99')?.ready).toBe(true);
    }, 15_000);
  });

  it('uses the stream timestamp while replaying and the local clock once live', async () => {
    const t = Date.now();
    const before = await stored();
    await publishAll(publisher, podEvents('clock', 0, 2, t));
    await waitForStored(jsm, 'SPILLWAY', before + 4);
    // This reader's clock runs a minute ahead: replayed samples must look a minute old (stale).
    const skew = 60_000;
    const now = () => Date.now() + skew;
    const fleet = new Fleet();
    const r = reader('clock', fleet, { now });
    await r.caughtUp;
    const replayed = fleet.get('clock', zoneOf(0), 'vllm-0');
    expect(replayed && fleet.metricsAge(replayed, now())).toBeGreaterThan(skew / 2);
    expect(replayed && fleet.isFresh(replayed, now())).toBe(false);

    publisher.publishMetrics(metrics('clock', 0, t + 500));
    await eventually(() => expect(fleet.get('clock', zoneOf(0), 'vllm-0')?.metrics?.observedAt).toBe(t + 500), 15_000);
    const live = fleet.get('clock', zoneOf(0), 'vllm-0');
    expect(live && fleet.metricsAge(live, now())).toBeLessThan(skew / 2);
  });

  it('drops 200 malformed messages, counts them by reason, logs each subject once, and keeps going', async () => {
    const t = Date.now();
    const warnings: Record<string, unknown>[] = [];
    const logger: Logger = { warn: (fields) => warnings.push(fields) };
    const fleet = new Fleet();
    const r = reader('bad', fleet, { logger });
    await r.caughtUp;

    const good = (i: number) => readiness('bad', i, t);
    const subject = (i: number, kind: 'readiness' | 'metrics' = 'readiness') =>
      subjectFor({ pool: 'bad', zone: 'zone-a', pod: `bad-${i}`, kind });
    const payloads: [string, Uint8Array | string][] = [];
    for (let i = 0; i < 200; i++) {
      const kind = i % 5;
      const base = { ...good(i), zone: 'zone-a', pod: `bad-${i}` };
      if (kind === 0) payloads.push([subject(i), `not json {${i}`]);
      else if (kind === 1) payloads.push([subject(i), JSON.stringify({ ...base, ready: 'yes', address: 42 })]);
      else if (kind === 2) payloads.push([subject(i), JSON.stringify({ ...base, v: 99 })]);
      else if (kind === 3) payloads.push([subject(i), JSON.stringify({ ...base, labels: { big: 'x'.repeat(70 * 1024) } })]);
      else payloads.push([subject(i), encodeEvent({ ...base, pod: `someone-else-${i}` })]);
    }
    // One subject twice: counted twice, logged once.
    payloads.push([subject(0), 'still not json']);
    for (const [s, p] of payloads) nc.publish(s, p);
    // Valid events published after the garbage must still arrive.
    await publishAll(publisher, [good(1000), metrics('bad', 1000, t)]);

    await eventually(() => {
      expect(fleet.get('bad', zoneOf(1000), 'vllm-1000')?.ready).toBe(true);
      expect(fleet.get('bad', zoneOf(1000), 'vllm-1000')?.metrics).toBeDefined();
      expect(r.status.rejected).toBe(201);
    }, 15_000);
    expect(fleet.counters.rejected).toBe(201);
    expect(r.status.rejectedByReason).toEqual({
      'not-json': 41,
      invalid: 40,
      'unsupported-version': 40,
      oversized: 40,
      'subject-mismatch': 40,
    });
    expect(warnings).toHaveLength(200);
    expect(new Set(warnings.map((w) => w['subject'])).size).toBe(200);
    // Nothing malformed reached the view.
    expect([...(fleet.pool('bad')?.endpoints() ?? [])].map((e) => e.pod)).toEqual(['vllm-1000']);

    // A reader replaying the stream meets the same garbage (last per subject) and the same outcome.
    const replayed = new Fleet();
    const r2 = reader('bad', replayed);
    await r2.caughtUp;
    expect(r2.status.rejected).toBe(200);
    expect(snapshotPool(replayed, 'bad')).toEqual(snapshotPool(fleet, 'bad'));
  });

  it('refuses a future-dated event live and on replay alike, logs it, and later true events still apply', async () => {
    const t = Date.now();
    const warnings: Record<string, unknown>[] = [];
    const logger: Logger = { warn: (fields) => warnings.push(fields) };
    const live = new Fleet();
    const r = reader('future', live, { logger });
    await r.caughtUp;
    await publishAll(publisher, [readiness('future', 0, t)]);
    await eventually(() => expect(live.get('future', zoneOf(0), 'vllm-0')?.ready).toBe(true), 15_000);
    // A forged tombstone dated in the year 275,000, and a sample 10 minutes ahead.
    await publishAll(publisher, [
      readiness('future', 0, 8.64e15, { ready: false, deleted: true }),
      metrics('future', 0, t + 600_000, { waitingRequests: 77 }),
    ]);
    await eventually(() => expect(live.counters.future).toBe(2), 15_000);
    expect(live.get('future', zoneOf(0), 'vllm-0')).toMatchObject({ ready: true, deleted: false, metrics: undefined });
    expect(r.status.rejectedByReason).toEqual({ future: 2 });
    expect(warnings.map((w) => w['reason'])).toEqual(['future', 'future']);
    expect(String(warnings[0]?.['detail'])).toMatch(/ms after the receive time/);

    // An EPP started an hour later replays the same messages: judged by their stream time, still
    // refused. (The stream keeps the last message per subject, so the forged one replaced the true
    // readiness there: the restarted EPP lacks the pod until its collector re-publishes.)
    const replayed = new Fleet();
    const r2 = reader('future', replayed, { now: () => Date.now() + 3_600_000 });
    await r2.caughtUp;
    expect(replayed.counters).toMatchObject({ future: 2, applied: 0 });
    expect(replayed.get('future', zoneOf(0), 'vllm-0')).toBeUndefined();

    // The re-published readiness applies on both, and they agree.
    await publishAll(publisher, [readiness('future', 0, Date.now())]);
    await eventually(() => expect(replayed.get('future', zoneOf(0), 'vllm-0')?.ready).toBe(true), 15_000);
    expect(snapshotPool(replayed, 'future')).toEqual(snapshotPool(live, 'future'));
  });

  it('logs a pod of a zone past the pool’s cap (refused) and an address two zones claim (applied, not counted as rejected)', async () => {
    const t = Date.now();
    const warnings: Record<string, unknown>[] = [];
    const logger: Logger = { warn: (fields) => warnings.push(fields) };
    const fleet = new Fleet({ maxZonesPerPool: 2, localZone: zoneOf(1) });
    const r = reader('capped', fleet, { logger });
    await r.caughtUp;
    // Pods 0 and 1 are in zone-a and zone-b; pod 2 (zone-c) is one zone too many. Pod 3 (zone-a) claims pod 1's address.
    await publishAll(publisher, [
      readiness('capped', 0, t),
      readiness('capped', 1, t),
      readiness('capped', 2, t),
      readiness('capped', 3, t, { address: readiness('capped', 1, t).address }),
    ]);
    await eventually(() => expect(fleet.counters).toMatchObject({ applied: 3, tooManyZones: 1, addressConflict: 1 }), 15_000);
    expect(r.status.rejectedByReason).toEqual({ 'too-many-zones': 1 });
    expect(warnings.map((w) => w['reason']).sort()).toEqual(['address-conflict', 'too-many-zones']);
    expect(String(warnings.find((w) => w['reason'] === 'address-conflict')?.['detail'])).toMatch(
      /vllm-3 of zone zone-a claims 10\.0\.0\.1:8000/,
    );
    expect(
      fleet
        .pool('capped')
        ?.routableAt('10.0.0.1:8000')
        .map((e) => e.pod),
    ).toEqual(['vllm-1']);
  });

  it('replays a 10,000-pod pool (readiness and metrics) and catches up', async () => {
    const t = Date.now();
    const events = podEvents('big', 0, 10_000, t);
    const before = await stored();
    await publishAll(publisher, events);
    await waitForStored(jsm, 'SPILLWAY', before + 20_000, 30_000);
    const fleet = new Fleet();
    const r = reader('big', fleet);
    await r.caughtUp;
    expect(r.status.received).toBe(20_000);
    expect(fleet.counters.applied).toBe(20_000);
    expect(fleet.pool('big')?.readyCount).toBe(10_000);
    expect(snapshotPool(fleet, 'big')).toEqual(snapshotPool(fedDirectly(events), 'big'));
  }, 60_000);

  it('close() stops applying events', async () => {
    const fleet = new Fleet();
    const r = reader('closing', fleet);
    await r.caughtUp;
    await r.close();
    await publishAll(publisher, [readiness('closing', 1, Date.now())]);
    // A still-running reader sees it; the closed one must not.
    const other = new Fleet();
    await reader('closing', other).caughtUp;
    expect(other.get('closing', zoneOf(1), 'vllm-1')?.ready).toBe(true);
    expect(fleet.get('closing', zoneOf(1), 'vllm-1')).toBeUndefined();
  });

  it('stores the latest kv snapshot per pod (a full one too), replays it to the sink, and the fleet ignores it', async () => {
    const t = Date.now();
    const snap = (pod: string, seq: number, keys: number[]): KvSnapshotEvent => ({
      v: 1,
      kind: 'kv',
      pool: 'kvsnap',
      zone: 'zone-a',
      pod,
      observedAt: t + seq,
      blockSize: 16,
      seq,
      keys,
    });
    const full = Array.from({ length: MAX_KV_SNAPSHOT_KEYS }, (_, i) => Number.MAX_SAFE_INTEGER - i);
    expect(encodeEvent(snap('p0', 1, full)).byteLength).toBeGreaterThan(MAX_EVENT_BYTES);
    const before = await stored();
    expect(publisher.publishKvSnapshot(snap('p0', 1, [1, 2]))).toBe(true);
    expect(publisher.publishKvSnapshot(snap('p0', 2, full))).toBe(true);
    expect(await publisher.publish(snap('p1', 7, [9]))).toBe(true);
    await publishAll(publisher, [readiness('kvsnap', 0, t)]);
    await waitForStored(jsm, 'SPILLWAY', before + 3);
    const fleet = new Fleet();
    const seen: SpillwayEvent[] = [];
    const r = reader('kvsnap', {
      apply: (event, receivedAt) => {
        seen.push(event);
        return fleet.apply(event, receivedAt);
      },
      recordRejected: () => fleet.recordRejected(),
    });
    await r.caughtUp;
    const kv = seen.filter((e): e is KvSnapshotEvent => e.kind === 'kv').sort((a, b) => a.seq - b.seq);
    expect(kv.map((e) => [e.pod, e.seq, e.keys.length])).toEqual([
      ['p0', 2, MAX_KV_SNAPSHOT_KEYS],
      ['p1', 7, 1],
    ]);
    expect(kv[0]?.keys).toEqual(full);
    expect(fleet.counters).toMatchObject({ rejected: 0, ignored: 2 });
    expect(fleet.pool('kvsnap')?.readyCount).toBe(1);
    expect(publisher.counters.kvSnapshotsSent).toBe(3);
  });
});
