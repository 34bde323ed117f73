export { runFleetCli, parseFleetArgs, fleetFlags, FLEET_USAGE } from './fleet-cli.js';
export type { FleetCliOptions, CliIo } from './fleet-cli.js';
export { fleetRows, renderFleetTable, renderFleetStatus } from './table.js';
export type { FleetRow } from './table.js';
export { runProvisionCli, parseProvisionArgs, provisionFlags, PROVISION_USAGE } from './provision-cli.js';
export type { ProvisionCliOptions } from './provision-cli.js';
export { PoolInFlight, followInFlight } from './in-flight.js';
export type { InFlightFollower } from './in-flight.js';
