/**
 * One Envoy (>= 1.38) bootstrap per zone, from the topology: the zone's gateway takes the pool's
 * endpoints (EDS) and its zone-local subset hint (ECDS) from spillway-xds over one ADS stream, calls
 * the EPPs over ext_proc (its own zone's first, the others' by priority) and routes with the
 * override_host policy. The text keeps its comments, so it is a template rather than a serialised
 * object; test/infra/envoy-config.test.ts parses every rendered file into Envoy's v3 Bootstrap with
 * Envoy's own .proto files.
 */
import { prioritiesOf } from '@spillway/fleet';
import type { Topology } from '../topology.js';

/** The port the gateway listens on for inference requests (infra/k8s gateway.yaml exposes it). */
export const GATEWAY_PORT = 8081;
/** spillway-xds's EDS resource name (its --cluster-name default): the gateways' model-server cluster. */
export const XDS_CLUSTER_NAME = 'model-servers';
/** The ECDS resource: the name of the set_metadata filter that takes its config from spillway-xds. */
export const SUBSET_HINT_FILTER = 'spillway-subset-hint';

/** The EPP Service of a zone (infra/k8s epp.yaml), on its ext_proc port. */
export function eppAddressOf(topology: Topology, zone: string): { host: string; port: number } {
  return { host: `spillway-epp-${zone}.${topology.namespace}.svc.cluster.local`, port: 9002 };
}

/** The spillway-xds Service of a zone (infra/k8s xds.yaml), on its ADS port. */
export function xdsAddressOf(topology: Topology, zone: string): { host: string; port: number } {
  return { host: `spillway-xds-${zone}.${topology.namespace}.svc.cluster.local`, port: 18000 };
}

export function envoyFileOf(zone: string): string {
  return `envoy-${zone}.yaml`;
}

/**
 * Every zone's Service as one locality each, at its priority seen from `zone` (own zone 0, same
 * region next, the rest after: the rule spillway-xds uses for EDS), nearest first.
 */
function localitiesByPriority(topology: Topology, zone: string, address: (zone: string) => { host: string; port: number }): string {
  const self = topology.zones.find((z) => z.name === zone);
  if (!self) throw new Error(`zone ${zone} is not in the topology`);
  const places = topology.zones.map((z) => ({ zone: z.name, region: z.region }));
  const priorities = prioritiesOf({ zone, region: self.region }, places);
  return places
    .map((place, i) => ({ ...place, priority: priorities[i] as number }))
    .sort((a, b) => a.priority - b.priority)
    .map((place) => {
      const { host, port } = address(place.zone);
      return [
        `          - locality: { region: ${place.region}, zone: ${place.zone} }`,
        `            priority: ${place.priority}`,
        `            lb_endpoints:`,
        `              - endpoint: { address: { socket_address: { address: ${host}, port_value: ${port} } } }`,
      ].join('\n');
    })
    .join('\n');
}

