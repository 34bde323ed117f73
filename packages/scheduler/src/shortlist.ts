import type { Endpoint, PoolView } from '@spillway/fleet';
import { TIER_LOCAL, type Tier, type ZoneNetwork } from './network.js';
import type { Rng } from './rng.js';
import { TopK } from './top-k.js';

/** The request-independent part of an endpoint's ranking key (lower is better). */
export type BaseKey = (endpoint: Endpoint, tier: Tier) => number;

/**
 * The remote side without a strict subset: every ready pod of every other zone is eligible, which
 * at 10,000 pods is too many to price on every pick. A full scan keeps the `size` remote endpoints
 * with the lowest request-independent key (expected wait, round trip, zone bias); each pick prices
 * just those, plus the remote pods holding the prompt's prefix.
 *
 * The list is rescanned every `refreshMs` (default 20 ms, a fifth of the sample interval) and as
 * soon as picks have made every listed endpoint dearer than the best one left off at the scan, so
 * spilled load moves on to the next zone instead of piling onto a drained list. Between scans a pod
 * that was not listed is invisible even if its load dropped, and new remote pods appear at the
 * next scan. `refreshMs: 0` makes every pick exact and O(pool).
 */
/** What a scan ranks and leaves out by, fixed for the scheduler's life. */
export interface ShortlistRanking {
  readonly baseKey: BaseKey;
  readonly isPenalised: (endpoint: Endpoint) => boolean;
  readonly isSilent: (endpoint: Endpoint) => boolean;
  /** Breaks ties between equal keys. */
  readonly rng: Rng;
}

export class RemoteShortlist {
  endpoints: Endpoint[] = [];
  /** Remote endpoints the last scan found silent (readiness not re-published), for exact counts. */
  silentCount = 0;
  private scannedAt = Number.NEGATIVE_INFINITY;
  /** Base key of the best endpoint the last scan left off; Infinity when it listed them all. */
  private cutoff = Number.POSITIVE_INFINITY;
  /** Scratch for a scan: the endpoints offered, by the index the top-k keeps. */
  private candidates: (Endpoint | undefined)[] = [];
  private readonly best = new TopK();

  constructor(private readonly ranking: ShortlistRanking) {}

  /** Drops the cached ranking (config change, tests). */
  invalidate(): void {
    this.scannedAt = Number.NEGATIVE_INFINITY;
  }

  /** True when the list must be rebuilt before this pick. */
  stale(now: number, refreshMs: number, network: ZoneNetwork, pool: PoolView, topologyVersion: number): boolean {
    const baseKey = this.ranking.baseKey;
    if (now - this.scannedAt >= refreshMs || now < this.scannedAt) return true;
    if (this.cutoff === Number.POSITIVE_INFINITY) return false;
    for (const endpoint of this.endpoints) {
      if (endpoint.ready && baseKey(endpoint, network.tierOf(pool, endpoint.zone, topologyVersion)) <= this.cutoff) return false;
    }
    return true;
  }

  /** Keeps the `size` remote endpoints of `pool` with the lowest base key, as of `now`. */
  scan(pool: PoolView, network: ZoneNetwork, topologyVersion: number, now: number, size: number): void {
    const { baseKey, isPenalised, isSilent, rng } = this.ranking;
    // One pass over every remote pod, allocation-free: excluded pods (penalised or silent) are
    // skipped, the rest offered to the top-k by their base key as they come.
    let scratch = this.candidates;
    if (scratch.length < pool.readyCount)
      scratch = this.candidates = new Array<Endpoint | undefined>(Math.max(64, 2 * pool.readyCount)).fill(undefined);
    let count = 0;
    let silent = 0;
    // One more than the list holds: the best endpoint left off sets the cutoff.
    const best = this.best;
    best.reset(size + 1);
    for (const zone of pool.readyZones()) {
      const tier = network.tierOf(pool, zone, topologyVersion);
      if (tier === TIER_LOCAL) continue;
      for (const endpoint of pool.readyInZone(zone)) {
        const quiet = isSilent(endpoint);
        if (quiet) silent++;
        if (isPenalised(endpoint) || quiet) continue;
        scratch[count] = endpoint;
        best.offer(count, -baseKey(endpoint, tier), rng);
        count++;
      }
    }
    const listed = Math.min(size, best.size);
    const out: Endpoint[] = [];
    for (let i = 0; i < listed; i++) out.push(scratch[best.index[i] as number] as Endpoint);
    this.cutoff = best.size > size ? -(best.key[size] as number) : Number.POSITIVE_INFINITY;
    this.endpoints = out;
    this.silentCount = silent;
    this.scannedAt = now;
    // Do not pin endpoints that left the pool.
    scratch.fill(undefined, 0, count);
  }
}
