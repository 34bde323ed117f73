/**
 * spillway-xds against a real nats-server and real gRPC streams, with events published as the
 * collector publishes them: initial sync; a pod going unready, coming back and a new pod each
 * pushed to connected nodes (polled for, never timed); a NACK that does not loop; a node with an
 * unknown zone or none gets a clear error; 200 nodes and 1,000 readiness changes leave the
 * server's own accounting of memory where it was; health and metrics.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { connect, type NatsConnection } from '@nats-io/transport-node';
import { jetstreamManager } from '@nats-io/jetstream';
import { ensureStream, EventPublisher } from '@spillway/bus';
import { ServingStatus } from '@spillway/protocol';
import { eventually, healthStatus, startNatsServer, type NatsServerHandle } from '@spillway/testkit';
import { ADS_SERVICE_NAME, AdsClient, LIMITS, TYPE_URLS, type RunningXds } from '../src/index.js';
import { readinessOf, THREE_ZONES, type PodSpec } from './fixtures.js';
import { localitiesOf, startTestXds, subsetOf } from './helpers.js';

let nats: NatsServerHandle;
let nc: NatsConnection;
let publisher: EventPublisher;
let xds: RunningXds;
let address: string;
const clients: AdsClient[] = [];
/** Strictly increasing observedAt, so every published event is newer than the last. */
let clock = Date.now();

async function publish(spec: PodSpec): Promise<void> {
  await publisher.publishReadiness(readinessOf(spec, ++clock));
}

function node(zone: string, options: Partial<ConstructorParameters<typeof AdsClient>[1]> = {}): AdsClient {
  const client = new AdsClient(address, {
    node: { id: `envoy-${zone}-${clients.length}`, zone, region: zone === 'zone-c' ? 'r2' : 'r1' },
    subscriptions: [
      { typeUrl: TYPE_URLS.eds, names: ['model-servers'] },
      { typeUrl: TYPE_URLS.ecds, names: ['spillway-subset-hint'] },
    ],
    ...options,
  });
  clients.push(client);
  return client;
}

beforeAll(async () => {
  nats = await startNatsServer();
  nc = await connect({ servers: nats.url });
  await ensureStream(await jetstreamManager(nc), { name: 'SPILLWAY' });
  publisher = new EventPublisher(nc);
  for (const pod of THREE_ZONES) await publish(pod);
  xds = await startTestXds(nats.url);
  address = `127.0.0.1:${xds.port}`;
  await xds.ready;
});

afterAll(async () => {
  for (const c of clients) c.close();
  await xds?.close();
  await nc?.close();
  await nats?.stop();
});

