import { EnvoyLoadAwareRouter } from './envoy-router.js';
import { ReferenceRouter, type ReferenceProfile } from './reference-router.js';
import { LeastQueueRouter, RandomRouter, RoundRobinRouter, type EppRouter, type RouterContext } from './routers.js';
import { FlowControlRouter } from './flow-router.js';
import { PreciseRouter, SchedulerRouter } from './spillway-router.js';
import type { StrategyKind } from './strategies.js';

/** The reference EPP (the Gateway API Inference Extension's EPP, now in llm-d) as deployed: none of the deployments' additions. */
export const REFERENCE_PROFILE: ReferenceProfile = {
  countsPicks: false,
  failover: false,
  capacityFilter: false,
  topology: { weight: 0, sameRegion: 0 },
};

/**
 * llm-d's topology routing: the zone scorer's weight (8) outweighs the three reference scorers
 * together (2 + 2 + 3), so any local pod the capacity filter keeps outranks every remote one —
 * "local first; remote only when a capacity filter drops the locals". Among remote pods, the
 * gateway's region scores half (4 points): load and prefix can still outweigh it.
 */
export const LLMD_TOPOLOGY = { weight: 8, sameRegion: 0.5 } as const;

/** The picker of one EPP (or gateway) of a strategy. */
export function createRouter(kind: StrategyKind, ctx: RouterContext): EppRouter {
  switch (kind) {
    case 'random':
      return new RandomRouter(ctx);
    case 'round-robin':
      return new RoundRobinRouter(ctx);
    case 'least-queue':
      return new LeastQueueRouter(ctx);
    case 'reference':
      return new ReferenceRouter(ctx, REFERENCE_PROFILE);
    case 'reference-plus':
      return new ReferenceRouter(ctx, { ...REFERENCE_PROFILE, countsPicks: true });
    case 'reference-zonal':
    case 'reference-regional':
      return new ReferenceRouter(ctx, { ...REFERENCE_PROFILE, failover: true });
    case 'llm-d-topology':
      return new ReferenceRouter(ctx, { ...REFERENCE_PROFILE, capacityFilter: true, topology: LLMD_TOPOLOGY });
    case 'envoy-load-aware':
      return new EnvoyLoadAwareRouter(ctx);
    case 'spillway-precise':
    case 'oracle':
      return new PreciseRouter(ctx);
    case 'zone-local':
    case 'spillway':
      return new SchedulerRouter(ctx);
    case 'spillway-fc':
      return new FlowControlRouter(ctx);
  }
}
