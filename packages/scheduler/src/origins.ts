import type { PoolView } from '@spillway/fleet';
import type { NetworkConfig } from './config.js';
import { ZoneNetwork } from './network.js';
import type { PricingPolicy } from './pricing.js';
import type { RemoteShortlist } from './shortlist.js';
import { detached } from './subset.js';

/**
 * Where a request comes from: the gateway's zone, which is the pick's local zone, with everything
 * that depends on it — the tiers and round trips seen from it (network.ts), the pricing policy
 * built on them (a cost policy keeps base keys per endpoint, which include the round trip), and
 * the remote shortlist ranked by those keys (shortlist.ts). One origin per zone, so requests of
 * different zones' gateways never share a memo or a shortlist.
 */
export interface Origin {
  readonly zone: string;
  readonly network: ZoneNetwork;
  readonly policy: PricingPolicy;
  readonly shortlist: RemoteShortlist;
}

/** What an origin is made of, given its network; the scheduler supplies it (it owns the config). */
export interface OriginParts {
  policy(network: ZoneNetwork): PricingPolicy;
  shortlist(policy: PricingPolicy): RemoteShortlist;
}

/** Why a pick is seen from the zone it is: the gateway named a zone, or not (docs/picking.md). */
export type GatewayZoneUse = 'none' | 'known' | 'unknown' | 'malformed';

/** The origin a request is picked from, and what the gateway's zone was. */
export interface OriginChoice {
  readonly origin: Origin;
  readonly gatewayZone: GatewayZoneUse;
}

/**
 * The EPP's own origin (its `--zone` and `--region`) and one per other zone whose gateways send
 * requests. Only zones the pool has a (not deleted) pod in get one, so there are at most as many
 * as the pool has zones (the fleet caps those); `prune` drops the origins of zones that left. A
 * zone's region is the view's, as the round trips to it are: an origin is rebuilt when the view
 * names another region for its zone.
 */
export class Origins {
  private home!: Origin;
  private readonly others = new Map<string, Origin>();
  private readonly choice = { origin: undefined as unknown as Origin, gatewayZone: 'none' as GatewayZoneUse };
  private network!: NetworkConfig;

  constructor(
    private readonly zone: string,
    private readonly region: string | undefined,
    private readonly parts: OriginParts,
  ) {}

  /** The EPP's own origin. */
  get own(): Origin {
    return this.home;
  }

  /** Builds every origin anew from a config (a reload): what the old ones cached was priced by the old config. */
  configure(network: NetworkConfig): void {
    this.network = network;
    this.others.clear();
    this.home = this.build(this.zone, this.region);
  }

  /**
   * The origin of a request whose gateway named `zone` (undefined: none; null: a value that is not
   * a zone name). A zone the pool has no pod in is not trusted: the pick is then the EPP's own.
   * The answer is reused by the next call.
   */
  choose(pool: PoolView | undefined, zone: string | null | undefined): OriginChoice {
    const choice = this.choice;
    choice.origin = this.home;
    if (zone === undefined || zone === this.zone) {
      choice.gatewayZone = zone === undefined ? 'none' : 'known';
      return choice;
    }
    if (zone === null) {
      choice.gatewayZone = 'malformed';
      return choice;
    }
    if (pool === undefined || !pool.hasZone(zone)) {
      choice.gatewayZone = 'unknown';
      return choice;
    }
    const region = pool.regionOf(zone);
    let origin = this.others.get(zone);
    if (origin === undefined || origin.network.region !== region) {
      // A copy: the request's string may be a view into a whole message.
      origin = this.build(detached(zone), region);
      this.others.set(origin.zone, origin);
    }
    choice.origin = origin;
    choice.gatewayZone = 'known';
    return choice;
  }

  /** Drops every shortlist's ranking (a penalty, a config change). */
  invalidate(): void {
    this.home.shortlist.invalidate();
    for (const origin of this.others.values()) origin.shortlist.invalidate();
  }

  /** Forgets the origins of zones the pool no longer has a pod in (housekeeping). */
  prune(pool: PoolView | undefined): void {
    for (const zone of [...this.others.keys()]) if (pool === undefined || !pool.hasZone(zone)) this.others.delete(zone);
  }

  /** Origins held besides the EPP's own (for tests). */
  get size(): number {
    return this.others.size;
  }

  private build(zone: string, region: string | undefined): Origin {
    const network = new ZoneNetwork(zone, region, this.network);
    const policy = this.parts.policy(network);
    return { zone, network, policy, shortlist: this.parts.shortlist(policy) };
  }
}
