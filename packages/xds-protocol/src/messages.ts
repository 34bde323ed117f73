/**
 * The xDS resource types spillway-xds serves, their type URLs, and packing a message into an Any
 * (pure: the gRPC service definition lives apart, in gen/envoy/service/discovery/v3/ads.ts).
 * The message code is generated from trimmed copies of Envoy's protos (packages/xds-protocol/proto,
 * names and field numbers unchanged; services/xds/test/proto.test.ts compares every field with
 * Envoy's own files).
 */
import type { Any } from './gen/google/protobuf/any.js';

const PREFIX = 'type.googleapis.com/';

/** Type URLs by the short name used in metrics and logs. */
export const TYPE_URLS = {
  eds: `${PREFIX}envoy.config.endpoint.v3.ClusterLoadAssignment`,
  ecds: `${PREFIX}envoy.config.core.v3.TypedExtensionConfig`,
  lds: `${PREFIX}envoy.config.listener.v3.Listener`,
  rds: `${PREFIX}envoy.config.route.v3.RouteConfiguration`,
  cds: `${PREFIX}envoy.config.cluster.v3.Cluster`,
} as const;

export type ResourceKind = keyof typeof TYPE_URLS;
/** A type URL spillway-xds has no resources of still gets (empty) answers; its metrics label is `other`. */
export type TypeLabel = ResourceKind | 'other';

const KIND_BY_URL = new Map<string, ResourceKind>(Object.entries(TYPE_URLS).map(([kind, url]) => [url, kind as ResourceKind]));

export function kindOf(typeUrl: string): TypeLabel {
  return KIND_BY_URL.get(typeUrl) ?? 'other';
}

/** Types whose SotW request with no names means "all of them" (legacy wildcard): listeners and clusters. */
export function wildcardWhenEmpty(typeUrl: string): boolean {
  return typeUrl === TYPE_URLS.lds || typeUrl === TYPE_URLS.cds;
}

export const TYPE_URL_PREFIX = PREFIX;

/** Packs encoded message bytes as an Any. */
export function packAny(typeUrl: string, value: Uint8Array): Any {
  return { typeUrl, value };
}

export type { Any };
export { DiscoveryRequest, DiscoveryResponse } from './gen/envoy/service/discovery/v3/discovery.js';
export { ClusterLoadAssignment } from './gen/envoy/config/endpoint/v3/endpoint.js';
export { LocalityLbEndpoints, LbEndpoint } from './gen/envoy/config/endpoint/v3/endpoint_components.js';
export { TypedExtensionConfig } from './gen/envoy/config/core/v3/extension.js';
export { Node, Locality } from './gen/envoy/config/core/v3/base.js';
export { HealthStatus } from './gen/envoy/config/core/v3/health_check.js';
export { ApiVersion } from './gen/envoy/config/core/v3/config_source.js';
export { Config as SetMetadataConfig } from './gen/envoy/extensions/filters/http/set_metadata/v3/set_metadata.js';
export { Listener } from './gen/envoy/config/listener/v3/listener.js';
export { RouteConfiguration } from './gen/envoy/config/route/v3/route.js';
export { Cluster, Cluster_DiscoveryType, Cluster_LbPolicy } from './gen/envoy/config/cluster/v3/cluster.js';
export { HttpConnectionManager } from './gen/envoy/extensions/filters/network/http_connection_manager/v3/http_connection_manager.js';
export { Router } from './gen/envoy/extensions/filters/http/router/v3/router.js';
