import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DiscardPolicy, jetstreamManager, StorageType, type JetStreamManager } from '@nats-io/jetstream';
import { nanos, type NatsConnection } from '@nats-io/nats-core';
import { startNatsServer, type NatsServerHandle } from '@spillway/testkit';
import { connectNats, describeDifferences, ensureStream, EventPublisher, readinessMsgId, subjectCovers } from '../src/index.js';
import { readiness } from './helpers.js';

let server: NatsServerHandle;
let nc: NatsConnection;
let jsm: JetStreamManager;

beforeAll(async () => {
  server = await startNatsServer({ forcePrivate: true });
  nc = await connectNats({ servers: [server.url] });
  jsm = await jetstreamManager(nc);
});

afterAll(async () => {
  await nc?.close();
  await server?.stop();
});

describe('ensureStream', () => {
  it('creates the stream with the documented defaults, then finds it unchanged', async () => {
    const first = await ensureStream(jsm);
    expect(first).toMatchObject({ name: 'SPILLWAY', created: true, differences: [], addedSubjects: [] });
    const c = first.info.config;
    expect(c).toMatchObject({
      subjects: ['spillway.v1.>'],
      max_msgs_per_subject: 1,
      discard: DiscardPolicy.Old,
      storage: StorageType.File,
      allow_direct: true,
      duplicate_window: nanos(120_000),
      max_age: nanos(24 * 3600_000),
    });
    const again = await ensureStream(jsm);
    expect(again).toMatchObject({ created: false, differences: [], addedSubjects: [] });
  });

  it('leaves an existing differently-configured stream untouched and reports each difference', async () => {
    await jsm.streams.add({
      name: 'TUNED',
      subjects: ['tuned.>'],
      max_msgs_per_subject: 5,
      discard: DiscardPolicy.New,
      storage: StorageType.Memory,
      max_age: nanos(3600_000),
    });
    const before = (await jsm.streams.info('TUNED')).config;
    const result = await ensureStream(jsm, { name: 'TUNED', subjects: ['tuned.>'] });
    expect(result.created).toBe(false);
    expect(result.differences.map((d) => d.field).sort()).toEqual([
      'allow_direct',
      'discard',
      'max_age',
      'max_msgs_per_subject',
      'storage',
    ]);
    expect(describeDifferences(result)[0]).toMatch(/^stream TUNED: .* \(left unchanged\)$/);
    const after = (await jsm.streams.info('TUNED')).config;
    expect(after).toEqual(before);
  });

  it('adds a missing subject to an existing stream (purely additive) and nothing else', async () => {
    await jsm.streams.add({
      name: 'NARROW',
      subjects: ['spillway.v2.narrow.>'],
      max_msgs_per_subject: 1,
      discard: DiscardPolicy.Old,
      allow_direct: true,
      duplicate_window: nanos(120_000),
      max_age: nanos(24 * 3600_000),
    });
    const result = await ensureStream(jsm, { name: 'NARROW', subjects: ['spillway.v2.narrow.>', 'spillway.v2.wide.>'] });
    expect(result.addedSubjects).toEqual(['spillway.v2.wide.>']);
    expect((await jsm.streams.info('NARROW')).config.subjects).toEqual(['spillway.v2.narrow.>', 'spillway.v2.wide.>']);
  });

  it('reports a subject it cannot add (overlapping another stream) instead of failing', async () => {
    const result = await ensureStream(jsm, { name: 'NARROW', subjects: ['spillway.v2.narrow.>', 'spillway.v2.wide.>', 'tuned.x'] });
    expect(result.addedSubjects).toEqual([]);
    expect(result.differences.map((d) => d.field)).toContain('subjects');
  });

  it('never adds subjects to a stream fed by sources (a zone aggregate)', async () => {
    await jsm.streams.add({ name: 'ZONE_SRC', subjects: ['zsrc.>'] });
    await jsm.streams.add({ name: 'AGG', sources: [{ name: 'ZONE_SRC' }] });
    const result = await ensureStream(jsm, { name: 'AGG', subjects: ['spillway.v1.>'] });
    expect(result).toMatchObject({ created: false, addedSubjects: [] });
    expect(result.info.config.subjects ?? []).toEqual([]);
  });

  it('checks an existing stream against the subjects the caller needs, when given', async () => {
    await jsm.streams.add({ name: 'ZONE_A', subjects: ['zonea.v1.*.zone-a.>'] });
    const result = await ensureStream(jsm, { name: 'ZONE_A', subjects: ['zonea.v1.>'], requiredSubjects: ['zonea.v1.llama.zone-a.>'] });
    expect(result).toMatchObject({ created: false, addedSubjects: [] });
    expect(result.differences.map((d) => d.field)).not.toContain('subjects');
    const wider = await ensureStream(jsm, { name: 'ZONE_A', requiredSubjects: ['zonea.v1.llama.zone-b.>'] });
    expect(wider.addedSubjects).toEqual(['zonea.v1.llama.zone-b.>']);
  });

  it('survives two processes creating the same stream at once', async () => {
    const other = await connectNats({ servers: [server.url] });
    try {
      const otherJsm = await jetstreamManager(other);
      const results = await Promise.all([
        ensureStream(jsm, { name: 'RACE', subjects: ['race.>'] }),
        ensureStream(otherJsm, { name: 'RACE', subjects: ['race.>'] }),
        ensureStream(jsm, { name: 'RACE', subjects: ['race.>'] }),
      ]);
      expect(results.every((r) => r.differences.length === 0)).toBe(true);
      expect(results.filter((r) => r.created).length).toBeGreaterThanOrEqual(1);
      // A racer asking for other settings still gets an answer (its differences), never an error.
      const differing = await Promise.all([
        ensureStream(jsm, { name: 'RACE2', subjects: ['race2.>'], maxMsgsPerSubject: 3 }),
        ensureStream(otherJsm, { name: 'RACE2', subjects: ['race2.>'] }),
      ]);
      expect(differing.filter((r) => r.created)).toHaveLength(1);
      expect(differing.find((r) => !r.created)?.differences.map((d) => d.field)).toEqual(['max_msgs_per_subject']);
    } finally {
      await other.close();
    }
  });

  it('rejects bad settings', async () => {
    await expect(ensureStream(jsm, { name: 'bad name' })).rejects.toThrow(/stream names/);
    await expect(ensureStream(jsm, { subjects: [] })).rejects.toThrow();
  });
});

