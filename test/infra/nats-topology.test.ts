/**
 * infra/nats: the committed configs validate and match their generator; the three-zone topology
 * (one JetStream domain per zone, leaf nodes to a hub, local aggregates) carries every zone's events
 * to every zone, enforces per-zone permissions, keeps each zone working with the hub down, and
 * converges after the hub returns. Real nats-server processes on loopback with free ports.
 */
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createConnection } from 'node:net';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { connect } from '@nats-io/transport-node';
import type { NatsConnection } from '@nats-io/nats-core';
import { DeliverPolicy, jetstream, jetstreamManager, type JetStreamManager } from '@nats-io/jetstream';
import { decodeEvent, encodeEvent, subjectFor, type ReadinessEvent } from '@spillway/events';
import { eventually } from '@spillway/testkit';
import {
  AGGREGATE_STREAM,
  aggregateStreamConfig,
  defaultConfigFiles,
  provisionZoneStreams,
  renderSingleServer,
  renderZoneTopology,
  zoneStreamConfig,
  NATS_MAX_PAYLOAD,
  type Credentials,
  type RenderedZone,
} from '../../infra/nats/topology.js';
import { leafCount, requireNatsServer, startTopology, validateConfig, type RunningTopology } from './nats-topology-helper.js';

const NATS_DIR = join(dirname(fileURLToPath(import.meta.url)), '..', '..', 'infra', 'nats');
const ZONES = ['zone-a', 'zone-b', 'zone-c'] as const;
type Zone = (typeof ZONES)[number];
const POOL = 'llama';
/** Generous bound for asynchronous effects (sources, leaf reconnects); never a speed assertion. */
const SETTLE_MS = 20_000;

