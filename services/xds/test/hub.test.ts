/**
 * The hub (hub.ts): requests are held until the view has caught up; a node's zone is checked
 * (`--zones`, else the view) and an unknown one ends the stream with a clear error; nodes of one
 * place share resources built once per change; a change is pushed only to places whose content
 * changed; capacity and memory are bounded and accounted.
 */
import { describe, expect, it } from 'vitest';
import {
  ClusterLoadAssignment,
  LIMITS,
  TYPE_URLS,
  XdsHub,
  type DiscoveryRequest,
  type HubOptions,
  type Outgoing,
  type XdsSession,
} from '../src/index.js';
import { CLUSTER, POOL, THREE_ZONES, fleetOf, readinessOf } from './fixtures.js';

const OPTIONS: HubOptions = { pool: POOL, clusterName: CLUSTER, zones: [], maxNodes: 10, controlPlane: 'test' };

function setup(options: Partial<HubOptions> = {}) {
  const fleet = fleetOf(THREE_ZONES);
  const sent: { session: XdsSession; out: Outgoing }[] = [];
  const closed: { session: XdsSession; code: string; message: string }[] = [];
  const refused: string[] = [];
  const hub = new XdsHub(
    () => fleet.pool(POOL),
    { ...OPTIONS, ...options },
    { send: (session, out) => sent.push({ session, out }), close: (session, code, message) => closed.push({ session, code, message }) },
    { request: () => undefined, refused: (_s, reason) => refused.push(reason) },
  );
  return { fleet, hub, sent, closed, refused };
}

function subscribe(zone: string, typeUrl: string = TYPE_URLS.eds, names = [CLUSTER]): DiscoveryRequest {
  return {
    versionInfo: '',
    node: {
      id: `envoy-${zone}`,
      cluster: 'gw',
      locality: { region: '', zone, subZone: '' },
      userAgentName: 'envoy',
      userAgentVersionType: undefined,
    },
    resourceNames: names,
    typeUrl,
    responseNonce: '',
    errorDetail: undefined,
  };
}

/** The client's ACK of a response: its nonce and version, and the names it holds (the resources' names). */
function ack(out: Outgoing): DiscoveryRequest {
  const names = out.response.typeUrl === TYPE_URLS.ecds ? ['spillway-subset-hint'] : [CLUSTER];
  return {
    versionInfo: out.version,
    node: undefined,
    resourceNames: names,
    typeUrl: out.response.typeUrl,
    responseNonce: out.response.nonce,
    errorDetail: undefined,
  };
}

const zonesOf = (out: Outgoing) =>
  ClusterLoadAssignment.decode(out.response.resources[0]!.value).endpoints.map((l) => [l.locality?.zone, l.priority]);

