// spillway-gateway: a development and test HTTP gateway that calls the EPP exactly as Envoy does.
// Production uses Envoy (infra/envoy); this exists to run the demo and end-to-end tests.
export { startGateway } from './gateway.js';
export type { Gateway, GatewayStats } from './gateway.js';
export { DEFAULTS } from './options.js';
export type { EndpointConfig, EppTlsOptions, GatewayOptions } from './options.js';
export { endpointsFileSchema, loadEndpointsFile } from './endpoints.js';
export { gatewayFlags, parseGatewayArgs } from './flags.js';
export type { StatsSnapshot } from './stats.js';
export type { EndpointHealth } from './health.js';
