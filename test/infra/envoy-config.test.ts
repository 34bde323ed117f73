/**
 * infra/envoy: one config per zone of the topology, each read into Envoy's v3 Bootstrap with
 * Envoy's own .proto files (envoy-schema.ts: unknown fields, wrong types, unknown type URLs fail),
 * and checked for what the EPP protocol relies on (filter order, ext_proc modes and metadata
 * namespaces, one override_host source, the served-endpoint key, retries, stripped headers, the
 * HTTP/2 EPP cluster with its gRPC health checks) and for what spillway-xds serves (the node's
 * locality, the ADS stream, the EDS model-server cluster, the ECDS subset filter, the EPP and xDS
 * clusters with every zone by priority). There is no Envoy binary here to run `envoy --mode validate`.
 */
import { readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { beforeAll, describe, expect, it } from 'vitest';
import { ADS_SERVICE_NAME, GATEWAY_ZONE_KEY, loadXdsConfig, SUBSET_HINT_RESOURCE } from '@spillway/xds';
import { eppAddressOf, envoyFileOf, SUBSET_HINT_FILTER, XDS_CLUSTER_NAME, xdsAddressOf } from '../../infra/envoy/render.js';
import { loadTopology } from '../../infra/topology.js';
import { checkMessage, envoyApi } from './envoy-schema.js';
import { at, list, node, readYaml, str, type Node } from './yaml-helpers.js';

const HERE = dirname(fileURLToPath(import.meta.url));
const ENVOY_DIR = join(HERE, '..', '..', 'infra', 'envoy');
const BOOTSTRAP = 'envoy.config.bootstrap.v3.Bootstrap';
const TYPE = 'type.googleapis.com/';
const topology = loadTopology();

/** The http filters and clusters of one config, for the structure checks. */
function partsOf(config: unknown) {
  const listeners = list(config, 'static_resources', 'listeners');
  expect(listeners).toHaveLength(1);
  const manager = list(listeners[0], 'filter_chains', 0, 'filters').find(
    (f) => str(f, 'name') === 'envoy.filters.network.http_connection_manager',
  );
  const hcm = node(manager, 'typed_config');
  const filters = list(hcm, 'http_filters').map((f) => node(f));
  const filter = (name: string): Node => {
    const found = filters.find((f) => f['name'] === name);
    if (!found) throw new Error(`no http filter ${name}`);
    return node(found, 'typed_config');
  };
  const discovered = (name: string): Node => {
    const found = filters.find((f) => f['name'] === name);
    if (!found) throw new Error(`no http filter ${name}`);
    expect(found['typed_config']).toBeUndefined();
    return node(found, 'config_discovery');
  };
  const cluster = (name: string): Node => {
    const found = list(config, 'static_resources', 'clusters').find((c) => str(c, 'name') === name);
    if (!found) throw new Error(`no cluster ${name}`);
    return node(found);
  };
  const routes = list(hcm, 'route_config', 'virtual_hosts').flatMap((vh) => list(vh, 'routes').map((r) => node(r)));
  return { hcm, filters, filter, discovered, cluster, routes };
}

describe("Envoy's schema check (Bootstrap from Envoy's .proto files)", () => {
  let valid: Node;
  beforeAll(() => {
    envoyApi();
    valid = readYaml(join(ENVOY_DIR, envoyFileOf(topology.zones[0]!.name))) as Node;
  }, 60_000);

  it('rejects the misspelt fixture, naming the field and its message', () => {
    const problems = checkMessage(readYaml(join(HERE, 'fixtures', 'envoy-misspelt.yaml')), BOOTSTRAP);
    expect(problems).toEqual([
      'static_resources.listeners[0].filter_chains[0].filters[0].typed_config.http_filters[0].typed_config.procesing_mode: unknown field of envoy.extensions.filters.http.ext_proc.v3.ExternalProcessor',
    ]);
  });

  it('rejects a field in the wrong place, a wrong type, an unknown enum name, an unknown type URL and two members of a oneof', () => {
    const mutate = (change: (config: Node) => void): string[] => {
      const copy = structuredClone(valid);
      change(copy);
      return checkMessage(copy, BOOTSTRAP);
    };
    const hcmOf = (config: Node) => partsOf(config).hcm;
    const extProcOf = (config: Node) => partsOf(config).filter('envoy.filters.http.ext_proc');
    // retry_policy belongs to the route action, not to the route.
    expect(mutate((c) => (partsOf(c).routes[0]!['retry_policy'] = { num_retries: 2 })).join('\n')).toMatch(
      /routes\[0\]\.retry_policy: unknown field of envoy\.config\.route\.v3\.Route$/,
    );
    expect(mutate((c) => (hcmOf(c)['stream_idle_timeout'] = 600)).join('\n')).toMatch(/stream_idle_timeout: a Duration is a string/);
    expect(mutate((c) => (node(extProcOf(c), 'processing_mode')['response_body_mode'] = 'FULL_DUPLEX')).join('\n')).toMatch(
      /"FULL_DUPLEX" is not a value of .*BodySendMode/,
    );
    expect(mutate((c) => (extProcOf(c)['@type'] = `${TYPE}envoy.extensions.filters.http.ext_proc.v3.ExternalProcesor`)).join('\n')).toMatch(
      /names no message/,
    );
    expect(mutate((c) => (extProcOf(c)['failure_mode_allow'] = 'no')).join('\n')).toMatch(/failure_mode_allow: expected bool/);
    // A cluster's discovery type and cluster_type are one oneof.
    expect(mutate((c) => (partsOf(c).cluster('spillway_epp')['cluster_type'] = { name: 'x' })).join('\n')).toMatch(/are both set/);
  });
});

describe.each(topology.zones.map((z) => [z.name]))('infra/envoy/envoy-%s.yaml', (zone) => {
  const file = join(ENVOY_DIR, envoyFileOf(zone));
  let config: unknown;
  let parts: ReturnType<typeof partsOf>;

  beforeAll(() => {
    config = readYaml(file);
    parts = partsOf(config);
  });

  it("is a valid Envoy v3 Bootstrap by Envoy's own schema", () => {
    expect(checkMessage(config, BOOTSTRAP)).toEqual([]);
  });

  it('runs the subset filter, then ext_proc, then the router (router last)', () => {
    expect(parts.filters.map((f) => f['name'])).toEqual([SUBSET_HINT_FILTER, 'envoy.filters.http.ext_proc', 'envoy.filters.http.router']);
  });

  it("is its zone's gateway and takes every xDS resource over one ADS stream to spillway-xds", () => {
    const region = topology.zones.find((z) => z.name === zone)!.region;
    expect(node(config, 'node', 'locality')).toEqual({ region, zone });
    const ads = node(config, 'dynamic_resources', 'ads_config');
    expect(ads['api_type']).toBe('GRPC');
    expect(ads['transport_api_version']).toBe('V3');
    expect(list(ads, 'grpc_services')).toEqual([{ envoy_grpc: { cluster_name: 'spillway_xds' } }]);
  });

  it('the subset filter takes its set_metadata config from spillway-xds (ECDS), and by default names the zone and lists no subset', () => {
    expect(SUBSET_HINT_FILTER).toBe(SUBSET_HINT_RESOURCE);
    const discovery = parts.discovered(SUBSET_HINT_FILTER);
    expect(node(discovery, 'config_source')).toMatchObject({ ads: {}, resource_api_version: 'V3' });
    const setMetadata = `${TYPE}envoy.extensions.filters.http.set_metadata.v3.Config`;
    expect(list(discovery, 'type_urls')).toEqual([setMetadata]);
    expect(node(discovery, 'default_config')).toEqual({
      '@type': setMetadata,
      metadata: [{ metadata_namespace: 'envoy.lb.subset_hint', value: { [GATEWAY_ZONE_KEY]: zone } }],
    });
  });

  it('ext_proc streams the request body full duplex, sends only response headers, fails closed, and moves the right metadata', () => {
    const extProc = parts.filter('envoy.filters.http.ext_proc');
    // Response headers carry the served endpoint; bodies stay out of the EPP unless asked for (README).
    expect(node(extProc, 'processing_mode')).toEqual({
      request_header_mode: 'SEND',
      response_header_mode: 'SEND',
      request_body_mode: 'FULL_DUPLEX_STREAMED',
      request_trailer_mode: 'SEND',
      response_body_mode: 'NONE',
      response_trailer_mode: 'SKIP',
    });
    expect(at(extProc, 'failure_mode_allow')).toBe(false);
    expect(list(extProc, 'metadata_options', 'forwarding_namespaces', 'untyped')).toEqual(['envoy.lb', 'envoy.lb.subset_hint']);
    expect(list(extProc, 'metadata_options', 'receiving_namespaces', 'untyped')).toEqual(['envoy.lb']);
    expect(str(extProc, 'grpc_service', 'envoy_grpc', 'cluster_name')).toBe('spillway_epp');
  });

  it('the route strips client routing headers and retries down the list', () => {
    expect(parts.routes).toHaveLength(1);
    const route = parts.routes[0]!;
    expect(list(route, 'request_headers_to_remove')).toEqual(
      expect.arrayContaining([
        'x-gateway-destination-endpoint',
        'x-gateway-destination-endpoint-subset',
        'x-gateway-destination-endpoint-served',
      ]),
    );
    expect(str(route, 'route', 'cluster')).toBe('model_servers');
    const retry = node(route, 'route', 'retry_policy');
    expect(new Set(str(retry, 'retry_on').split(','))).toEqual(new Set(['5xx', 'reset', 'connect-failure']));
    expect(at(retry, 'num_retries')).toBe(2);
    expect(retry['retry_host_predicate']).toBeUndefined();
  });

  it('the model-server cluster takes its endpoints from spillway-xds (EDS) and routes with override_host: one metadata source and the served key', () => {
    const servers = parts.cluster('model_servers');
    expect(servers['type']).toBe('EDS');
    expect(servers['load_assignment']).toBeUndefined();
    // The EDS resource is the one spillway-xds serves by default (--cluster-name).
    expect(node(servers, 'eds_cluster_config')).toEqual({
      service_name: XDS_CLUSTER_NAME,
      eds_config: { ads: {}, resource_api_version: 'V3' },
    });
    expect(loadXdsConfig(['--pool', topology.pool], {})?.flags.clusterName).toBe(XDS_CLUSTER_NAME);
    const policies = list(servers, 'load_balancing_policy', 'policies');
    expect(policies).toHaveLength(1);
    const overrideHost = node(policies[0], 'typed_extension_config', 'typed_config');
    expect(str(overrideHost, '@type')).toBe(`${TYPE}envoy.extensions.load_balancing_policies.override_host.v3.OverrideHost`);
    expect(list(overrideHost, 'override_host_sources')).toEqual([
      { metadata: { key: 'envoy.lb', path: [{ key: 'x-gateway-destination-endpoint' }] } },
    ]);
    expect(node(overrideHost, 'selected_host_key')).toEqual({ key: 'envoy.lb', path: [{ key: 'x-gateway-destination-endpoint-served' }] });
    expect(servers['lb_policy']).toBeUndefined();
  });

  /** Each locality of a cluster: zone, priority and the one address it lists. */
  const localitiesOf = (cluster: Node) =>
    list(cluster, 'load_assignment', 'endpoints').map((l) => {
      const endpoints = list(l, 'lb_endpoints');
      expect(endpoints).toHaveLength(1);
      return {
        zone: str(l, 'locality', 'zone'),
        region: str(l, 'locality', 'region'),
        priority: at(l, 'priority'),
        host: str(endpoints[0], 'endpoint', 'address', 'socket_address', 'address'),
        port: at(endpoints[0], 'endpoint', 'address', 'socket_address', 'port_value'),
      };
    });

  /** The committed topology's zones by priority from each zone: own 0, same region 1, the rest next. */
  const EXPECTED_PRIORITIES: Record<string, Record<string, number>> = {
    'zone-a': { 'zone-a': 0, 'zone-b': 1, 'zone-c': 2 },
    'zone-b': { 'zone-b': 0, 'zone-a': 1, 'zone-c': 2 },
    'zone-c': { 'zone-c': 0, 'zone-a': 1, 'zone-b': 1 },
  };

  it("the EPP cluster speaks HTTP/2 to every zone's EPP Service, this zone's at priority 0 and the others by distance, each health-checked", () => {
    const epp = parts.cluster('spillway_epp');
    const options = node(epp, 'typed_extension_protocol_options', 'envoy.extensions.upstreams.http.v3.HttpProtocolOptions');
    expect(node(options, 'explicit_http_config')).toHaveProperty('http2_protocol_options');
    const checks = list(epp, 'health_checks');
    expect(str(checks[0], 'grpc_health_check', 'service_name')).toBe('envoy.service.ext_proc.v3.ExternalProcessor');
    const localities = localitiesOf(epp);
    expect(localities.map((l) => l.zone).sort()).toEqual(topology.zones.map((z) => z.name).sort());
    expect(localities[0]).toMatchObject({ zone, priority: 0, ...eppAddressOf(topology, zone) });
    expect(Object.fromEntries(localities.map((l) => [l.zone, l.priority]))).toEqual(EXPECTED_PRIORITIES[zone]);
    for (const l of localities) {
      expect({ host: l.host, port: l.port }).toEqual(eppAddressOf(topology, l.zone));
      expect(l.region).toBe(topology.zones.find((z) => z.name === l.zone)!.region);
    }
    // The address is the zone's EPP Service of infra/k8s, on its ext_proc port.
    const manifests = readFileSync(join(ENVOY_DIR, '..', 'k8s', 'epp.yaml'), 'utf8');
    expect(eppAddressOf(topology, zone).host).toBe(`spillway-epp-${zone}.${topology.namespace}.svc.cluster.local`);
    expect(manifests).toContain(`name: spillway-epp-${zone}\n`);
  });

  it("the xDS cluster reaches this zone's spillway-xds first, the others by distance, over HTTP/2, health-checked on the ADS service", () => {
    const xds = parts.cluster('spillway_xds');
    const options = node(xds, 'typed_extension_protocol_options', 'envoy.extensions.upstreams.http.v3.HttpProtocolOptions');
    expect(node(options, 'explicit_http_config')).toHaveProperty('http2_protocol_options');
    expect(str(list(xds, 'health_checks')[0], 'grpc_health_check', 'service_name')).toBe(ADS_SERVICE_NAME);
    const localities = localitiesOf(xds);
    expect(localities[0]).toMatchObject({ zone, priority: 0, ...xdsAddressOf(topology, zone) });
    expect(Object.fromEntries(localities.map((l) => [l.zone, l.priority]))).toEqual(EXPECTED_PRIORITIES[zone]);
    for (const l of localities) expect({ host: l.host, port: l.port }).toEqual(xdsAddressOf(topology, l.zone));
    const manifests = readFileSync(join(ENVOY_DIR, '..', 'k8s', 'xds.yaml'), 'utf8');
    expect(manifests).toContain(`name: spillway-xds-${zone}\n`);
  });
});
