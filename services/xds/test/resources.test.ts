/**
 * What a node is told, from the view: priorities by distance (contiguous, @spillway/fleet's rule), one locality per zone
 * with its region and weight, no duplicate address, only routable pods; the subset hint with the
 * node zone's pods and its zone; the proxyless gRPC resources; versions that follow the content.
 */
import { describe, expect, it } from 'vitest';
import {
  Cluster,
  ClusterLoadAssignment,
  HttpConnectionManager,
  Listener,
  RouteConfiguration,
  SetMetadataConfig,
  TYPE_URLS,
  TypedExtensionConfig,
  clusterLoadAssignment,
  placeResources,
  staticResources,
  subsetHintConfig,
  zonesByDistance,
} from '../src/index.js';
import { CLUSTER, POOL, THREE_ZONES, fleetOf, readinessOf } from './fixtures.js';

const zoneA = { zone: 'zone-a', region: 'r1' };

describe('EDS: the ClusterLoadAssignment', () => {
  it('lists every routable pod, one locality per zone with its region, weight and priority, nearest first', () => {
    const pool = fleetOf(THREE_ZONES).pool(POOL);
    const cla = clusterLoadAssignment(zonesByDistance(pool, zoneA), CLUSTER);
    expect(cla.clusterName).toBe(CLUSTER);
    const summary = cla.endpoints.map((l) => ({
      zone: l.locality?.zone,
      region: l.locality?.region,
      priority: l.priority,
      weight: l.loadBalancingWeight,
      addresses: l.lbEndpoints.map((e) => {
        const endpoint = e.hostIdentifier?.$case === 'endpoint' ? e.hostIdentifier.value : undefined;
        const socket = endpoint?.address?.address?.$case === 'socketAddress' ? endpoint.address.address.value : undefined;
        return `${socket?.address}:${socket?.portSpecifier?.$case === 'portValue' ? socket.portSpecifier.value : '?'}`;
      }),
    }));
    expect(summary).toEqual([
      { zone: 'zone-a', region: 'r1', priority: 0, weight: 2, addresses: ['10.0.1.5:8000', '10.0.1.6:8000'] },
      { zone: 'zone-b', region: 'r1', priority: 1, weight: 2, addresses: ['10.0.2.5:8000', '10.0.2.6:8000'] },
      { zone: 'zone-c', region: 'r2', priority: 2, weight: 1, addresses: ['10.0.3.5:8000'] },
    ]);
  });

  it('leaves out pods not ready, deleted, or known only by metrics, and compacts priorities when the own zone has none', () => {
    const fleet = fleetOf([
      ...THREE_ZONES.slice(2),
      { pod: 'a-0', zone: 'zone-a', region: 'r1', address: '10.0.1.5:8000', ready: false },
      { pod: 'a-1', zone: 'zone-a', region: 'r1', address: '10.0.1.6:8000', ready: false, deleted: true },
    ]);
    fleet.apply(
      {
        v: 1,
        kind: 'metrics',
        pool: POOL,
        zone: 'zone-a',
        pod: 'a-9',
        observedAt: 1000,
        waitingRequests: 0,
        runningRequests: 0,
        kvCacheUsage: 0,
      },
      1000,
    );
    const zones = zonesByDistance(fleet.pool(POOL), zoneA);
    expect(zones.map((z) => [z.zone, z.priority, z.addresses])).toEqual([
      ['zone-b', 0, ['10.0.2.5:8000', '10.0.2.6:8000']],
      ['zone-c', 1, ['10.0.3.5:8000']],
    ]);
  });

  it('never lists one address twice: the nearer zone keeps it', () => {
    const fleet = fleetOf([...THREE_ZONES, { pod: 'c-dup', zone: 'zone-c', region: 'r2', address: '10.0.1.5:8000' }]);
    const all = zonesByDistance(fleet.pool(POOL), zoneA).flatMap((z) => z.addresses);
    expect(all.filter((a) => a === '10.0.1.5:8000')).toHaveLength(1);
    expect(zonesByDistance(fleet.pool(POOL), zoneA)[0]?.addresses).toContain('10.0.1.5:8000');
    // Seen from zone-c, zone-c is nearest and keeps the address.
    const fromC = zonesByDistance(fleet.pool(POOL), { zone: 'zone-c', region: 'r2' });
    expect(fromC[0]?.zone).toBe('zone-c');
    expect(fromC[0]?.addresses).toContain('10.0.1.5:8000');
  });

  it('writes IPv6 addresses without brackets in socket_address', () => {
    const fleet = fleetOf([{ pod: 'v6', zone: 'zone-a', region: 'r1', address: '[2001:db8::5]:8000' }]);
    const cla = clusterLoadAssignment(zonesByDistance(fleet.pool(POOL), zoneA), CLUSTER);
    const endpoint = cla.endpoints[0]?.lbEndpoints[0]?.hostIdentifier;
    expect(
      endpoint?.$case === 'endpoint' && endpoint.value.address?.address?.$case === 'socketAddress'
        ? endpoint.value.address.address.value
        : undefined,
    ).toMatchObject({
      address: '2001:db8::5',
      portSpecifier: { $case: 'portValue', value: 8000 },
    });
  });

  it('is empty for an empty or unknown pool', () => {
    expect(zonesByDistance(undefined, zoneA)).toEqual([]);
    expect(clusterLoadAssignment([], CLUSTER).endpoints).toEqual([]);
  });
});