describe('spillway-xds with real NATS and gRPC', () => {
  it('initial sync: EDS with zone priorities and the zone subset, served once the replay caught up', async () => {
    expect(await healthStatus(xds.port, ADS_SERVICE_NAME)).toBe(ServingStatus.SERVING);
    expect(await healthStatus(xds.healthPort, 'readiness')).toBe(ServingStatus.SERVING);
    const a = node('zone-a');
    await eventually(() => expect(a.latest(TYPE_URLS.ecds)).toBeDefined());
    await eventually(() => expect(a.acceptedVersion(TYPE_URLS.eds)).toBeDefined());
    expect(localitiesOf(a.latest(TYPE_URLS.eds))).toEqual([
      { zone: 'zone-a', priority: 0, addresses: ['10.0.1.5:8000', '10.0.1.6:8000'] },
      { zone: 'zone-b', priority: 1, addresses: ['10.0.2.5:8000', '10.0.2.6:8000'] },
      { zone: 'zone-c', priority: 2, addresses: ['10.0.3.5:8000'] },
    ]);
    expect(subsetOf(a.latest(TYPE_URLS.ecds))).toEqual({ subset: ['10.0.1.5:8000', '10.0.1.6:8000'], zone: 'zone-a' });
    const c = node('zone-c');
    await eventually(() =>
      expect(localitiesOf(c.latest(TYPE_URLS.eds)).map((l) => [l.zone, l.priority])).toEqual([
        ['zone-c', 0],
        ['zone-a', 1],
        ['zone-b', 1],
      ]),
    );
  });

  it('pushes a pod going unready, coming back, and a new pod to every connected node', async () => {
    const a = node('zone-a');
    const b = node('zone-b');
    await eventually(() => expect(subsetOf(b.latest(TYPE_URLS.ecds))?.subset).toEqual(['10.0.2.5:8000', '10.0.2.6:8000']));
    await eventually(() => expect(a.latest(TYPE_URLS.eds)).toBeDefined());

    await publish({ ...THREE_ZONES[0]!, ready: false });
    await eventually(() => expect(subsetOf(a.latest(TYPE_URLS.ecds))?.subset).toEqual(['10.0.1.6:8000']));
    await eventually(() =>
      expect(localitiesOf(b.latest(TYPE_URLS.eds)).find((l) => l.zone === 'zone-a')?.addresses).toEqual(['10.0.1.6:8000']),
    );
    // zone-b's subset did not change: it was not sent again.
    const bSubsets = b.count(TYPE_URLS.ecds);

    await publish(THREE_ZONES[0]!);
    await eventually(() => expect(subsetOf(a.latest(TYPE_URLS.ecds))?.subset).toEqual(['10.0.1.5:8000', '10.0.1.6:8000']));
    await eventually(() => expect(localitiesOf(b.latest(TYPE_URLS.eds)).find((l) => l.zone === 'zone-a')?.addresses).toHaveLength(2));

    await publish({ pod: 'b-2', zone: 'zone-b', region: 'r1', address: '10.0.2.7:8000' });
    await eventually(() => expect(subsetOf(b.latest(TYPE_URLS.ecds))?.subset).toEqual(['10.0.2.5:8000', '10.0.2.6:8000', '10.0.2.7:8000']));
    await eventually(() =>
      expect(localitiesOf(a.latest(TYPE_URLS.eds)).find((l) => l.zone === 'zone-b')?.addresses).toContain('10.0.2.7:8000'),
    );
    expect(b.count(TYPE_URLS.ecds)).toBe(bSubsets + 1);
  });

  it('a NACK keeps the node on its last good version and is not answered with the same version again', async () => {
    const healthy = node('zone-a');
    let rejecting = false;
    const picky = node('zone-a', {
      reject: (r) => (rejecting && r.typeUrl === TYPE_URLS.eds ? 'this node rejects every update' : undefined),
    });
    await eventually(() => expect(picky.acceptedVersion(TYPE_URLS.eds)).toBeDefined());
    const good = picky.acceptedVersion(TYPE_URLS.eds);
    rejecting = true;
    const nacksBefore = xds.hub.counters.nacks.get('eds') ?? 0;
    const sentBefore = picky.count(TYPE_URLS.eds);

    await publish({ ...THREE_ZONES[4]!, ready: false });
    await eventually(() => expect(picky.count(TYPE_URLS.eds)).toBe(sentBefore + 1));
    await eventually(() => expect(xds.hub.counters.nacks.get('eds')).toBe(nacksBefore + 1));
    expect(picky.acceptedVersion(TYPE_URLS.eds)).toBe(good);
    // Another change reaches the healthy node; the picky one gets that one new version, once, and
    // never the rejected one again: one response per version, no loop.
    await publish(THREE_ZONES[4]!);
    await eventually(() => expect(localitiesOf(healthy.latest(TYPE_URLS.eds)).map((l) => l.zone)).toContain('zone-c'));
    await eventually(() => expect(picky.count(TYPE_URLS.eds)).toBe(sentBefore + 2));
    await publish({ ...THREE_ZONES[4]!, ready: false });
    await eventually(() => expect(localitiesOf(healthy.latest(TYPE_URLS.eds)).map((l) => l.zone)).not.toContain('zone-c'));
    await eventually(() => expect(picky.count(TYPE_URLS.eds)).toBe(sentBefore + 3));
    expect(xds.hub.counters.nacks.get('eds')).toBe(nacksBefore + 3);
    const metrics = await (await fetch(`http://127.0.0.1:${xds.metricsPort}/metrics`)).text();
    expect(metrics).toMatch(/spillway_xds_nacks_total\{type="eds"\} [1-9]/);
    await publish(THREE_ZONES[4]!);
  });

  it('ends the stream of a node with an unknown zone, or none, with a clear error', async () => {
    const stranger = node('zone-x');
    const end = await stranger.ended;
    expect(end.code).toBe(3); // INVALID_ARGUMENT
    expect(end.details).toMatch(/node\.locality\.zone "zone-x" is not a zone of pool llama/);
    expect(end.details).toMatch(/zone-a, zone-b, zone-c/);
    const nowhere = node('');
    expect((await nowhere.ended).details).toMatch(/node\.locality\.zone is empty/);
    expect(xds.hub.counters.refused.get('unknown-zone')).toBeGreaterThanOrEqual(1);
  });

  it('200 nodes and 1,000 readiness changes leave its accounting of memory per node and in total where it was', async () => {
    for (const c of clients.splice(0)) c.close();
    await eventually(() => expect(xds.hub.nodeCount).toBe(0));
    const zones = ['zone-a', 'zone-b', 'zone-c'];
    const many = Array.from({ length: 200 }, (_, i) => node(zones[i % 3]!));
    // Every node has accepted an EDS listing every pod (the start state: all five, plus b-2, ready).
    const settled = () =>
      eventually(
        () => {
          for (const c of many) {
            expect(localitiesOf(c.latest(TYPE_URLS.eds)).reduce((n, l) => n + l.addresses.length, 0)).toBe(THREE_ZONES.length + 1);
            expect(c.acceptedVersion(TYPE_URLS.eds)).toBe(c.latest(TYPE_URLS.eds)?.versionInfo);
          }
        },
        60_000,
        100,
      );
    await settled();
    const before = xds.hub.memory();
    expect(before).toMatchObject({ nodes: 200, places: 3 });
    expect(before.maxNodeBytes).toBeLessThanOrEqual(LIMITS.nodeBytes);
    expect(before.nodeBytes).toBeLessThanOrEqual(200 * LIMITS.nodeBytes);

    const pods = [...THREE_ZONES, { pod: 'b-2', zone: 'zone-b', region: 'r1', address: '10.0.2.7:8000' }];
    const pending: Promise<unknown>[] = [];
    for (let i = 0; i < 1000; i++)
      pending.push(publisher.publishReadiness(readinessOf({ ...pods[i % pods.length]!, ready: i % 2 === 1 }, ++clock)));
    await Promise.all(pending);
    // The last round left some pods unready; make every pod ready again, so the end state is the start state.
    for (const pod of pods) await publish(pod);
    await settled();
    const after = xds.hub.memory();
    expect(after).toEqual(before);
    expect(xds.hub.counters.changedPlaces).toBeGreaterThan(0);
  }, 120_000);
});
