import type { PoolView } from '@spillway/fleet';

/** 0 = the EPP's zone, 1 = another zone of its region, 2 = another region (or an unknown one). */
export type Tier = 0 | 1 | 2;
export const TIER_LOCAL: Tier = 0;
export const TIER_REGION: Tier = 1;
export const TIER_OTHER: Tier = 2;

/**
 * Zone -> tier, cached until the fleet's topology changes (zones and regions come from readiness
 * events). A remote zone counts as same-region only when both regions are known and equal.
 */
export class ZoneTiers {
  private readonly cache = new Map<string, Tier>();
  private version = -1;

  constructor(
    readonly zone: string,
    readonly region: string | undefined,
  ) {}

  tierOf(pool: PoolView, zone: string | undefined, topologyVersion: number): Tier {
    if (zone === this.zone) return TIER_LOCAL;
    if (zone === undefined) return TIER_OTHER;
    if (topologyVersion !== this.version) {
      this.cache.clear();
      this.version = topologyVersion;
    }
    let tier = this.cache.get(zone);
    if (tier === undefined) {
      const region = pool.regionOf(zone);
      tier = this.region !== undefined && region === this.region ? TIER_REGION : TIER_OTHER;
      this.cache.set(zone, tier);
    }
    return tier;
  }
}
