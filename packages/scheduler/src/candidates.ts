import type { Endpoint, PoolView } from '@spillway/fleet';
import type { SubsetMode } from './config.js';
import { isSilent } from './load.js';
import { TIER_LOCAL, type Tier, type ZoneNetwork } from './network.js';
import type { PenaltyBox } from './penalties.js';
import type { RemoteShortlist } from './shortlist.js';
import type { SubsetHint } from '@spillway/events';
import { SubsetResolver, type SubsetCounts } from './subset.js';
import { SubsetMemo } from './subset-memo.js';

const NONE: readonly string[] = Object.freeze([]);

/** What collecting candidates needs besides the pool and the subset. */
export interface CollectOptions {
  /** Tiers seen from the request's local zone (the gateway's, else the EPP's: origins.ts). */
  readonly network: ZoneNetwork;
  readonly subsetMode: SubsetMode;
  readonly now: number;
  readonly topologyVersion: number;
  readonly readinessSilenceMs: number;
  /** Fail-open pass: penalised and silent endpoints are candidates too (the policy ranks them last). */
  readonly includeExcluded: boolean;
  /**
   * When penalties (or silences) alone leave none of the local zone's endpoints while others
   * are eligible, keep the local ones as candidates the policy ranks last (`penaltyFailOpen`).
   */
  readonly keepLastLocal: boolean;
  /** Remote endpoints without a strict subset come from this shortlist when given, else from a full scan. */
  readonly shortlist: RemoteShortlist | undefined;
  /** Endpoints holding the prompt's deepest cached block: they compete even when not shortlisted. */
  readonly prefixHolders: ReadonlySet<Endpoint> | undefined;
  /** At most this many prefix holders join (of each index). */
  readonly prefixHolderBudget: number;
  /** Endpoints the precise block index says hold the prompt's prefix, deepest first: they compete too. */
  readonly kvHolders?: readonly Endpoint[] | undefined;
}

/**
 * Step 1 of a pick: the eligible endpoints (picking v2 "eligibility, by subsetMode"), each with its
 * tier, in reused arrays.
 *
 * - no subset: every ready pod of the pool (local ones scanned in full, remote ones shortlisted);
 * - strict: ready pods whose address is in the subset, whatever their zone, and nothing else;
 * - locality: the subset's local pods, plus remote pods from the EPP's view.
 *
 * Local is the request's local zone (`options.network`): the gateway's when it named a zone the
 * pool has, else the EPP's.
 *
 * Ready means the view says ready and the pod is neither in passive-health penalty nor *silent*
 * (its readiness not re-published while its zone-mates' is). Those two exclusions are dropped in a
 * second pass when they alone leave nothing eligible (fail open). They never empty the list of the
 * local zone either: when they alone leave no local endpoint while remote ones are eligible,
 * the local ones stay as candidates ranked after every other (`localKept`), so the list still
 * holds a way home — a forged or stale penalty cannot send a zone's every request elsewhere with
 * no local entry.
 */
export class CandidateSet {
  endpoints: Endpoint[] = [];
  tiers = new Uint8Array(64);
  /** Collected candidates (a shortlist of the remote ones, without a strict subset). */
  count = 0;
  localCount = 0;
  /** Eligible endpoints: exact even when only a shortlist of the remote ones was collected. */
  eligible = 0;
  /** Routable endpoints left out for a penalty or a readiness silence. */
  excluded = 0;
  /** Local endpoints kept though excluded, because they were the zone's last (ranked last). */
  localKept = 0;
  readonly subsetCounts: SubsetCounts = { entries: 0, ignored: 0, unmatched: 0 };
  /** The first subset entries of this collection that name no routable pod (shared with the memo: never mutate). */
  subsetUnmatched: readonly string[] = NONE;

  /** Remote endpoints collected from the shortlist and the prefix holders, which may overlap. */
  private readonly seen = new Set<Endpoint>();
  /** Local endpoints excluded in this collection, kept back in case they are the zone's last. */
  private readonly heldBack: Endpoint[] = [];
  private readonly subsets = new SubsetMemo(new SubsetResolver());
  private view: PoolView | undefined;
  private options: CollectOptions | undefined;
  private readonly tierNow = (endpoint: Endpoint): Tier => {
    const o = this.options as CollectOptions;
    return o.network.tierOf(this.view as PoolView, endpoint.zone, o.topologyVersion);
  };

  constructor(private readonly penalties: PenaltyBox) {}

