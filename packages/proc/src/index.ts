export { freePort } from './ports.js';
export { waitForPort } from './wait.js';
export { natsServerAvailable, INSTALL_HINT } from './nats-server.js';
