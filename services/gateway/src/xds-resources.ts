// What the development gateway takes from spillway-xds, checked as Envoy checks it before it
// accepts a response (a failed check is a NACK: the last good resource stays in force). Pure.
//
// - EDS (source/extensions/clusters/eds/eds.cc, EdsClusterImpl::onConfigUpdate and
//   BatchUpdateHelper): the one ClusterLoadAssignment named by the cluster's service_name; each
//   LocalityLbEndpoints a locality at its priority; each endpoint a socket address that must be an
//   IP literal with a port value (no resolver, no named port, as an EDS cluster requires); health
//   from health_status (UNKNOWN and HEALTHY are healthy; UNHEALTHY, DRAINING, TIMEOUT are not;
//   DEGRADED counts as unhealthy here, the gateway having no degraded level). An address listed
//   twice is kept once, at its first (nearest) listing.
// - ECDS (source/common/filter/config_discovery_impl.cc, FilterConfigSubscription::onConfigUpdate,
//   validateTypeUrlHelper): exactly one TypedExtensionConfig, named as the filter, whose typed_config
//   is a set_metadata Config (the filter's type_urls).
import { parseEndpointAddress } from '@spillway/events';
import {
  ClusterLoadAssignment,
  HealthStatus,
  SetMetadataConfig,
  TYPE_URLS,
  TypedExtensionConfig,
  type Any,
  type LbEndpoint,
} from '@spillway/xds-protocol';
import type { SetMetadataEntry } from './set-metadata.js';

/** The set_metadata filter config's type URL: the only one the subset filter takes (its `type_urls`). */
export const SET_METADATA_TYPE_URL = 'type.googleapis.com/envoy.extensions.filters.http.set_metadata.v3.Config';

/** One model server as EDS lists it. */
export interface EdsEndpoint {
  /** Canonical `ip:port`. */
  readonly address: string;
  readonly zone: string | undefined;
  readonly region: string | undefined;
  readonly priority: number;
  readonly healthy: boolean;
}

export type Checked<T> = { readonly ok: true; readonly value: T } | { readonly ok: false; readonly error: string };

const fail = (error: string): { ok: false; error: string } => ({ ok: false, error });

/**
 * The endpoints of an EDS response for `clusterName`; `undefined` when the response holds none
 * (Envoy logs "Missing ClusterLoadAssignment" and keeps what it has).
 */
export function endpointsOf(resources: readonly Any[], clusterName: string): Checked<EdsEndpoint[] | undefined> {
  if (resources.length === 0) return { ok: true, value: undefined };
  if (resources.length > 1) return fail(`Unexpected EDS resource length: ${resources.length}`);
  const any = resources[0] as Any;
  if (any.typeUrl !== TYPE_URLS.eds) return fail(`EDS resource has type URL ${any.typeUrl}, expected ${TYPE_URLS.eds}`);
  let cla: ClusterLoadAssignment;
  try {
    cla = ClusterLoadAssignment.decode(any.value);
  } catch (error) {
    return fail(`EDS resource does not decode: ${(error as Error).message}`);
  }
  if (cla.clusterName !== clusterName) return fail(`Unexpected EDS cluster (expecting ${clusterName}): ${cla.clusterName}`);
  const endpoints: EdsEndpoint[] = [];
  const seen = new Set<string>();
  for (const locality of [...cla.endpoints].sort((a, b) => a.priority - b.priority)) {
    for (const lb of locality.lbEndpoints) {
      const address = addressOf(lb);
      if (!address.ok) return address;
      if (seen.has(address.value)) continue;
      seen.add(address.value);
      endpoints.push({
        address: address.value,
        zone: locality.locality?.zone || undefined,
        region: locality.locality?.region || undefined,
        priority: locality.priority,
        healthy: lb.healthStatus === HealthStatus.HEALTHY || lb.healthStatus === HealthStatus.UNKNOWN,
      });
    }
  }
  return { ok: true, value: endpoints };
}

function addressOf(lb: LbEndpoint): Checked<string> {
  if (lb.hostIdentifier?.$case !== 'endpoint') return fail('an LbEndpoint without an endpoint (named endpoints are not supported)');
  const socket = lb.hostIdentifier.value.address?.address;
  if (socket?.$case !== 'socketAddress') return fail('an endpoint without a socket address');
  const { address, portSpecifier, resolverName } = socket.value;
  if (resolverName !== '') return fail(`endpoint ${address}: a resolver (${resolverName}) is not supported for EDS endpoints`);
  if (portSpecifier?.$case !== 'portValue') return fail(`endpoint ${address}: no port value (named ports are not supported)`);
  const text = address.includes(':') ? `[${address}]:${portSpecifier.value}` : `${address}:${portSpecifier.value}`;
  const parsed = parseEndpointAddress(text);
  if (parsed === undefined) return fail(`malformed IP address: ${address} (port ${portSpecifier.value})`);
  return { ok: true, value: parsed.key };
}

/** The set_metadata entries of an ECDS response for the filter `name`. */
export function setMetadataOf(resources: readonly Any[], name: string): Checked<SetMetadataEntry[]> {
  if (resources.length !== 1) return fail(`Unexpected number of resources in ExtensionConfigDS response: ${resources.length}`);
  const any = resources[0] as Any;
  if (any.typeUrl !== TYPE_URLS.ecds) return fail(`ECDS resource has type URL ${any.typeUrl}, expected ${TYPE_URLS.ecds}`);
  let config: TypedExtensionConfig;
  try {
    config = TypedExtensionConfig.decode(any.value);
  } catch (error) {
    return fail(`ECDS resource does not decode: ${(error as Error).message}`);
  }
  if (config.name !== name) return fail(`Unexpected resource name in ExtensionConfigDS response: ${config.name}`);
  const typeUrl = config.typedConfig?.typeUrl ?? '';
  if (typeUrl !== SET_METADATA_TYPE_URL) return fail(`Error: filter config has type URL ${typeUrl} but expect ${SET_METADATA_TYPE_URL}.`);
  try {
    const decoded = SetMetadataConfig.decode(config.typedConfig?.value ?? new Uint8Array());
    return {
      ok: true,
      value: decoded.metadata.map((m) => ({ metadataNamespace: m.metadataNamespace, allowOverwrite: m.allowOverwrite, value: m.value })),
    };
  } catch (error) {
    return fail(`set_metadata config does not decode: ${(error as Error).message}`);
  }
}
