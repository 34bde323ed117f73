export { startXds, CONTROL_PLANE } from './xds.js';
export type { RunningXds, StartXdsOptions } from './xds.js';
export { loadXdsConfig, xdsFlags, XDS_HELP } from './config.js';
export type { XdsConfig, XdsFlagValues } from './config.js';
export { XdsHub, HubCounters } from './hub.js';
export type { HubOptions, HubMemory, HubObserver, XdsTransport } from './hub.js';
export { XdsSession, versionOf } from './session.js';
export type { NodeInfo, Outgoing, RequestOutcome } from './session.js';
export {
  zonesByDistance,
  clusterLoadAssignment,
  subsetHintConfig,
  placeResources,
  staticResources,
  SUBSET_HINT_RESOURCE,
} from './resources.js';
/** Where the gateway's zone travels to the EPP, beside the subset (docs/xds.md); @spillway/protocol's key. */
export { GATEWAY_ZONE_KEY } from '@spillway/protocol';
export type { EncodedResource, ZoneEndpoints } from './resources.js';
export { LIMITS } from './limits.js';
export { RoutingChangeSink } from './view-sink.js';
export { ADS_SERVICE_NAME } from './health.js';
// The wire protocol it serves (messages, type URLs, the ADS service and client), for its callers.
export * from '@spillway/xds-protocol';