describe('infra/nats configs', () => {
  it('the committed configs are exactly what topology.ts renders (rerun infra/nats/render.ts)', () => {
    for (const [file, text] of Object.entries(defaultConfigFiles())) {
      expect(readFileSync(join(NATS_DIR, file), 'utf8'), file).toBe(text);
    }
  });

  it('every committed config validates with nats-server -t', () => {
    requireNatsServer();
    const files = Object.keys(defaultConfigFiles());
    expect(files).toEqual(expect.arrayContaining(['single.conf', 'hub.conf', 'zone-a.conf', 'zone-b.conf', 'zone-c.conf']));
    for (const file of files) expect(validateConfig(join(NATS_DIR, file)), file).toBeUndefined();
  });

  it('nats-server -t rejects a broken config (the validation can fail)', () => {
    requireNatsServer();
    const dir = mkdtempSync(join(tmpdir(), 'spillway-conf-'));
    try {
      const path = join(dir, 'broken.conf');
      writeFileSync(path, renderSingleServer({ port: 4222, storeDir: dir }).replace('jetstream {', 'jetstream {{'));
      expect(validateConfig(path)).toBeDefined();
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('zone streams capture only their zone; aggregates source every zone, remote ones through the domain API', () => {
    const zoneB = zoneStreamConfig('zone-b');
    expect(zoneB).toMatchObject({
      name: 'SPILLWAY_ZONE-B',
      subjects: ['spillway.v1.*.zone-b.>'],
      max_msgs_per_subject: 1,
      discard: 'old',
      storage: 'file',
      allow_direct: true,
      duplicate_window: 120_000_000_000,
      max_age: 86_400_000_000_000,
    });
    const agg = aggregateStreamConfig('zone-a', ZONES);
    expect(agg.name).toBe(AGGREGATE_STREAM);
    expect(agg.subjects).toBeUndefined();
    expect(agg.sources).toEqual([
      { name: 'SPILLWAY_ZONE-A' },
      { name: 'SPILLWAY_ZONE-B', external: { api: '$JS.zone-b.API', deliver: '' } },
      { name: 'SPILLWAY_ZONE-C', external: { api: '$JS.zone-c.API', deliver: '' } },
    ]);
    expect(agg).toMatchObject({ max_msgs_per_subject: 1, discard: 'old', allow_direct: true });
  });

  it('rejects zone names that cannot be a JetStream domain, and duplicates', () => {
    const hub = { clientPort: 1, leafPort: 2, storeDir: '/tmp/x' };
    expect(() => zoneStreamConfig('zone.a')).toThrow(/zone "zone.a"/);
    expect(() => zoneStreamConfig('hub')).toThrow(/reserved/);
    expect(() =>
      renderZoneTopology({
        hub,
        zones: [
          { zone: 'zone-a', clientPort: 3, storeDir: '/tmp/a' },
          { zone: 'zone-a', clientPort: 4, storeDir: '/tmp/b' },
        ],
      }),
    ).toThrow(/only once/);
    expect(() => aggregateStreamConfig('Zone-a', ['zone-a'])).toThrow(/same stream/);
  });
});

describe('three-zone topology (leaf-node domains)', () => {
  let running: RunningTopology;
  const connections: NatsConnection[] = [];
  let clock = Date.now();
  /** Strictly increasing observedAt values, so every publish is a newer event. */
  const nextTime = (): number => ++clock;

  const zone = (name: Zone): RenderedZone => {
    const found = running.topology.zones.find((z) => z.zone === name);
    if (!found) throw new Error(`no zone ${name}`);
    return found;
  };
  const open = async (name: Zone, role: keyof RenderedZone['users']): Promise<NatsConnection> => {
    const credentials: Credentials = zone(name).users[role];
    const nc = await connect({ servers: zone(name).url, ...credentials, reconnectTimeWait: 200 });
    connections.push(nc);
    return nc;
  };
  const clients = new Map<string, NatsConnection>();
  /** One connection per (zone, role), reused across tests. */
  const client = async (name: Zone, role: keyof RenderedZone['users']): Promise<NatsConnection> => {
    const key = `${name}/${role}`;
    const existing = clients.get(key);
    if (existing) return existing;
    const nc = await open(name, role);
    clients.set(key, nc);
    return nc;
  };

  const readiness = (z: Zone, pod: string): ReadinessEvent => ({
    v: 1,
    kind: 'readiness',
    pool: POOL,
    zone: z,
    pod,
    address: `10.0.${ZONES.indexOf(z)}.1:8000`,
    ready: true,
    observedAt: nextTime(),
  });
  /** Publishes as the zone's collector, acked, with a Nats-Msg-Id (as readiness is published). */
  const publish = async (z: Zone, event: ReadinessEvent, as: Zone = z) => {
    const js = jetstream(await client(as, 'collector'));
    return js.publish(subjectFor(event), encodeEvent(event), { msgID: `${event.pod}@${event.observedAt}` });
  };

  /**
   * Everything a new ordered consumer on the zone's aggregate replays (last per subject), read as
   * the zone's EPP user, exactly as an EPP rebuilds its view: subject -> observedAt.
   */
  const replay = async (z: Zone): Promise<Map<string, number>> => {
    const js = jetstream(await client(z, 'epp'));
    const consumer = await js.consumers.get(AGGREGATE_STREAM, {
      filter_subjects: `spillway.v1.${POOL}.>`,
      deliver_policy: DeliverPolicy.LastPerSubject,
    });
    const seen = new Map<string, number>();
    try {
      for (;;) {
        const msg = await consumer.next({ expires: 2_000 });
        if (!msg) break;
        const decoded = decodeEvent(msg.data, msg.subject);
        if (!decoded.ok) throw new Error(`undecodable event on ${msg.subject}`);
        seen.set(msg.subject, decoded.event.observedAt);
        if (msg.info.pending === 0) break;
      }
    } finally {
      await consumer.delete().catch(() => undefined);
    }
    return seen;
  };
  const expectReplay = async (z: Zone, expected: ReadonlyMap<string, number>): Promise<void> => {
    const seen = await replay(z);
    for (const [subject, observedAt] of expected) expect(seen.get(subject), `${z} aggregate, ${subject}`).toBe(observedAt);
  };

  const admin = async (z: Zone): Promise<JetStreamManager> => jetstreamManager(await client(z, 'admin'));

  beforeAll(async () => {
    running = await startTopology(ZONES);
    // Streams need JetStream up in each zone; the leaf links come up on their own.
    for (const z of ZONES) {
      await eventually(async () => provisionZoneStreams(await admin(z), z, ZONES), SETTLE_MS, 200);
    }
    await eventually(async () => expect(await leafCount(running.hub)).toBe(ZONES.length), SETTLE_MS, 100);
  }, 60_000);

  afterAll(async () => {
    await Promise.all(connections.map((nc) => nc.close().catch(() => undefined)));
    await running?.stop();
  });

  it('provisioning is idempotent and leaves existing streams alone', async () => {
    const again = await provisionZoneStreams(await admin('zone-a'), 'zone-a', ZONES);
    expect(again).toEqual({ created: [], existing: ['SPILLWAY_ZONE-A', AGGREGATE_STREAM] });
  });

  it("an event published in zone A's subjects reaches the aggregates of zones B and C", async () => {
    const event = readiness('zone-a', 'vllm-a-0');
    const ack = await publish('zone-a', event);
    expect(ack.stream).toBe('SPILLWAY_ZONE-A');
    const expected = new Map([[subjectFor(event), event.observedAt]]);
    for (const z of ZONES) await eventually(() => expectReplay(z, expected), SETTLE_MS, 200);
  }, 60_000);

  it("zone A's collector may publish only zone A's subjects", async () => {
    await expect(publish('zone-a', readiness('zone-a', 'vllm-a-1'))).resolves.toMatchObject({ stream: 'SPILLWAY_ZONE-A' });
    const foreign = readiness('zone-b', 'vllm-b-9');
    await expect(publish('zone-b', foreign, 'zone-a')).rejects.toThrow(/permissions violation/i);
    // Nor may it change JetStream: creating a stream is refused.
    const jsm = await jetstreamManager(await client('zone-a', 'collector'));
    await expect(jsm.streams.add({ name: 'ROGUE', subjects: ['rogue.>'] })).rejects.toThrow(/permissions violation/i);
  });

  it('an EPP user can read its aggregate but publish nothing', async () => {
    const nc = await client('zone-a', 'epp');
    const event = readiness('zone-a', 'vllm-a-2');
    const js = jetstream(nc);
    await expect(js.publish(subjectFor(event), encodeEvent(event))).rejects.toThrow(/permissions violation/i);
    const jsm = await jetstreamManager(nc);
    await expect(jsm.streams.delete(AGGREGATE_STREAM)).rejects.toThrow(/permissions violation/i);
    await expect(jsm.streams.update(AGGREGATE_STREAM, { subjects: ['spillway.v1.>'] })).rejects.toThrow(/permissions violation/i);
    // Reading works: stream info and a direct get of the last value of a subject.
    expect((await jsm.streams.info(AGGREGATE_STREAM)).config.sources).toHaveLength(ZONES.length);
    const published = readiness('zone-a', 'vllm-a-3');
    await publish('zone-a', published);
    const stored = await eventually(
      async () => {
        const msg = await jsm.direct.getMessage(AGGREGATE_STREAM, { last_by_subj: subjectFor(published) });
        if (!msg) throw new Error('not in the aggregate yet');
        return msg;
      },
      SETTLE_MS,
      100,
    );
    expect(stored.json<ReadinessEvent>().observedAt).toBe(published.observedAt);
  });

  it("every server refuses a message past the state and KV batches' bound (max_payload), before any EPP sees it", async () => {
    const nc = await client('zone-a', 'epp');
    expect(nc.info?.max_payload).toBe(NATS_MAX_PAYLOAD);
    // A client that ignores the limit the server announced: refused, and disconnected.
    const { user, pass } = zone('zone-a').users.epp;
    const url = new URL(zone('zone-a').url);
    const answer = await new Promise<string>((resolve, reject) => {
      const socket = createConnection({ host: url.hostname, port: Number(url.port) });
      let text = '';
      socket.on('data', (chunk) => {
        text += chunk.toString('latin1');
        if (text.includes('-ERR')) {
          socket.destroy();
          resolve(text);
        }
      });
      socket.on('error', reject);
      socket.once('data', () => {
        socket.write(`CONNECT ${JSON.stringify({ user, pass, verbose: false, pedantic: false })}\r\n`);
        // The server refuses on the PUB line's size, before reading any payload; writing the payload
        // too would race its close (EPIPE) and could lose its -ERR.
        socket.write(`PUB spillway.state.${POOL}.zone-a.forged ${NATS_MAX_PAYLOAD + 1}\r\n`);
      });
    });
    expect(answer).toMatch(/Maximum Payload/i);
  });

  it('with the hub down each zone keeps working locally; after it returns the aggregates converge', async () => {
    // Before the cut: one pod per zone, everywhere.
    const before = new Map<string, number>();
    for (const z of ZONES) {
      const event = readiness(z, `vllm-${z}-cut`);
      await publish(z, event);
      before.set(subjectFor(event), event.observedAt);
    }
    for (const z of ZONES) await eventually(() => expectReplay(z, before), SETTLE_MS, 200);

    await running.hub.kill();
    await eventually(
      async () => {
        for (const z of ZONES) expect(await leafCount(running.zones.get(z)!)).toBe(0);
      },
      SETTLE_MS,
      100,
    );

    // During the cut: every zone accepts new local events, and a new ordered consumer on its
    // local aggregate (what a restarting EPP creates) replays them.
    const during = new Map<string, number>();
    for (const z of ZONES) {
      const event = readiness(z, `vllm-${z}-cut`);
      await expect(publish(z, event)).resolves.toMatchObject({ stream: `SPILLWAY_${z.toUpperCase()}` });
      during.set(subjectFor(event), event.observedAt);
    }
    for (const z of ZONES) {
      const own = [...during].filter(([subject]) => subject.includes(`.${z}.`));
      await eventually(() => expectReplay(z, new Map(own)), SETTLE_MS, 200);
      // Remote data just stops: the other zones' pods still have their pre-cut values here
      // (there is no path between zones without the hub, so this cannot be a race).
      const seen = await replay(z);
      for (const [subject, observedAt] of before) {
        if (!subject.includes(`.${z}.`)) expect(seen.get(subject), `${z} sees ${subject} as before the cut`).toBe(observedAt);
      }
    }

    await running.hub.start();
    // After the cut: every aggregate converges on the latest event of every zone.
    for (const z of ZONES) await eventually(() => expectReplay(z, during), 45_000, 250);

    // And the zone streams never captured another zone's subjects through the leaf links.
    for (const z of ZONES) {
      const info = await (await admin(z)).streams.info(`SPILLWAY_${z.toUpperCase()}`, { subjects_filter: '>' });
      const subjects = Object.keys(info.state.subjects ?? {});
      expect(subjects.length).toBeGreaterThan(0);
      for (const subject of subjects) expect(subject).toContain(`.${z}.`);
    }
  }, 120_000);
});
