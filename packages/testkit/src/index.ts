export { freePort } from './ports.js';
export { startNatsServer, natsServerAvailable, waitForPort, INSTALL_HINT } from './nats-server.js';
export type { NatsServerHandle, NatsServerOptions } from './nats-server.js';
export { eventually } from './eventually.js';
