/**
 * The resources spillway-xds serves, built from the fleet view for one node's place (docs/xds.md).
 * Pure: a view and a place in, messages out; the same view gives the same bytes, in any replica.
 *
 * - EDS `<cluster-name>`: every routable pod of the pool, one LocalityLbEndpoints per zone with its
 *   region, priority by distance from the node (@spillway/fleet's prioritiesOf), weight = its pod count.
 * - ECDS `spillway-subset-hint`: a set_metadata filter config writing the node zone's routable pods
 *   to `envoy.lb.subset_hint/x-gateway-destination-endpoint-subset` (a list of `ip:port`) and the
 *   node's zone to `envoy.lb.subset_hint/x-spillway-gateway-zone`.
 * - LDS, RDS and CDS `<cluster-name>`: the API listener, route and EDS cluster through which a
 *   proxyless gRPC client resolves `xds:///<cluster-name>` to the same endpoints. They do not
 *   depend on the view or the node.
 */
import { prioritiesOf, type Endpoint, type Place, type PoolView } from '@spillway/fleet';
import { GATEWAY_ZONE_KEY, SUBSET_KEY, SUBSET_NAMESPACE } from '@spillway/protocol';
import { contentHash } from './hash.js';
import {
  ApiVersion,
  Cluster,
  Cluster_DiscoveryType,
  Cluster_LbPolicy,
  ClusterLoadAssignment,
  HealthStatus,
  HttpConnectionManager,
  Listener,
  RouteConfiguration,
  Router,
  SetMetadataConfig,
  TYPE_URLS,
  TypedExtensionConfig,
  packAny,
  type Any,
  type LocalityLbEndpoints,
} from '@spillway/xds-protocol';

/** The ECDS resource name: the name of the gateway's set_metadata filter that takes its config from spillway-xds. */
export const SUBSET_HINT_RESOURCE = 'spillway-subset-hint';
const SET_METADATA_TYPE_URL = 'type.googleapis.com/envoy.extensions.filters.http.set_metadata.v3.Config';
const HCM_TYPE_URL = 'type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager';
const ROUTER_TYPE_URL = 'type.googleapis.com/envoy.extensions.filters.http.router.v3.Router';

/** One resource, encoded once and shared by every node it is sent to. */
export interface EncodedResource {
  readonly typeUrl: string;
  readonly name: string;
  readonly any: Any;
  /** contentHash of the encoded bytes: equal bytes, equal version. */
  readonly version: string;
}

function encoded(typeUrl: string, name: string, bytes: Uint8Array): EncodedResource {
  return { typeUrl, name, any: packAny(typeUrl, bytes), version: contentHash(bytes) };
}

/** One zone's routable pods, as the resources list them. */
export interface ZoneEndpoints {
  readonly zone: string;
  readonly region: string | undefined;
  readonly priority: number;
  /** Canonical `ip:port` keys, sorted; an address already listed for a nearer zone is left out. */
  readonly addresses: readonly string[];
  readonly endpoints: readonly Endpoint[];
}

/**
 * The pool's routable pods by zone, nearest first (then by zone name), each zone with its priority.
 * Two pods never share an address in the list (docs/events.md): the nearer zone's pod keeps it,
 * and within a zone the first by pod name (gRPC rejects a duplicate address; Envoy would merge them).
 */
export function zonesByDistance(pool: PoolView | undefined, node: Place): ZoneEndpoints[] {
  if (pool === undefined) return [];
  const zones = [...pool.readyZones()].map((zone) => ({ zone, region: pool.regionOf(zone) }));
  const priorities = prioritiesOf(node, zones);
  const order = zones
    .map((place, i) => ({ ...place, priority: priorities[i] as number }))
    .sort((a, b) => a.priority - b.priority || (a.zone < b.zone ? -1 : a.zone > b.zone ? 1 : 0));
  const seen = new Set<string>();
  const out: ZoneEndpoints[] = [];
  for (const place of order) {
    const pods = [...pool.readyInZone(place.zone)].filter((e) => e.address !== undefined && e.ip !== undefined);
    pods.sort((a, b) => compare(a.address as string, b.address as string) || compare(a.pod, b.pod));
    const endpoints: Endpoint[] = [];
    for (const pod of pods) {
      const address = pod.address as string;
      if (seen.has(address)) continue;
      seen.add(address);
      endpoints.push(pod);
    }
    if (endpoints.length === 0) continue;
    out.push({ ...place, addresses: endpoints.map((e) => e.address as string), endpoints });
  }
  // A zone whose pods were all listed nearer may have been dropped: keep the levels contiguous.
  const levels = [...new Set(out.map((z) => z.priority))].sort((a, b) => a - b);
  return out.map((z) => ({ ...z, priority: levels.indexOf(z.priority) }));
}

function compare(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0;
}

