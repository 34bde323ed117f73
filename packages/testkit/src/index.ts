// Process helpers live in @spillway/proc (the demo launcher uses them too); re-exported for tests.
export { freePort, INSTALL_HINT, natsServerAvailable, waitForPort } from '@spillway/proc';
export { startNatsServer } from './nats-server.js';
export type { NatsServerHandle, NatsServerOptions } from './nats-server.js';
export { eventually } from './eventually.js';
export { metrics, podEvents, publishAll, readiness, zoneOf } from './event-fixtures.js';
export { POOL, TestPublisher, type PodSpec } from './test-publisher.js';
export {
  bodyMessage,
  envoyRequestMessages,
  envoyResponseHeadersMessage,
  type RequestOptions,
  type ResponseHeadersOptions,
} from './envoy-messages.js';
export { healthStatus } from './health.js';
export { ExternalProcessorClient, HealthClient } from './grpc-clients.js';
