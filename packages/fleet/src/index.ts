export {
  Fleet,
  DEFAULT_MAX_CLOCK_SKEW_MS,
  DEFAULT_MAX_PODS_PER_ZONE,
  DEFAULT_MAX_ZONES_PER_POOL,
  DEFAULT_MAX_CHARGES_PER_ENDPOINT,
  DEFAULT_MAX_CHARGE_BYTES,
} from './fleet.js';
export type { FleetOptions, FleetCounters, ChargeCounters, ApplyOutcome, PrefillAhead, PrefillAheadLimits, PrefillRate } from './fleet.js';
export { Charge, CHARGE_BYTES } from './charge.js';
export type { ChargeEnd } from './charge.js';
export type { Endpoint, MetricsSample } from './endpoint.js';
export type { PoolView } from './pool.js';
export { snapshotPool } from './snapshot.js';
export type { EndpointSnapshot } from './snapshot.js';
export { distanceOf, prioritiesOf } from './locality.js';
export type { Distance, Place } from './locality.js';
