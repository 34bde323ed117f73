/**
 * infra/envoy/envoy.yaml: structure checks (there is no Envoy binary here to run
 * `envoy --mode validate`). Each check is one of the things the EPP protocol relies on
 * (DESIGN §4, reference/envoy.md §2, §3, §6.2).
 */
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { beforeAll, describe, expect, it } from 'vitest';
import { at, list, node, readYaml, str, type Node } from './yaml-helpers.js';

const ENVOY_YAML = join(dirname(fileURLToPath(import.meta.url)), '..', '..', 'infra', 'envoy', 'envoy.yaml');
const TYPE = 'type.googleapis.com/';

describe('infra/envoy/envoy.yaml', () => {
  let config: unknown;
  let hcm: Node;
  let filters: Node[];
  const filter = (name: string): Node => {
    const found = filters.find((f) => f['name'] === name);
    if (!found) throw new Error(`no http filter ${name}`);
    return node(found, 'typed_config');
  };
  const cluster = (name: string): Node => {
    const found = list(config, 'static_resources', 'clusters').find((c) => str(c, 'name') === name);
    if (!found) throw new Error(`no cluster ${name}`);
    return node(found);
  };
  const routes = (): Node[] =>
    list(hcm, 'route_config', 'virtual_hosts').flatMap((vh) => list(vh, 'routes').map((r) => node(r)));

  beforeAll(() => {
    config = readYaml(ENVOY_YAML);
    const listeners = list(config, 'static_resources', 'listeners');
    expect(listeners).toHaveLength(1);
    const network = list(listeners[0], 'filter_chains', 0, 'filters');
    const manager = network.find((f) => str(f, 'name') === 'envoy.filters.network.http_connection_manager');
    hcm = node(manager, 'typed_config');
    filters = list(hcm, 'http_filters').map((f) => node(f));
  });

  it('runs set_metadata, then ext_proc, then the router (router last)', () => {
    expect(filters.map((f) => f['name'])).toEqual([
      'envoy.filters.http.set_metadata',
      'envoy.filters.http.ext_proc',
      'envoy.filters.http.router',
    ]);
    expect(str(hcm, '@type')).toBe(`${TYPE}envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager`);
    expect(str(filter('envoy.filters.http.router'), '@type')).toBe(`${TYPE}envoy.extensions.filters.http.router.v3.Router`);
  });

  it('set_metadata writes a zone-local subset of ip:port strings into envoy.lb.subset_hint', () => {
    const setMetadata = filter('envoy.filters.http.set_metadata');
    expect(str(setMetadata, '@type')).toBe(`${TYPE}envoy.extensions.filters.http.set_metadata.v3.Config`);
    const entries = list(setMetadata, 'metadata');
    expect(entries).toHaveLength(1);
    expect(str(entries[0], 'metadata_namespace')).toBe('envoy.lb.subset_hint');
    const subset = list(entries[0], 'value', 'x-gateway-destination-endpoint-subset');
    expect(subset.length).toBeGreaterThan(0);
    for (const entry of subset) expect(entry).toMatch(/^\d+\.\d+\.\d+\.\d+:\d+$/);
    // The subset names pods the model-server cluster knows, all in this gateway's zone.
    const zoneA = list(cluster('model_servers'), 'load_assignment', 'endpoints').find((l) => str(l, 'locality', 'zone') === 'zone-a');
    const zoneAAddresses = list(zoneA, 'lb_endpoints').map(
      (e) => `${str(e, 'endpoint', 'address', 'socket_address', 'address')}:${String(at(e, 'endpoint', 'address', 'socket_address', 'port_value'))}`,
    );
    expect([...subset].sort()).toEqual([...zoneAAddresses].sort());
  });

  it('ext_proc is full duplex both ways with trailers sent, fails closed, and moves the right metadata', () => {
    const extProc = filter('envoy.filters.http.ext_proc');
    expect(str(extProc, '@type')).toBe(`${TYPE}envoy.extensions.filters.http.ext_proc.v3.ExternalProcessor`);
    expect(node(extProc, 'processing_mode')).toEqual({
      request_header_mode: 'SEND',
      response_header_mode: 'SEND',
      request_body_mode: 'FULL_DUPLEX_STREAMED',
      response_body_mode: 'FULL_DUPLEX_STREAMED',
      request_trailer_mode: 'SEND',
      response_trailer_mode: 'SEND',
    });
    expect(at(extProc, 'failure_mode_allow')).toBe(false);
    expect(str(extProc, 'message_timeout')).toMatch(/^\d+s$/);
    expect(list(extProc, 'metadata_options', 'forwarding_namespaces', 'untyped')).toEqual(['envoy.lb', 'envoy.lb.subset_hint']);
    expect(list(extProc, 'metadata_options', 'receiving_namespaces', 'untyped')).toEqual(['envoy.lb']);
    expect(str(extProc, 'grpc_service', 'envoy_grpc', 'cluster_name')).toBe('spillway_epp');
    cluster('spillway_epp');
  });

  it('the route strips client routing headers and retries down the list', () => {
    const all = routes();
    expect(all).toHaveLength(1);
    const route = all[0]!;
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
    // A host predicate would make override_host consume list entries without trying them.
    expect(retry['retry_host_predicate']).toBeUndefined();
  });

  it('the model-server cluster uses override_host with exactly one source, the envoy.lb metadata key', () => {
    const servers = cluster('model_servers');
    const policies = list(servers, 'load_balancing_policy', 'policies');
    expect(policies).toHaveLength(1);
    expect(str(policies[0], 'typed_extension_config', 'name')).toBe('envoy.load_balancing_policies.override_host');
    const overrideHost = node(policies[0], 'typed_extension_config', 'typed_config');
    expect(str(overrideHost, '@type')).toBe(`${TYPE}envoy.extensions.load_balancing_policies.override_host.v3.OverrideHost`);
    const sources = list(overrideHost, 'override_host_sources');
    expect(sources).toEqual([{ metadata: { key: 'envoy.lb', path: [{ key: 'x-gateway-destination-endpoint' }] } }]);
    expect(node(overrideHost, 'selected_host_key')).toEqual({ key: 'envoy.lb', path: [{ key: 'x-gateway-destination-endpoint-served' }] });
    const fallback = list(overrideHost, 'fallback_policy', 'policies');
    expect(str(fallback[0], 'typed_extension_config', 'name')).toBe('envoy.load_balancing_policies.round_robin');
    expect(str(fallback[0], 'typed_extension_config', 'typed_config', '@type')).toBe(
      `${TYPE}envoy.extensions.load_balancing_policies.round_robin.v3.RoundRobin`,
    );
    // lb_policy would be ignored next to load_balancing_policy; ORIGINAL_DST would read a header.
    expect(servers['lb_policy']).toBeUndefined();
    expect(servers['type']).not.toBe('ORIGINAL_DST');
  });

  it('the model-server cluster holds every zone, so cross-zone fallbacks are known hosts', () => {
    const zones = list(cluster('model_servers'), 'load_assignment', 'endpoints').map((l) => str(l, 'locality', 'zone'));
    expect(new Set(zones)).toEqual(new Set(['zone-a', 'zone-b', 'zone-c']));
  });

  it('the EPP cluster speaks HTTP/2 on 9002 and health-checks the ExternalProcessor gRPC service', () => {
    const epp = cluster('spillway_epp');
    const options = node(epp, 'typed_extension_protocol_options', 'envoy.extensions.upstreams.http.v3.HttpProtocolOptions');
    expect(str(options, '@type')).toBe(`${TYPE}envoy.extensions.upstreams.http.v3.HttpProtocolOptions`);
    expect(node(options, 'explicit_http_config')).toHaveProperty('http2_protocol_options');
    const checks = list(epp, 'health_checks');
    expect(checks).toHaveLength(1);
    expect(str(checks[0], 'grpc_health_check', 'service_name')).toBe('envoy.service.ext_proc.v3.ExternalProcessor');
    const endpoints = list(epp, 'load_assignment', 'endpoints', 0, 'lb_endpoints');
    expect(endpoints.length).toBeGreaterThan(0);
    for (const e of endpoints) expect(at(e, 'endpoint', 'address', 'socket_address', 'port_value')).toBe(9002);
  });
});
