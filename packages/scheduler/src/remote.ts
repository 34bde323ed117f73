import type { Endpoint, PoolView } from '@spillway/fleet';
import { Scratch } from './buffers.js';
import type { PenaltyBox } from './penalties.js';
import type { Rng } from './rng.js';
import { isSaturated, type SaturationLimits } from './saturation.js';
import { scoreGroup, type ScoringContext, type WeightedScorer } from './scorers.js';
import { TIER_LOCAL, type ZoneTiers } from './tiers.js';
import { TopK } from './top-k.js';

const noMatch = (): number => 0;

/**
 * The remote side without a strict subset: every ready pod of every other zone is eligible, which
 * at 10,000 pods is too many to score on every pick only to fill one fallback slot. A full scan
 * ranks them by the request-independent scorers (queue, KV) and keeps the best few unsaturated and
 * the best few saturated, nearest tier first; each pick re-checks and rescores just those (plus any
 * remote endpoint the prefix index names).
 *
 * Trade-off: between scans, a remote endpoint that was not on the shortlist is invisible even if
 * its load dropped, and new remote pods appear at the next scan. Scans happen every `refreshMs`
 * (default 20 ms, a fifth of the metrics interval) and as soon as picks drain the unsaturated
 * shortlist, so "no unsaturated remote endpoint" is never concluded from a drained list; it can be
 * concluded from a scan up to `refreshMs` old. `refreshMs: 0` makes every pick exact and O(pool).
 */
export class RemoteShortlist {
  unsaturated: Endpoint[] = [];
  saturated: Endpoint[] = [];
  private scannedAt = Number.NEGATIVE_INFINITY;
  private foundUnsaturated = false;
  private readonly candidates: Endpoint[] = [];
  private tiers = new Uint8Array(64);
  private readonly scratch = new Scratch();
  private readonly bestUnsaturated = new TopK();
  private readonly bestSaturated = new TopK();

  /** Drops the cached ranking (config or scorer change, tests). */
  invalidate(): void {
    this.scannedAt = Number.NEGATIVE_INFINITY;
  }

  /** True when the shortlist must be rebuilt before this pick. */
  stale(now: number, refreshMs: number, limits: SaturationLimits, penalties: PenaltyBox): boolean {
    if (now - this.scannedAt >= refreshMs || now < this.scannedAt) return true;
    if (!this.foundUnsaturated) return false;
    // Picks (and new samples) may have saturated every listed endpoint: look again rather than spill wrongly.
    for (const endpoint of this.unsaturated) {
      if (endpoint.ready && !isSaturated(endpoint, now, limits) && !penalties.isPenalised(endpoint, now)) return false;
    }
    return true;
  }

  scan(
    pool: PoolView,
    zoneTiers: ZoneTiers,
    topologyVersion: number,
    now: number,
    size: number,
    limits: SaturationLimits,
    penalties: PenaltyBox,
    scorers: readonly WeightedScorer[],
    span: number,
    rng: Rng,
  ): void {
    const candidates = this.candidates;
    let count = 0;
    for (const zone of pool.readyZones()) {
      const tier = zoneTiers.tierOf(pool, zone, topologyVersion);
      if (tier === TIER_LOCAL) continue;
      for (const endpoint of pool.readyInZone(zone)) {
        if (penalties.isPenalised(endpoint, now)) continue;
        if (count >= this.tiers.length) {
          const grown = new Uint8Array(this.tiers.length * 2);
          grown.set(this.tiers);
          this.tiers = grown;
        }
        candidates[count] = endpoint;
        this.tiers[count] = tier;
        count++;
      }
    }
    candidates.length = count;
    this.scratch.ensure(count);
    const context: ScoringContext = { model: '', now, prefixBlocks: 0, prefixMatch: noMatch };
    scoreGroup(scorers, context, candidates, count, this.scratch.scorer, this.scratch.scores, true);
    this.bestUnsaturated.reset(size);
    this.bestSaturated.reset(size);
    for (let i = 0; i < count; i++) {
      const key = (2 - (this.tiers[i] as number)) * span + (this.scratch.scores[i] as number);
      if (isSaturated(candidates[i] as Endpoint, now, limits)) this.bestSaturated.offer(i, key, rng);
      else this.bestUnsaturated.offer(i, key, rng);
    }
    this.unsaturated = collect(candidates, this.bestUnsaturated);
    this.saturated = collect(candidates, this.bestSaturated);
    this.scannedAt = now;
    this.foundUnsaturated = this.unsaturated.length > 0;
    // Do not pin endpoints that left the pool.
    candidates.length = 0;
  }
}

function collect(candidates: readonly Endpoint[], top: TopK): Endpoint[] {
  const out: Endpoint[] = [];
  for (let i = 0; i < top.size; i++) out.push(candidates[top.index[i] as number] as Endpoint);
  return out;
}