export function renderEnvoyConfig(topology: Topology, zone: string): string {
  const self = topology.zones.find((z) => z.name === zone);
  if (!self) throw new Error(`zone ${zone} is not in the topology`);
  const eppLocalities = localitiesByPriority(topology, zone, (z) => eppAddressOf(topology, z));
  const xdsLocalities = localitiesByPriority(topology, zone, (z) => xdsAddressOf(topology, z));
  const ownEpp = eppAddressOf(topology, zone);
  const ownXds = xdsAddressOf(topology, zone);

  return `# Spillway: Envoy (>= 1.38) in front of an LLM inference pool: the gateway of zone ${zone}. Its endpoints
# and its zone-local subset come from spillway-xds; it calls the Spillway EPPs over ext_proc.
# Generated from infra/topology.yaml by infra/render.ts (npm run render); do not edit by hand.
#
# Request path: client -> listener -> HCM
#   1. ${SUBSET_HINT_FILTER}  (set_metadata, config from spillway-xds by ECDS) writes
#                    envoy.lb.subset_hint/x-gateway-destination-endpoint-subset = this zone's ready pods
#                    and envoy.lb.subset_hint/x-spillway-gateway-zone = ${zone}
#   2. ext_proc      streams the request to an EPP (this zone's; another zone's while this zone's
#                    are down), which answers with an ordered list of ip:port in dynamic metadata
#                    envoy.lb/x-gateway-destination-endpoint (and the same header)
#   3. router        -> cluster model_servers (endpoints by EDS), whose override_host policy sends
#                    the first attempt to the first entry; each retry takes the next entry
# Response path: override_host records the host it picked in envoy.lb/x-gateway-destination-endpoint-served;
# ext_proc sends the response headers (with envoy.lb forwarded) to the EPP, which learns which
# endpoint served. Response bodies do not go through the EPP (see infra/envoy/README.md).
#
# Versions: override_host needs Envoy >= 1.35, selected_host_key >= 1.38.
# Checked against Envoy's v3 Bootstrap schema by test/infra/envoy-config.test.ts; validate with the
# Envoy you ship before deploying:  envoy --mode validate -c ${envoyFileOf(zone)}

# Who this gateway is. spillway-xds serves by node.locality: the zone's subset, and priorities by
# distance from this zone. Each pod sets its own id with --service-node (infra/k8s gateway.yaml).
node:
  id: spillway-gateway-${zone}
  cluster: spillway-gateway
  locality: { region: ${self.region}, zone: ${zone} }

# Every xDS resource over one ADS stream to spillway-xds (cluster spillway_xds below). State of the
# world (api_type GRPC): spillway-xds does not serve the delta protocol.
dynamic_resources:
  ads_config:
    api_type: GRPC
    transport_api_version: V3
    set_node_on_first_message_only: true
    grpc_services:
      - envoy_grpc: { cluster_name: spillway_xds }

admin:
  address:
    # Stats and config dump (\`/config_dump\`, \`/clusters\`) on loopback only.
    socket_address: { address: 127.0.0.1, port_value: 9901 }

static_resources:
  listeners:
    - name: inference
      address:
        socket_address: { address: 0.0.0.0, port_value: ${GATEWAY_PORT} }
      filter_chains:
        - filters:
            - name: envoy.filters.network.http_connection_manager
              typed_config:
                "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
                stat_prefix: inference
                codec_type: AUTO
                # Generations stream for minutes: do not cut idle-looking streams between tokens early.
                stream_idle_timeout: 600s
                route_config:
                  name: inference
                  virtual_hosts:
                    - name: inference
                      domains: ["*"]
                      routes:
                        - match: { prefix: "/" }
                          # Client-supplied routing headers never reach a model server. Routing itself
                          # cannot be steered by a client anyway: override_host reads only the envoy.lb
                          # dynamic metadata (which only the EPP writes, via receiving_namespaces), and
                          # the EPP reads the subset only from metadata, never from a header.
                          # Route-level removal applies when the router builds the upstream request,
                          # i.e. after ext_proc, so the EPP's own x-gateway-destination-endpoint header
                          # is dropped upstream too; it is informational (the metadata carries the
                          # decision), so model servers do not need it.
                          request_headers_to_remove:
                            - x-gateway-destination-endpoint
                            - x-gateway-destination-endpoint-subset
                            - x-gateway-destination-endpoint-served
                          route:
                            cluster: model_servers
                            # Long generations: a whole-request timeout of an hour, not Envoy's 15 s default.
                            timeout: 3600s
                            retry_policy:
                              # Walk the EPP's list: each retry makes override_host take the next
                              # ip:port (primary, then local/cross-zone fallbacks). 2 retries = 3
                              # endpoints, the EPP's default maxEndpoints.
                              retry_on: "5xx,reset,connect-failure"
                              num_retries: 2
                              # No retry_host_predicate (previous_hosts): it makes Envoy re-pick
                              # within one attempt, and each re-pick would consume a list entry.
                              # No per_try_timeout: it would cut long streaming generations.
                              # A retry replays the request body the router buffered; bodies over
                              # the buffer limit (listener per_connection_buffer_limit_bytes,
                              # default 1 MiB) are not retried. Raise it for very long prompts.
                http_filters:
                  # 1. Zone-local subset hint and the gateway's zone, as set_metadata config served by
                  #    spillway-xds (ECDS: the filter's name is the resource name). Written before
                  #    ext_proc so it is forwarded in metadata_context. spillway-xds pushes a new
                  #    config whenever a pod of this zone turns ready or unready; an ECDS update
                  #    changes no listener, so nothing drains. The EPPs run with --subset-mode
                  #    locality: the list is the zone's local preference; the EPP may still widen to
                  #    other zones from its own view when the zone is overloaded.
                  - name: ${SUBSET_HINT_FILTER}
                    config_discovery:
                      config_source:
                        ads: {}
                        resource_api_version: V3
                        initial_fetch_timeout: 10s
                      # Used only when spillway-xds has not answered within initial_fetch_timeout at
                      # start: no subset (the EPP then picks from its whole view, its own zone
                      # first), and this gateway's zone. Once a config arrived Envoy keeps the last
                      # one through spillway-xds outages.
                      default_config:
                        "@type": type.googleapis.com/envoy.extensions.filters.http.set_metadata.v3.Config
                        metadata:
                          - metadata_namespace: envoy.lb.subset_hint
                            value:
                              x-spillway-gateway-zone: ${zone}
                      type_urls:
                        - type.googleapis.com/envoy.extensions.filters.http.set_metadata.v3.Config
                  # 2. The EPP.
                  - name: envoy.filters.http.ext_proc
                    typed_config:
                      "@type": type.googleapis.com/envoy.extensions.filters.http.ext_proc.v3.ExternalProcessor
                      grpc_service:
                        envoy_grpc:
                          cluster_name: spillway_epp
                      # Fail closed: without the EPP there is no zone-aware pick. Also, in full duplex
                      # Envoy has already handed body bytes to the EPP, so failing open mid-body could
                      # not restore them. Errors become 500 (504 on timeout). The EPP cluster lists
                      # other zones' EPPs at lower priorities, so this zone's EPPs restarting moves
                      # new requests to another zone's EPP instead of failing them.
                      failure_mode_allow: false
                      processing_mode:
                        request_header_mode: SEND
                        # The EPP reads the served endpoint (envoy.lb metadata) on the response headers.
                        response_header_mode: SEND
                        # The Endpoint Picker Protocol's MUST: the EPP needs the body (model, prompt)
                        # to pick, and answers the headers only once the body is complete.
                        request_body_mode: FULL_DUPLEX_STREAMED
                        # Envoy rejects FULL_DUPLEX_STREAMED unless the trailer mode of that
                        # direction is SEND.
                        request_trailer_mode: SEND
                        # Response headers only: every response byte would otherwise make a round trip
                        # through the EPP. Stream bodies (FULL_DUPLEX_STREAMED, with
                        # response_trailer_mode SEND) only for what the EPP reads there, such as token
                        # usage; see infra/envoy/README.md.
                        response_body_mode: NONE
                        response_trailer_mode: SKIP
                      # Unused in FULL_DUPLEX_STREAMED (Envoy starts no per-message timer there); it
                      # bounds each reply if someone switches to BUFFERED, where the EPP answers the
                      # headers at once and the body after picking, and it bounds the response headers
                      # reply.
                      message_timeout: 30s
                      metadata_options:
                        forwarding_namespaces:
                          # envoy.lb: the served endpoint on response messages (selected_host_key).
                          # envoy.lb.subset_hint: the zone-local subset and the gateway's zone,
                          # written by ${SUBSET_HINT_FILTER} above.
                          untyped:
                            - envoy.lb
                            - envoy.lb.subset_hint
                        receiving_namespaces:
                          # Without this Envoy silently drops the EPP's dynamic metadata, and
                          # override_host would find no list (falling back to round robin).
                          untyped:
                            - envoy.lb
                  # 3. Router: picks the host with the cluster's override_host policy.
                  - name: envoy.filters.http.router
                    typed_config:
                      "@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router
                      suppress_envoy_headers: true

  clusters:
    # Every ready model server of the pool, in every zone, from spillway-xds (EDS resource
    # ${XDS_CLUSTER_NAME}): override_host can only pick hosts the cluster knows (unknown entries are
    # skipped silently), so cross-zone fallbacks need the other zones' pods here even though the
    # subset hint lists only ${zone}'s. Each zone is a locality with its region, at a priority by
    # distance from ${zone} (0 this zone, then its region, then the rest).
    - name: model_servers
      type: EDS
      eds_cluster_config:
        service_name: ${XDS_CLUSTER_NAME}
        eds_config:
          ads: {}
          resource_api_version: V3
      # Short, so a dead pod costs little before the retry moves to the next entry in the list.
      connect_timeout: 1s
      # lb_policy is left out: load_balancing_policy replaces it.
      load_balancing_policy:
        policies:
          - typed_extension_config:
              name: envoy.load_balancing_policies.override_host
              typed_config:
                "@type": type.googleapis.com/envoy.extensions.load_balancing_policies.override_host.v3.OverrideHost
                # Exactly one source, the metadata. Listing the header too would concatenate both
                # copies of the same list, so every endpoint would be tried twice.
                override_host_sources:
                  - metadata:
                      key: envoy.lb
                      path:
                        - key: x-gateway-destination-endpoint
                # Envoy >= 1.38: after every pick (fallback picks too) the chosen ip:port is written
                # here; ext_proc forwards envoy.lb on response messages, so the EPP sees the served
                # endpoint and penalises a primary that failed.
                selected_host_key:
                  key: envoy.lb
                  path:
                    - key: x-gateway-destination-endpoint-served
                # Used only when the list is missing or exhausted (every entry tried or unknown).
                # Round robin within the cluster's priorities: this zone's pods first.
                fallback_policy:
                  policies:
                    - typed_extension_config:
                        name: envoy.load_balancing_policies.round_robin
                        typed_config:
                          "@type": type.googleapis.com/envoy.extensions.load_balancing_policies.round_robin.v3.RoundRobin

    # The EPPs (infra/k8s epp.yaml: Service spillway-epp-<zone>, ext_proc on ${ownEpp.port}): this zone's
    # at priority 0, the others by distance. Health checks move new requests to the next priority
    # while this zone's EPPs are not SERVING (restarting, replay not caught up), and back after.
    - name: spillway_epp
      type: STRICT_DNS
      connect_timeout: 1s
      lb_policy: ROUND_ROBIN
      # gRPC needs HTTP/2 end to end; without this Envoy would speak HTTP/1.1 to the EPP.
      typed_extension_protocol_options:
        envoy.extensions.upstreams.http.v3.HttpProtocolOptions:
          "@type": type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions
          explicit_http_config:
            http2_protocol_options: {}
      # The EPP serves grpc.health.v1 on its ext_proc port; the ExternalProcessor service turns
      # SERVING only once its event replay has caught up, so Envoy never sends requests to an EPP
      # with an empty view. Plaintext here (the EPP's default); for TLS add a transport_socket
      # (envoy.transport_sockets.tls) and start the EPP with its TLS flags.
      health_checks:
        - timeout: 1s
          interval: 2s
          unhealthy_threshold: 2
          healthy_threshold: 1
          grpc_health_check:
            service_name: envoy.service.ext_proc.v3.ExternalProcessor
      load_assignment:
        cluster_name: spillway_epp
        endpoints:
${eppLocalities}

    # spillway-xds (infra/k8s xds.yaml: Service spillway-xds-<zone>, ADS on ${ownXds.port}): this zone's,
    # which reads this zone's NATS, at priority 0, the others by distance. It serves grpc.health.v1
    # on its ADS port and turns SERVING once its replay has caught up.
    - name: spillway_xds
      type: STRICT_DNS
      connect_timeout: 1s
      lb_policy: ROUND_ROBIN
      typed_extension_protocol_options:
        envoy.extensions.upstreams.http.v3.HttpProtocolOptions:
          "@type": type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions
          explicit_http_config:
            http2_protocol_options: {}
      health_checks:
        - timeout: 1s
          interval: 5s
          unhealthy_threshold: 2
          healthy_threshold: 1
          grpc_health_check:
            service_name: envoy.service.discovery.v3.AggregatedDiscoveryService
      load_assignment:
        cluster_name: spillway_xds
        endpoints:
${xdsLocalities}
`;
}