/** The port of a canonical `ip:port` / `[ipv6]:port` key. */
function portOf(address: string): number {
  return Number(address.slice(address.lastIndexOf(':') + 1));
}

export function clusterLoadAssignment(zones: readonly ZoneEndpoints[], clusterName: string): ClusterLoadAssignment {
  const endpoints: LocalityLbEndpoints[] = zones.map((z) => ({
    locality: { region: z.region ?? '', zone: z.zone, subZone: '' },
    lbEndpoints: z.endpoints.map((e) => ({
      hostIdentifier: {
        $case: 'endpoint',
        value: { address: { address: { $case: 'socketAddress', value: socketAddress(e) } }, hostname: '' },
      },
      healthStatus: HealthStatus.HEALTHY,
      loadBalancingWeight: undefined,
    })),
    // gRPC clients skip a locality without a weight; by pod count, a locality gets its share of a level.
    loadBalancingWeight: z.endpoints.length,
    priority: z.priority,
  }));
  return { clusterName, endpoints };
}

function socketAddress(e: Endpoint) {
  return {
    protocol: 0,
    address: e.ip as string,
    portSpecifier: { $case: 'portValue' as const, value: portOf(e.address as string) },
    resolverName: '',
    ipv4Compat: false,
  };
}

/** The set_metadata filter config: the node zone's routable pods and the node's zone. */
export function subsetHintConfig(zones: readonly ZoneEndpoints[], node: Place): TypedExtensionConfig {
  const local = zones.find((z) => z.zone === node.zone);
  const config: SetMetadataConfig = {
    metadata: [
      {
        metadataNamespace: SUBSET_NAMESPACE,
        allowOverwrite: false,
        value: { [SUBSET_KEY]: [...(local?.addresses ?? [])], [GATEWAY_ZONE_KEY]: node.zone },
      },
    ],
  };
  return {
    name: SUBSET_HINT_RESOURCE,
    typedConfig: packAny(SET_METADATA_TYPE_URL, SetMetadataConfig.encode(config).finish()),
  };
}

/** EDS and ECDS for one node place: the resources that follow the view. */
export function placeResources(pool: PoolView | undefined, node: Place, clusterName: string): EncodedResource[] {
  const zones = zonesByDistance(pool, node);
  return [
    encoded(TYPE_URLS.eds, clusterName, ClusterLoadAssignment.encode(clusterLoadAssignment(zones, clusterName)).finish()),
    encoded(TYPE_URLS.ecds, SUBSET_HINT_RESOURCE, TypedExtensionConfig.encode(subsetHintConfig(zones, node)).finish()),
  ];
}

const ADS = {
  configSourceSpecifier: { $case: 'ads' as const, value: {} },
  initialFetchTimeout: undefined,
  resourceApiVersion: ApiVersion.V3,
};

/**
 * LDS, RDS and CDS for a proxyless gRPC client of `xds:///<clusterName>`: an API listener whose
 * routes come by RDS over ADS, one route sending everything to the cluster, and the cluster
 * taking its endpoints by EDS over ADS, balanced round robin within a locality.
 */
export function staticResources(clusterName: string): EncodedResource[] {
  const manager: HttpConnectionManager = {
    statPrefix: clusterName,
    routeSpecifier: { $case: 'rds', value: { configSource: ADS, routeConfigName: clusterName } },
    httpFilters: [
      {
        name: 'envoy.filters.http.router',
        configType: { $case: 'typedConfig', value: packAny(ROUTER_TYPE_URL, Router.encode({}).finish()) },
        isOptional: false,
      },
    ],
  };
  const listener: Listener = {
    name: clusterName,
    apiListener: { apiListener: packAny(HCM_TYPE_URL, HttpConnectionManager.encode(manager).finish()) },
  };
  const route: RouteConfiguration = {
    name: clusterName,
    virtualHosts: [
      {
        name: clusterName,
        domains: ['*'],
        routes: [
          {
            name: '',
            match: { pathSpecifier: { $case: 'prefix', value: '' } },
            action: { $case: 'route', value: { clusterSpecifier: { $case: 'cluster', value: clusterName } } },
          },
        ],
      },
    ],
  };
  const cluster: Cluster = {
    name: clusterName,
    clusterDiscoveryType: { $case: 'type', value: Cluster_DiscoveryType.EDS },
    edsClusterConfig: { edsConfig: ADS, serviceName: clusterName },
    connectTimeout: { seconds: 1, nanos: 0 },
    lbPolicy: Cluster_LbPolicy.ROUND_ROBIN,
  };
  return [
    encoded(TYPE_URLS.lds, clusterName, Listener.encode(listener).finish()),
    encoded(TYPE_URLS.rds, clusterName, RouteConfiguration.encode(route).finish()),
    encoded(TYPE_URLS.cds, clusterName, Cluster.encode(cluster).finish()),
  ];
}