  collect(pool: PoolView, subset: SubsetHint | undefined, options: CollectOptions): void {
    this.clear();
    this.options = options;
    this.view = pool;
    const strict = options.subsetMode === 'strict';
    const counts = this.subsetCounts;
    if (subset !== undefined) {
      // Resolved once per distinct hint and topology (subset-memo.ts): each endpoint once, tier known.
      const resolved = this.subsets.resolve(pool, subset, options.topologyVersion, options.network.zone, this.tierNow);
      counts.entries = resolved.counts.entries;
      counts.ignored = resolved.counts.ignored;
      counts.unmatched = resolved.counts.unmatched;
      this.subsetUnmatched = resolved.unmatched;
      const { endpoints, tiers } = resolved;
      for (let i = 0; i < endpoints.length; i++) {
        const tier = tiers[i] as Tier;
        // Locality mode takes the subset's local endpoints; remote ones come from the EPP's view.
        if (strict || tier === TIER_LOCAL) this.add(endpoints[i] as Endpoint, tier);
      }
    } else {
      counts.entries = counts.ignored = counts.unmatched = 0;
      this.subsetUnmatched = NONE;
      for (const endpoint of pool.readyInZone(options.network.zone)) this.add(endpoint, TIER_LOCAL);
    }
    if (subset === undefined || !strict) this.collectRemote(pool, options);
    const heldBack = this.heldBack;
    if (options.keepLastLocal && this.localCount === 0 && this.eligible > 0) {
      for (const endpoint of heldBack) this.push(endpoint, TIER_LOCAL);
      this.localKept = heldBack.length;
    }
    heldBack.length = 0;
    this.view = undefined;
    this.options = undefined;
    this.seen.clear();
  }

  /** Empties the set, dropping its references to endpoints (they may leave the pool). */
  clear(): void {
    for (let i = 0; i < this.count; i++) this.endpoints[i] = undefined as unknown as Endpoint;
    this.count = this.localCount = this.eligible = this.excluded = this.localKept = 0;
    this.subsetUnmatched = NONE;
  }

  /** Penalised or silent: not ready for picking, unless nothing else is. */
  isExcluded(endpoint: Endpoint, pool: PoolView, now: number, silenceMs: number): boolean {
    return this.penalties.isPenalised(endpoint, now) || isSilent(endpoint, pool, now, silenceMs);
  }

  /**
   * One routable endpoint found by a full scan or the subset (each visited once): counted, and
   * collected unless excluded.
   */
  private add(endpoint: Endpoint, tier: Tier): void {
    const o = this.options as CollectOptions;
    if (this.isExcluded(endpoint, this.view as PoolView, o.now, o.readinessSilenceMs)) {
      this.excluded++;
      if (!o.includeExcluded) {
        if (tier === TIER_LOCAL) this.heldBack.push(endpoint);
        return;
      }
    }
    this.eligible++;
    this.push(endpoint, tier);
  }

  private push(endpoint: Endpoint, tier: Tier): void {
    if (this.count >= this.tiers.length) {
      const grown = new Uint8Array(this.tiers.length * 2);
      grown.set(this.tiers);
      this.tiers = grown;
    }
    this.endpoints[this.count] = endpoint;
    this.tiers[this.count] = tier;
    this.count++;
    if (tier === TIER_LOCAL) this.localCount++;
  }

  /** Remote candidates from the EPP's own view (no subset, or locality mode). */
  private collectRemote(pool: PoolView, o: CollectOptions): void {
    const shortlist = o.shortlist;
    if (shortlist === undefined || o.includeExcluded) {
      // Exact: every remote pod (also the rare fail-open pass, which must see excluded ones).
      for (const zone of pool.readyZones()) {
        const tier = o.network.tierOf(pool, zone, o.topologyVersion);
        if (tier !== TIER_LOCAL) for (const endpoint of pool.readyInZone(zone)) this.add(endpoint, tier);
      }
      return;
    }
    let remoteReady = 0;
    for (const zone of pool.readyZones()) if (zone !== o.network.zone) remoteReady += pool.readyInZone(zone).size;
    if (remoteReady === 0) return;
    for (const endpoint of shortlist.endpoints) this.addShortlisted(pool, endpoint, o);
    if (o.prefixHolders) {
      let budget = o.prefixHolderBudget;
      for (const endpoint of o.prefixHolders) {
        if (budget-- <= 0) break;
        this.addShortlisted(pool, endpoint, o);
      }
    }
    if (o.kvHolders)
      for (let i = 0; i < o.kvHolders.length && i < o.prefixHolderBudget; i++) this.addShortlisted(pool, o.kvHolders[i] as Endpoint, o);
    // The count stays exact without a scan: excluded remote endpoints are the penalised ones
    // (few, from the penalty box) and the silent ones the last scan found.
    const excluded = shortlist.silentCount + this.penalisedRemote(pool, o);
    this.excluded += excluded;
    this.eligible += Math.max(0, remoteReady - excluded);
  }

  private addShortlisted(pool: PoolView, endpoint: Endpoint, o: CollectOptions): void {
    if (!endpoint.ready || endpoint.deleted || endpoint.address === undefined || this.seen.has(endpoint)) return;
    const tier = o.network.tierOf(pool, endpoint.zone, o.topologyVersion);
    if (tier === TIER_LOCAL) return;
    this.seen.add(endpoint);
    if (!this.isExcluded(endpoint, pool, o.now, o.readinessSilenceMs)) this.push(endpoint, tier);
  }

  private penalisedRemote(pool: PoolView, o: CollectOptions): number {
    if (this.penalties.size === 0) return 0;
    let count = 0;
    for (const endpoint of this.penalties.active(o.now)) {
      if (!endpoint.ready || endpoint.deleted || endpoint.address === undefined) continue;
      if (o.network.tierOf(pool, endpoint.zone, o.topologyVersion) !== TIER_LOCAL) count++;
    }
    return count;
  }
}
