import type { Epp } from './epps.js';
import type { Route } from './routers.js';
import type { SimRequest } from './workload.js';

/**
 * One request's way from its gateway to a replica: the EPPs it asks in order (one, or a failover
 * chain), the route it got, and the replicas it tried. The gateway moves it along; every hop
 * between zones takes half their round trip.
 */
export interface Trip {
  readonly request: SimRequest;
  readonly gateway: number;
  readonly chain: readonly Epp[];
  /** Index in `chain` of the EPP asked last. */
  stage: number;
  route: Route | undefined;
  /** Replicas tried so far: list entries, then the gateway's own fallback picks. */
  readonly tried: number[];
}
