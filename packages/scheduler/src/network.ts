import { distanceOf, type PoolView } from '@spillway/fleet';
import type { NetworkConfig } from './config.js';

/** 0 = the local zone, 1 = another zone of its region, 2 = another region (or an unknown one): @spillway/fleet's distance. */
export type Tier = 0 | 1 | 2;
export const TIER_LOCAL: Tier = 0;
export const TIER_REGION: Tier = 1;
export const TIER_OTHER: Tier = 2;

/**
 * Where each zone is from one local zone (the EPP's, or the gateway's: origins.ts): its tier and
 * the round trip to it in milliseconds. Regions come from readiness events, so both are cached
 * until the fleet's topology changes. A remote zone counts as same-region only when both regions
 * are known and equal (distanceOf).
 */
export class ZoneNetwork {
  private readonly tiers = new Map<string, Tier>();
  private readonly rtts = new Map<string, number>();
  private version = -1;

  constructor(
    readonly zone: string,
    readonly region: string | undefined,
    private readonly config: NetworkConfig,
  ) {}

  tierOf(pool: PoolView, zone: string | undefined, topologyVersion: number): Tier {
    if (zone === this.zone) return TIER_LOCAL;
    if (zone === undefined) return TIER_OTHER;
    this.sync(topologyVersion);
    let tier = this.tiers.get(zone);
    if (tier === undefined) {
      tier = distanceOf(this, { zone, region: pool.regionOf(zone) });
      this.tiers.set(zone, tier);
    }
    return tier;
  }

  /** Round trip from the local zone to `zone`: 0 at home, a configured pair, else by region. */
  rttMs(pool: PoolView, zone: string | undefined, topologyVersion: number): number {
    if (zone === this.zone) return 0;
    const key = zone ?? '';
    this.sync(topologyVersion);
    let rtt = this.rtts.get(key);
    if (rtt === undefined) {
      rtt =
        pairRtt(this.config, this.zone, key) ??
        (this.tierOf(pool, zone, topologyVersion) === TIER_REGION ? this.config.sameRegionMs : this.config.crossRegionMs);
      this.rtts.set(key, rtt);
    }
    return rtt;
  }

  private sync(topologyVersion: number): void {
    if (topologyVersion === this.version) return;
    this.tiers.clear();
    this.rtts.clear();
    this.version = topologyVersion;
  }
}

/** A configured round trip between two zones, given in either direction. */
function pairRtt(config: NetworkConfig, from: string, to: string): number | undefined {
  const table = config.rttMs;
  const forward = Object.hasOwn(table, from) ? table[from] : undefined;
  if (forward && Object.hasOwn(forward, to)) return forward[to];
  const backward = Object.hasOwn(table, to) ? table[to] : undefined;
  if (backward && Object.hasOwn(backward, from)) return backward[from];
  return undefined;
}
