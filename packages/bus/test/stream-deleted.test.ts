import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { jetstreamManager, type JetStreamManager } from '@nats-io/jetstream';
import type { NatsConnection } from '@nats-io/nats-core';
import { Fleet } from '@spillway/fleet';
import { eventually, startNatsServer, type NatsServerHandle } from '@spillway/testkit';
import { connectNats, ensureStream, EventPublisher, findStream, startReader, type EventReader } from '../src/index.js';
import { publishAll, readiness, zoneOf } from './helpers.js';

let server: NatsServerHandle;
let nc: NatsConnection;
let jsm: JetStreamManager;
let publisher: EventPublisher;
const readers: EventReader[] = [];

beforeAll(async () => {
  server = await startNatsServer({ forcePrivate: true });
  nc = await connectNats({ servers: [server.url] });
  jsm = await jetstreamManager(nc);
  publisher = new EventPublisher(nc, { retryForMs: 500 });
});

afterAll(async () => {
  await Promise.all(readers.map((r) => r.close()));
  await nc?.close();
  await server?.stop();
});

describe('the stream deleted while a reader follows it', () => {
  it('is noticed at once, re-created through onStreamMissing, and the reader resumes', async () => {
    await ensureStream(jsm);
    const fleet = new Fleet();
    const logs: string[] = [];
    const logger = { warn: (_: unknown, message: string) => logs.push(message), info: (_: unknown, message: string) => logs.push(message) };
    let ensured = 0;
    const reader = startReader(nc, { pool: 'gone', sink: fleet, logger, onStreamMissing: () => (ensured++, ensureStream(jsm)) });
    readers.push(reader);
    await reader.caughtUp;
    await publishAll(publisher, [readiness('gone', 0, Date.now())]);
    await eventually(() => expect(fleet.get('gone', zoneOf(0), 'vllm-0')?.ready).toBe(true), 15_000);

    await jsm.streams.delete('SPILLWAY');
    await eventually(async () => expect(await findStream(jsm, 'SPILLWAY')).toBeDefined(), 15_000);
    expect(ensured).toBeGreaterThanOrEqual(1);
    // Events published into the new stream reach the view; the old view is kept meanwhile.
    await publishAll(publisher, [readiness('gone', 1, Date.now())]);
    await eventually(() => expect(fleet.get('gone', zoneOf(1), 'vllm-1')?.ready).toBe(true), 15_000);
    expect(fleet.get('gone', zoneOf(0), 'vllm-0')?.ready).toBe(true);
    await eventually(() => expect(reader.status.staleSince).toBeUndefined(), 15_000);
    expect(logs).toContain('the event stream is missing (deleted?); waiting for it to be created');
    expect(logs.join('\n')).not.toMatch(/jetstream is not enabled/);
    await reader.close();
  });

  it('without onStreamMissing keeps waiting, stale, and resumes when someone else creates the stream', async () => {
    await ensureStream(jsm);
    const fleet = new Fleet();
    const reader = startReader(nc, { pool: 'later', sink: fleet });
    readers.push(reader);
    await reader.caughtUp;
    await jsm.streams.delete('SPILLWAY');
    await eventually(() => expect(reader.status.staleSince).toBeTypeOf('number'), 15_000);
    // Not a wait for a condition: nats-server 2.9 can break a file stream created again within
    // milliseconds of its deletion (the reader waits likewise before re-creating one).
    await new Promise((resolve) => setTimeout(resolve, 1_000));
    await ensureStream(jsm);
    await publishAll(publisher, [readiness('later', 2, Date.now())]);
    await eventually(() => expect(fleet.get('later', zoneOf(2), 'vllm-2')?.ready).toBe(true), 15_000);
    await eventually(() => expect(reader.status.staleSince).toBeUndefined(), 15_000);
    await reader.close();
  });

  it('a readiness publish into a missing stream fails naming the cause, not "jetstream is not enabled"', async () => {
    await jsm.streams.delete('SPILLWAY').catch(() => undefined);
    await expect(publisher.publishReadiness(readiness('nostream', 0, Date.now()))).rejects.toThrow(
      /no stream captures spillway\.v1\.nostream\.zone-a\.vllm-0\.readiness/,
    );
  });
});
