/**
 * Hostile msgpack on `spillway.state.*` and `spillway.kv.*` against a running EPP over a real
 * nats-server (docs/hardening.md, "Second round: untrusted msgpack"): 1 MiB of nested one-element
 * arrays, huge map and array headers, nesting hidden in an unknown field. Each is refused by the
 * decoder, counted by reason, logged at most once a minute per reason, and never applied; the EPP
 * keeps picking. (What they cost is measured by `npm run bench -- decode`, not asserted here.)
 */
import { connect } from '@nats-io/transport-node';
import { jetstreamManager } from '@nats-io/jetstream';
import type { NatsConnection } from '@nats-io/nats-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ensureStream } from '@spillway/bus';
import { encodeStateBatch, kvSubjectFor, stateSubjectFor } from '@spillway/events';
import type { RunningEpp } from '@spillway/epp';
import { eventually, startNatsServer, type NatsServerHandle } from '@spillway/testkit';
import {
  capturingLogger,
  completion,
  destinationOf,
  EnvoyStream,
  envoyRequestMessages,
  extProcClient,
  POOL,
  startTestEpp,
  TestPublisher,
} from './helpers.js';

/** `bytes` of nested one-element arrays, a nil at the bottom. */
function nested(bytes: number): Uint8Array {
  const b = new Uint8Array(bytes).fill(0x91);
  b[bytes - 1] = 0xc0;
  return b;
}

/** A valid state batch with one more header field `x` holding `bytes` of nested arrays. */
function deepInField(bytes: number): Uint8Array {
  const valid = encodeStateBatch({ v: 1, pool: POOL, zone: 'zone-h', epp: 'evil', seq: 1, sentAt: Date.now(), entries: [] });
  return Uint8Array.from([0x88, ...valid.subarray(1), 0xa1, 0x78, ...nested(bytes)]);
}

const HOSTILE: readonly Uint8Array[] = [
  nested(1024 * 1024 - 1024),
  Uint8Array.from([0xdf, 0xff, 0xff, 0xff, 0xff, ...new Uint8Array(4096)]),
  Uint8Array.from([0xdd, 0xff, 0xff, 0xff, 0xff, ...new Uint8Array(4096)]),
  deepInField(512 * 1024),
];

let nats: NatsServerHandle;
let publisher: TestPublisher;
let raw: NatsConnection;
let epp: RunningEpp;
const { logger, lines } = capturingLogger('warn');

beforeAll(async () => {
  nats = await startNatsServer({ forcePrivate: true });
  publisher = await TestPublisher.connect(nats.url);
  raw = await connect({ servers: nats.url });
  await ensureStream(await jetstreamManager(raw), { name: 'SPILLWAY' });
  await publisher.pods([{ pod: 'h-0', zone: 'zone-h', address: '10.77.0.1:8000', waiting: 0, running: 0 }]);
  epp = await startTestEpp(nats.url, 'zone-h', ['--metrics-stale-ms', '600000'], logger);
  await epp.ready;
}, 60_000);

afterAll(async () => {
  await epp?.close();
  await raw?.close();
  await publisher?.close();
  await nats?.stop();
});

describe('hostile msgpack against a running EPP', () => {
  it('on spillway.state.* and spillway.kv.*: refused, counted, logged once per reason, never applied; picking goes on', async () => {
    const blocksBefore = epp.core.scheduler.kvIndexStats.blocks;
    const entriesBefore = epp.sharedState?.entriesIn ?? 0;
    const stateSubject = stateSubjectFor({ pool: POOL, zone: 'zone-h', epp: 'evil' });
    const kvSubject = kvSubjectFor({ pool: POOL, zone: 'zone-h', pod: 'h-0' });
    // Each payload ten times on both subjects: 80 messages of up to 1 MiB.
    for (let round = 0; round < 10; round++)
      for (const payload of HOSTILE) {
        raw.publish(stateSubject, payload);
        raw.publish(kvSubject, payload);
      }
    await raw.flush();
    const count = (rejected: Partial<Record<string, number>> | undefined) =>
      Object.values(rejected ?? {}).reduce<number>((a, b) => a + (b ?? 0), 0);
    await eventually(() => {
      expect(count(epp.sharedState?.rejected)).toBe(40);
      expect(count(epp.core.kv.counters.rejected)).toBe(40);
    }, 30_000);
    const reasons = (rejected: Partial<Record<string, number>> | undefined) =>
      Object.entries(rejected ?? {}).flatMap(([reason, n]) => ((n ?? 0) > 0 ? [reason] : []));
    for (const reason of [...reasons(epp.sharedState?.rejected), ...reasons(epp.core.kv.counters.rejected)])
      expect(['invalid', 'not-msgpack']).toContain(reason);
    // Never applied.
    expect(epp.core.scheduler.kvIndexStats.blocks).toBe(blocksBefore);
    expect(epp.sharedState?.entriesIn ?? 0).toBe(entriesBefore);
    // Logged once per reason and channel, not once per message.
    const drops = lines.filter((l) => l['msg'] === 'dropped a KV block batch' || l['msg'] === 'dropped a shared-state batch');
    expect(drops.length).toBeGreaterThan(0);
    expect(drops.length).toBeLessThanOrEqual(4);
    // Still picking.
    const stream = new EnvoyStream(extProcClient(epp.grpcPort));
    try {
      stream.send(envoyRequestMessages({ body: completion() }));
      const [first] = await stream.waitFor(1);
      expect(destinationOf(first).header).toContain('10.77.0.1:8000');
    } finally {
      stream.close();
    }
  }, 60_000);
});