describe('ECDS: the subset hint', () => {
  it("a set_metadata config with the node zone's pods in envoy.lb.subset_hint and the node's zone", () => {
    const pool = fleetOf(THREE_ZONES).pool(POOL);
    const config = subsetHintConfig(zonesByDistance(pool, zoneA), zoneA);
    expect(config.name).toBe('spillway-subset-hint');
    expect(config.typedConfig?.typeUrl).toBe('type.googleapis.com/envoy.extensions.filters.http.set_metadata.v3.Config');
    const decoded = SetMetadataConfig.decode(config.typedConfig!.value);
    expect(decoded.metadata).toEqual([
      {
        metadataNamespace: 'envoy.lb.subset_hint',
        allowOverwrite: false,
        value: { 'x-gateway-destination-endpoint-subset': ['10.0.1.5:8000', '10.0.1.6:8000'], 'x-spillway-gateway-zone': 'zone-a' },
      },
    ]);
  });

  it("an empty list when the node's zone has no routable pod (the EPP then decides by its mode)", () => {
    const pool = fleetOf(THREE_ZONES.slice(2)).pool(POOL);
    const decoded = SetMetadataConfig.decode(subsetHintConfig(zonesByDistance(pool, zoneA), zoneA).typedConfig!.value);
    expect(decoded.metadata[0]?.value).toEqual({ 'x-gateway-destination-endpoint-subset': [], 'x-spillway-gateway-zone': 'zone-a' });
  });
});

describe('encoded resources and versions', () => {
  it('EDS then ECDS for a place; the version follows the bytes: same view, same version; a change, a new one', () => {
    const fleet = fleetOf(THREE_ZONES);
    const first = placeResources(fleet.pool(POOL), zoneA, CLUSTER);
    expect(first.map((r) => [r.typeUrl, r.name])).toEqual([
      [TYPE_URLS.eds, CLUSTER],
      [TYPE_URLS.ecds, 'spillway-subset-hint'],
    ]);
    expect(ClusterLoadAssignment.decode(first[0]!.any.value).endpoints).toHaveLength(3);
    expect(TypedExtensionConfig.decode(first[1]!.any.value).name).toBe('spillway-subset-hint');
    expect(placeResources(fleetOf(THREE_ZONES).pool(POOL), zoneA, CLUSTER).map((r) => r.version)).toEqual(first.map((r) => r.version));
    // A zone-b pod going unready changes EDS, not zone-a's subset.
    fleet.apply(readinessOf({ ...THREE_ZONES[2]!, ready: false }, 2000), 2000);
    const second = placeResources(fleet.pool(POOL), zoneA, CLUSTER);
    expect(second[0]!.version).not.toBe(first[0]!.version);
    expect(second[1]!.version).toBe(first[1]!.version);
  });

  it('LDS, RDS and CDS route xds:///<cluster> to the EDS cluster over ADS', () => {
    const [lds, rds, cds] = staticResources(CLUSTER);
    const listener = Listener.decode(lds!.any.value);
    expect(listener.name).toBe(CLUSTER);
    const manager = HttpConnectionManager.decode(listener.apiListener!.apiListener!.value);
    expect(manager.routeSpecifier).toMatchObject({
      $case: 'rds',
      value: { routeConfigName: CLUSTER, configSource: { configSourceSpecifier: { $case: 'ads' } } },
    });
    expect(manager.httpFilters.map((f) => f.configType?.$case === 'typedConfig' && f.configType.value.typeUrl)).toEqual([
      'type.googleapis.com/envoy.extensions.filters.http.router.v3.Router',
    ]);
    const route = RouteConfiguration.decode(rds!.any.value);
    expect(route.virtualHosts[0]).toMatchObject({
      domains: ['*'],
      routes: [{ action: { $case: 'route', value: { clusterSpecifier: { $case: 'cluster', value: CLUSTER } } } }],
    });
    const cluster = Cluster.decode(cds!.any.value);
    expect(cluster).toMatchObject({
      name: CLUSTER,
      edsClusterConfig: { serviceName: CLUSTER, edsConfig: { configSourceSpecifier: { $case: 'ads' } } },
    });
  });
});
