// @spillway/xds-protocol: Envoy's xDS on the wire — the messages (generated from trimmed copies of
// Envoy's protos), their type URLs, the aggregated discovery service and a state-of-the-world client.
export * from './messages.js';
export { AggregatedDiscoveryServiceClient, AggregatedDiscoveryServiceService } from './gen/envoy/service/discovery/v3/ads.js';
export { AdsClient } from './client.js';
export type { AdsClientOptions, AdsClientEnd } from './client.js';
