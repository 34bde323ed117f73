/**
 * KV-cache block events on the zone topology of infra/nats (real nats-server processes, the users
 * and permissions it renders): a zone's collector user publishes its own zone's
 * `spillway.kv.<pool>.<zone>.<pod>` subjects only; a zone's EPP user reads every zone's across the
 * leaf links and publishes none.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { decodeKvBatch, encodeKvBatch, kvPoolFilter, kvSubjectFor, type KvBatch } from '@spillway/events';
import { eventually } from '@spillway/testkit';
import { permissionErrors, startSettledTopology, topologyClients, type RunningTopology } from './nats-topology-helper.js';

const ZONES = ['zone-a', 'zone-b'] as const;
type Zone = (typeof ZONES)[number];
const POOL = 'llama';
const SETTLE_MS = 20_000;

let running: RunningTopology;

const { open, closeAll } = topologyClients(() => running);

const batch = (z: Zone, pod: string, seq: number): KvBatch => ({
  v: 1,
  pool: POOL,
  zone: z,
  pod,
  seq,
  observedAt: Date.now(),
  blockSize: 16,
  events: [[1, [seq]]],
});

beforeAll(async () => {
  running = await startSettledTopology(ZONES, { settleMs: SETTLE_MS });
}, 60_000);

afterAll(async () => {
  await closeAll();
  await running?.stop();
});

describe('KV block events on the zone topology', () => {
  it("a collector publishes its own zone's only; every zone's EPP reads them; an EPP publishes none", async () => {
    const collectorA = await open('zone-a', 'collector');
    const errorsC = permissionErrors(collectorA);
    const eppB = await open('zone-b', 'epp');
    const errorsE = permissionErrors(eppB);
    const received: KvBatch[] = [];
    eppB.subscribe(kvPoolFilter(POOL), {
      callback: (_e, msg) => {
        const decoded = decodeKvBatch(msg.subject, msg.data);
        if (decoded.ok) received.push(decoded.batch);
      },
    });
    await eppB.flush();

    // zone-a's collector, its own zone: allowed, and it reaches zone-b's EPP user across the hub.
    const own = kvSubjectFor({ pool: POOL, zone: 'zone-a', pod: 'a0' });
    await eventually(
      async () => {
        collectorA.publish(own, encodeKvBatch(batch('zone-a', 'a0', received.length + 1)));
        await collectorA.flush();
        expect(received.some((b) => b.pod === 'a0')).toBe(true);
      },
      SETTLE_MS,
      200,
    );

    // Another zone's KV subject: refused by the server, never delivered.
    const forged = kvSubjectFor({ pool: POOL, zone: 'zone-b', pod: 'b0' });
    collectorA.publish(forged, encodeKvBatch(batch('zone-b', 'b0', 1)));
    await collectorA.flush();
    await eventually(() => expect(errorsC.join('\n')).toMatch(/Permissions Violation for Publish to "spillway\.kv\.llama\.zone-b\.b0"/));

    // An EPP user may read KV events but never publish one, even its own zone's.
    const ownB = kvSubjectFor({ pool: POOL, zone: 'zone-b', pod: 'b1' });
    eppB.publish(ownB, encodeKvBatch(batch('zone-b', 'b1', 1)));
    await eppB.flush();
    await eventually(() => expect(errorsE.join('\n')).toMatch(/Permissions Violation for Publish to "spillway\.kv\.llama\.zone-b\.b1"/));
    expect(received.map((b) => b.pod)).not.toContain('b0');
    expect(received.map((b) => b.pod)).not.toContain('b1');
  }, 60_000);
});
