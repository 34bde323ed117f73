import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { jetstreamManager } from '@nats-io/jetstream';
import type { NatsConnection } from '@nats-io/nats-core';
import type { SpillwayEvent } from '@spillway/events';
import { Fleet, snapshotPool } from '@spillway/fleet';
import { eventually, startNatsServer, type NatsServerHandle } from '@spillway/testkit';
import {
  ConnectionTracker,
  connectNats,
  ensureStream,
  EventPublisher,
  startReader,
  type ConnectionState,
  type EventReader,
  type ReaderStatus,
} from '../src/index.js';
import { metrics, podEvents, publishAll, readiness, zoneOf } from './helpers.js';

/**
 * Fault tests: SIGKILL the private nats-server and restart it on the same port and store.
 * One server for the file; tests run in order and each leaves it running.
 */
let server: NatsServerHandle;
let readerConn: NatsConnection;
let publisherConn: NatsConnection;
let publisher: EventPublisher;
const readers: EventReader[] = [];

beforeAll(async () => {
  server = await startNatsServer({ forcePrivate: true });
  readerConn = await connectNats({ servers: [server.url], reconnectTimeWaitMs: 250 });
  publisherConn = await connectNats({ servers: [server.url], reconnectTimeWaitMs: 250 });
  await ensureStream(await jetstreamManager(publisherConn));
  publisher = new EventPublisher(publisherConn, { connection: new ConnectionTracker(publisherConn) });
});

afterAll(async () => {
  await Promise.all(readers.map((r) => r.close()));
  await readerConn?.close();
  await publisherConn?.close();
  await server?.stop();
});

async function collect(iterable: AsyncIterable<ReaderStatus>, into: ReaderStatus[]): Promise<void> {
  for await (const s of iterable) into.push(s);
}

describe('recovery across a nats-server kill and restart', () => {
  it('delivers events published after the restart (the ordered-consumer stall after a server restart) and reports the outage', async () => {
    const t = Date.now();
    const fleet = new Fleet();
    // Library-default pull timing (30 s expires, 15 s heartbeats). Checked: if the reader relied on the
    // client's own ordered-consumer recreation, the first pull after the restart would ask for the
    // leftover batch only and delivery would stall for ~30 s, past the `eventually` below.
    const reader = startReader(readerConn, { pool: 'crash', sink: fleet, expiresMs: 30_000, idleHeartbeatMs: 15_000, batch: 100 });
    readers.push(reader);
    const history: ReaderStatus[] = [];
    void collect(reader.changes(), history);
    await reader.caughtUp;

    const before = podEvents('crash', 0, 50, t);
    await publishAll(publisher, before);
    await eventually(() => expect(fleet.pool('crash')?.readyCount).toBe(50), 15_000);

    await server.kill();
    await eventually(() => expect(reader.status.connection).not.toBe('connected'), 15_000);
    expect(reader.status.staleSince).toBeTypeOf('number');
    // While the server is down the collector's samples are dropped, not buffered.
    expect(publisher.publishMetrics(metrics('crash', 0, t + 1))).toBe(false);

    await server.restart();
    // Readiness retries (same Nats-Msg-Id) until the server is back and acks.
    const after: SpillwayEvent[] = [readiness('crash', 1, t + 2_000, { ready: false }), readiness('crash', 500, t + 2_000)];
    await publishAll(publisher, after);
    await eventually(
      () =>
        expect(publisherConn.isClosed() || publisher.publishMetrics(metrics('crash', 2, t + 2_000, { waitingRequests: 33 }))).toBe(true),
      15_000,
    );

    await eventually(() => {
      expect(fleet.get('crash', zoneOf(500), 'vllm-500')?.ready).toBe(true);
      expect(fleet.get('crash', zoneOf(1), 'vllm-1')?.ready).toBe(false);
      expect(fleet.get('crash', zoneOf(2), 'vllm-2')?.metrics?.waitingRequests).toBe(33);
    }, 15_000);

    await eventually(() => expect(reader.status).toMatchObject({ connection: 'connected', staleSince: undefined }), 15_000);
    expect(reader.status.reconnects).toBeGreaterThanOrEqual(1);
    expect(reader.status.consumerRestarts).toBeGreaterThanOrEqual(1);
    expect(reader.status.rejected).toBe(0);

    // Nothing lost, nothing invented: a fresh replay agrees with the recovered reader.
    const fresh = new Fleet();
    const replay = startReader(readerConn, { pool: 'crash', sink: fresh });
    readers.push(replay);
    await replay.caughtUp;
    expect(snapshotPool(fleet, 'crash')).toEqual(snapshotPool(fresh, 'crash'));

    // The status stream saw the outage and the recovery, in that order.
    const states = history.map((s) => s.connection);
    const down = states.findIndex((s) => s === 'disconnected' || s === 'reconnecting');
    expect(down).toBeGreaterThan(-1);
    expect(states.slice(down)).toContain('connected');
    expect(history.some((s) => s.staleSince !== undefined)).toBe(true);
    expect(history.at(-1)?.staleSince).toBeUndefined();
  }, 60_000);

  it('tracks connection state: connected, disconnected/reconnecting while down, connected again', async () => {
    const nc = await connectNats({ servers: [server.url], reconnectTimeWaitMs: 250 });
    let clock = 1_000;
    const tracker = new ConnectionTracker(nc, () => clock);
    const seen: ConnectionState[] = [];
    void (async () => {
      for await (const s of tracker.changes()) seen.push(s.state);
    })();
    expect(tracker.status).toMatchObject({ state: 'connected', disconnectedSince: undefined, reconnects: 0 });

    await server.kill();
    await eventually(() => expect(tracker.status.state).not.toBe('connected'), 15_000);
    expect(tracker.status.disconnectedSince).toBe(1_000);
    clock = 2_000;
    await server.restart();
    await eventually(() => expect(tracker.status.state).toBe('connected'), 15_000);
    expect(tracker.status).toMatchObject({ disconnectedSince: undefined, reconnects: 1, disconnects: 1 });

    await nc.close();
    await eventually(() => expect(tracker.status.state).toBe('closed'), 5_000);
    await tracker.finished();
    expect(seen[0]).toBe('connected');
    expect(seen).toContain('disconnected');
    expect(seen.slice(seen.indexOf('disconnected'))).toContain('connected');
    expect(seen.at(-1)).toBe('closed');
  }, 60_000);

  it('a reader started while the server is down catches up once it is back', async () => {
    await publishAll(publisher, podEvents('late', 0, 5, Date.now()));
    await server.kill();
    await eventually(() => expect(readerConn.isClosed()).toBe(false), 1_000);
    const fleet = new Fleet();
    const reader = startReader(readerConn, { pool: 'late', sink: fleet });
    readers.push(reader);
    await new Promise((r) => setTimeout(r, 500));
    expect(reader.status.caughtUp).toBe(false);
    await server.restart();
    await reader.caughtUp;
    expect(fleet.pool('late')?.readyCount).toBe(5);
  }, 60_000);
});