describe('EventPublisher', () => {
  it('acks readiness and deduplicates a retry of the same event by its Nats-Msg-Id', async () => {
    const publisher = new EventPublisher(nc);
    const event = readiness('dedupe', 1, 1_764_420_000_000);
    const first = await publisher.publishReadiness(event);
    const retry = await publisher.publishReadiness({ ...event });
    expect(first.duplicate).toBe(false);
    expect(retry).toEqual({ seq: first.seq, duplicate: true });
    const changed = await publisher.publishReadiness({ ...event, ready: false });
    expect(changed.duplicate).toBe(false);
    expect(publisher.counters).toMatchObject({ readinessAcked: 3, readinessDuplicates: 1 });
  });

  it('makes message ids from the subject, the instant and the payload', () => {
    const a = readinessMsgId('s', 1, new TextEncoder().encode('{"a":1}'));
    expect(readinessMsgId('s', 1, new TextEncoder().encode('{"a":1}'))).toBe(a);
    expect(readinessMsgId('s', 1, new TextEncoder().encode('{"a":2}'))).not.toBe(a);
    expect(readinessMsgId('s', 2, new TextEncoder().encode('{"a":1}'))).not.toBe(a);
  });
});

describe('subjectCovers', () => {
  it('matches NATS wildcards', () => {
    expect(subjectCovers('spillway.v1.>', 'spillway.v1.>')).toBe(true);
    expect(subjectCovers('spillway.>', 'spillway.v1.>')).toBe(true);
    expect(subjectCovers('spillway.*.>', 'spillway.v1.pool.>')).toBe(true);
    expect(subjectCovers('spillway.v1.a.>', 'spillway.v1.>')).toBe(false);
    expect(subjectCovers('spillway.v1', 'spillway.v1.x')).toBe(false);
    expect(subjectCovers('spillway.*', 'spillway.>')).toBe(false);
  });
});
