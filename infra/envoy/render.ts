/**
 * One Envoy (>= 1.38) config per zone, from the topology: the zone's gateway calls that zone's EPP
 * over ext_proc and routes with the override_host policy. The text keeps its comments, so it is a
 * template rather than a serialised object; test/infra/envoy-config.test.ts parses every rendered
 * file into Envoy's v3 Bootstrap with Envoy's own .proto files.
 */
import type { Topology } from '../topology.js';

/** The EPP Service a zone's gateway calls (infra/k8s epp.yaml). */
export function eppAddressOf(topology: Topology, zone: string): { host: string; port: number } {
  return { host: `spillway-epp-${zone}.${topology.namespace}.svc.cluster.local`, port: 9002 };
}

/**
 * Example pod addresses, zone i -> 10.0.<i+1>.<5+j>:8000: a stand-in for EDS from a control plane
 * (the real addresses are the pods'). At least one per zone, so every zone appears in the cluster.
 */
export function exampleAddresses(topology: Topology): Map<string, { ip: string; port: number }[]> {
  return new Map(
    topology.zones.map((z, i) => [
      z.name,
      Array.from({ length: Math.max(1, z.modelServers) }, (_, j) => ({ ip: `10.0.${i + 1}.${5 + j}`, port: 8000 })),
    ]),
  );
}

export function envoyFileOf(zone: string): string {
  return `envoy-${zone}.yaml`;
}

export function renderEnvoyConfig(topology: Topology, zone: string): string {
  const addresses = exampleAddresses(topology);
  const local = addresses.get(zone);
  if (!local) throw new Error(`zone ${zone} is not in the topology`);
  const epp = eppAddressOf(topology, zone);
  const subset = local.map((a) => `                              - "${a.ip}:${a.port}"`).join('\n');
  const localities = topology.zones
    .map((z) => {
      const endpoints = (addresses.get(z.name) ?? [])
        .map((a) => `              - endpoint: { address: { socket_address: { address: ${a.ip}, port_value: ${a.port} } } }`)
        .join('\n');
      return `          - locality: { region: ${z.region}, zone: ${z.name} }\n            lb_endpoints:\n${endpoints}`;
    })
    .join('\n');

  return `# Spillway: Envoy (>= 1.38) in front of an LLM inference pool: the gateway of zone ${zone}, calling that
# zone's Spillway EPP over ext_proc.
# Generated from infra/topology.yaml by infra/render.ts (npm run render); do not edit by hand.
#
# Request path: client -> listener -> HCM
#   1. set_metadata  writes envoy.lb.subset_hint/x-gateway-destination-endpoint-subset = zone-local pods
#   2. ext_proc      streams the request to the EPP, which answers with an ordered list of ip:port
#                    in dynamic metadata envoy.lb/x-gateway-destination-endpoint (and the same header)
#   3. router        -> cluster model_servers, whose override_host policy sends the first attempt
#                    to the first entry; each retry takes the next entry (cross-zone fallbacks)
# Response path: override_host records the host it picked in envoy.lb/x-gateway-destination-endpoint-served;
# ext_proc sends the response headers (with envoy.lb forwarded) to the EPP, which learns which
# endpoint served. Response bodies do not go through the EPP (see infra/envoy/README.md).
#
# Versions: override_host needs Envoy >= 1.35, selected_host_key >= 1.38.
# Checked against Envoy's v3 Bootstrap schema by test/infra/envoy-config.test.ts; validate with the
# Envoy you ship before deploying:  envoy --mode validate -c ${envoyFileOf(zone)}

admin:
  address:
    # Stats and config dump (\`/config_dump\`, \`/clusters\`) on loopback only.
    socket_address: { address: 127.0.0.1, port_value: 9901 }

static_resources:
  listeners:
    - name: inference
      address:
        socket_address: { address: 0.0.0.0, port_value: 8081 }
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
                  # 1. Zone-local subset hint. Written before ext_proc so it is forwarded in
                  #    metadata_context. The EPPs run with --subset-mode locality: this list is the
                  #    zone's local preference; the EPP may still widen to other zones from its own
                  #    view when the zone is overloaded. These must be exactly the ip:port strings
                  #    the EPP sees in readiness events (string compare).
                  - name: envoy.filters.http.set_metadata
                    typed_config:
                      "@type": type.googleapis.com/envoy.extensions.filters.http.set_metadata.v3.Config
                      metadata:
                        - metadata_namespace: envoy.lb.subset_hint
                          value:
                            x-gateway-destination-endpoint-subset:
${subset}
                  # 2. The EPP.
                  - name: envoy.filters.http.ext_proc
                    typed_config:
                      "@type": type.googleapis.com/envoy.extensions.filters.http.ext_proc.v3.ExternalProcessor
                      grpc_service:
                        envoy_grpc:
                          cluster_name: spillway_epp
                      # Fail closed: without the EPP there is no zone-aware pick. Also, in full duplex
                      # Envoy has already handed body bytes to the EPP, so failing open mid-body could
                      # not restore them. Errors become 500 (504 on timeout).
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
                          # envoy.lb.subset_hint: the zone-local subset written by set_metadata above.
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
    # Every model server of the pool, in every zone: override_host can only pick hosts the cluster
    # knows (unknown entries are skipped silently), so cross-zone fallbacks need the other zones'
    # pods here even though the subset hint lists only ${zone}'s. The addresses are examples standing
    # in for EDS from a control plane (or STRICT_DNS on the pool's headless Service, which resolves
    # to pod IPs); zones and regions are the topology's.
    - name: model_servers
      type: STATIC
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
                # Plain round robin across the pool: override_host ignores locality, and the EPP
                # already did the zone-aware part.
                fallback_policy:
                  policies:
                    - typed_extension_config:
                        name: envoy.load_balancing_policies.round_robin
                        typed_config:
                          "@type": type.googleapis.com/envoy.extensions.load_balancing_policies.round_robin.v3.RoundRobin
      load_assignment:
        cluster_name: model_servers
        endpoints:
${localities}

    # This zone's EPP (infra/k8s epp.yaml: Service spillway-epp-${zone}, ext_proc on ${epp.port}).
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
          - lb_endpoints:
              - endpoint:
                  address:
                    socket_address: { address: ${epp.host}, port_value: ${epp.port} }
`;
}