describe('XdsHub', () => {
  it('holds requests until the view caught up, then answers with priorities from the node zone', () => {
    const { hub, sent } = setup();
    const a = hub.open()!;
    hub.onRequest(a, subscribe('zone-a'));
    expect(sent).toHaveLength(0);
    hub.setReady();
    expect(sent).toHaveLength(1);
    expect(zonesOf(sent[0]!.out)).toEqual([
      ['zone-a', 0],
      ['zone-b', 1],
      ['zone-c', 2],
    ]);
    const c = hub.open()!;
    hub.onRequest(c, subscribe('zone-c'));
    // zone-c's region (r2, from the view) has no other zone: r1's zones are one level, 1.
    expect(zonesOf(sent[1]!.out)).toEqual([
      ['zone-c', 0],
      ['zone-a', 1],
      ['zone-b', 1],
    ]);
  });

  it('ends the stream of a node whose zone is unknown, naming the zone and the known ones', () => {
    const { hub, closed, refused, sent } = setup();
    hub.setReady();
    const x = hub.open()!;
    hub.onRequest(x, subscribe('zone-x'));
    expect(sent).toHaveLength(0);
    expect(closed).toHaveLength(1);
    expect(closed[0]).toMatchObject({ code: 'INVALID_ARGUMENT' });
    expect(closed[0]!.message).toMatch(
      /node\.locality\.zone "zone-x" is not a zone of pool llama \(zones from the pods of pool llama: zone-a, zone-b, zone-c\)/,
    );
    expect(refused).toEqual(['unknown-zone']);
    expect(hub.nodeCount).toBe(0);
  });

  it('with --zones, accepts a listed zone without pods and refuses one that has pods but is not listed', () => {
    const { hub, closed, sent } = setup({ zones: ['zone-a', 'zone-d'] });
    hub.setReady();
    hub.onRequest(hub.open()!, subscribe('zone-d'));
    expect(sent).toHaveLength(1);
    expect(zonesOf(sent[0]!.out).map(([, p]) => p)).toEqual([0, 0, 0]);
    hub.onRequest(hub.open()!, subscribe('zone-b'));
    expect(closed[0]?.message).toMatch(/zones from --zones: zone-a, zone-d/);
  });

  it('pushes a change only to the places whose resources changed, and a held change after the ACK', () => {
    const { hub, sent, fleet } = setup();
    hub.setReady();
    const a = hub.open()!;
    const c = hub.open()!;
    hub.onRequest(a, subscribe('zone-a', TYPE_URLS.ecds, ['spillway-subset-hint']));
    hub.onRequest(c, subscribe('zone-c', TYPE_URLS.ecds, ['spillway-subset-hint']));
    expect(sent).toHaveLength(2);
    for (const { session, out } of sent.splice(0)) hub.onRequest(session, ack(out));
    // A zone-a pod goes unready: zone-a's subset changes, zone-c's does not.
    fleet.apply(readinessOf({ ...THREE_ZONES[0]!, ready: false }, 2000), 2000);
    hub.changed();
    expect(hub.flush()).toBe(1);
    expect(sent.map((s) => s.session)).toEqual([a]);
    // A second change before zone-a's node ACKs: held, then sent as the newest version on the ACK.
    fleet.apply(readinessOf({ ...THREE_ZONES[1]!, ready: false }, 2001), 2001);
    hub.changed();
    expect(hub.flush()).toBe(0);
    hub.onRequest(a, ack(sent[0]!.out));
    expect(sent).toHaveLength(2);
    expect(sent[1]!.out.response.nonce).not.toBe(sent[0]!.out.response.nonce);
    // Nothing changed: a flush rebuilds nothing and sends nothing.
    expect(hub.flush()).toBe(0);
  });

  it('refuses nodes past maxNodes and forgets closed ones; nodes of a place share one set of resources', () => {
    const { hub } = setup({ maxNodes: 3 });
    hub.setReady();
    const sessions = [hub.open()!, hub.open()!, hub.open()!];
    expect(hub.open()).toBeUndefined();
    for (const s of sessions) hub.onRequest(s, subscribe('zone-a'));
    expect(hub.memory()).toMatchObject({ nodes: 3, places: 1 });
    hub.close(sessions[0]!);
    expect(hub.open()).toBeDefined();
    expect(hub.counters.refused.get('capacity')).toBe(1);
  });

  it("accounts each node's state and the shared resources; many changes leave them as they were", () => {
    const { hub, fleet, sent } = setup({ maxNodes: 100 });
    hub.setReady();
    for (let i = 0; i < 90; i++) {
      const zone = THREE_ZONES[i % 5]!.zone;
      const s = hub.open()!;
      hub.onRequest(s, subscribe(zone));
      hub.onRequest(s, subscribe(zone, TYPE_URLS.ecds, ['spillway-subset-hint']));
    }
    const answer = () => {
      for (const { session, out } of sent.splice(0)) hub.onRequest(session, ack(out));
    };
    answer();
    const before = hub.memory();
    expect(before.maxNodeBytes).toBeLessThanOrEqual(LIMITS.nodeBytes);
    for (let i = 0; i < 200; i++) {
      fleet.apply(readinessOf({ ...THREE_ZONES[i % 5]!, ready: i % 2 === 1 }, 3000 + i), 3000 + i);
      hub.changed();
      hub.flush();
      answer();
    }
    // Back to where it started: every pod ready again.
    for (const pod of THREE_ZONES) fleet.apply(readinessOf(pod, 4000), 4000);
    hub.changed();
    hub.flush();
    answer();
    expect(hub.memory()).toEqual(before);
  });
});
