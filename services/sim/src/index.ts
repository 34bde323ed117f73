export { startSim, rankEndpoint } from './server.js';
export type { SimServer, StartSimOptions } from './server.js';
export { HELP, parseSimArgs, simFlags, simOptions } from './options.js';
export type { MetricsFlavor, ParsedArgs, SimOptions } from './options.js';
export type { FaultPatch, FaultState } from './faults.js';
