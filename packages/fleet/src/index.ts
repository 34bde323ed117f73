export { Fleet, DEFAULT_MAX_CLOCK_SKEW_MS, DEFAULT_MAX_PODS_PER_ZONE, DEFAULT_MAX_ZONES_PER_POOL } from './fleet.js';
export type { FleetOptions, FleetCounters, ApplyOutcome } from './fleet.js';
export type { Endpoint, MetricsSample } from './endpoint.js';
export type { PoolView } from './pool.js';
export { snapshotPool } from './snapshot.js';
export type { EndpointSnapshot } from './snapshot.js';
export { distanceOf, prioritiesOf } from './locality.js';
export type { Distance, Place } from './locality.js';
