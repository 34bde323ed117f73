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
 * next scan. `refreshMs: 0` makes every pick exact and O(pool). A scan due by time is spread over
 * several picks, `scanPerPick` pods each (see RemoteShortlist.refresh).
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
  /** The scan under way, when one is spread over several picks (see refresh). */
  private readonly scan: ScanProgress = {
    running: false,
    startedAt: 0,
    pool: undefined,
    topologyVersion: -1,
    zones: [],
    zone: 0,
    members: undefined,
    offered: 0,
    silent: 0,
  };

  constructor(private readonly ranking: ShortlistRanking) {}

  /** Drops the cached ranking (config change, tests). */
  invalidate(): void {
    this.scannedAt = Number.NEGATIVE_INFINITY;
    this.abandonScan();
  }

  /**
   * Brings the list up to date for this pick, spending at most `budget` base keys on a scan that is
   * due by time (0: no limit). A scan due by time is spread over the next picks: each prices the
   * next `budget` remote pods and the list in use stays the last complete one until the new one is
   * complete, so no single pick pays for the whole pool (at 1,000 pods a scan is a few hundred µs).
   * A scan is done whole, at once, when there is no list yet, when the
   * list became doubtful (every listed pod is now dearer than the best one left off: spilled load
   * must move on now, not a few picks later), and when the scan under way started `refreshMs` ago or
   * more (picks are rare: nothing to spread over). A topology change abandons the scan under way
   * (its pods may have left) and the next pick begins a new one; the list in use stays, its pods
   * that left are skipped by the collection.
   */
  refresh(pool: PoolView, network: ZoneNetwork, topologyVersion: number, now: number, limits: ShortlistLimits): void {
    const { size, refreshMs, scanPerPick: budget } = limits;
    const scan = this.scan;
    if (scan.running && (scan.pool !== pool || scan.topologyVersion !== topologyVersion || now < scan.startedAt)) this.abandonScan();
    if (this.scannedAt === Number.NEGATIVE_INFINITY || this.doubtful(network, pool, topologyVersion)) {
      this.abandonScan();
      this.beginScan(pool, topologyVersion, now, size);
      this.continueScan(network, Number.POSITIVE_INFINITY);
      return;
    }
    if (!scan.running) {
      if (!this.due(now, refreshMs)) return;
      this.beginScan(pool, topologyVersion, now, size);
    }
    const whole = budget <= 0 || now - scan.startedAt >= refreshMs;
    this.continueScan(network, whole ? Number.POSITIVE_INFINITY : budget);
  }

  /** Keeps the `size` remote endpoints of `pool` with the lowest base key, as of `now`: a whole scan at once. */
  rescan(pool: PoolView, network: ZoneNetwork, topologyVersion: number, now: number, size: number): void {
    this.abandonScan();
    this.beginScan(pool, topologyVersion, now, size);
    this.continueScan(network, Number.POSITIVE_INFINITY);
  }

  private due(now: number, refreshMs: number): boolean {
    return now - this.scannedAt >= refreshMs || now < this.scannedAt;
  }

  /** Every listed endpoint is now dearer than the best one the scan left off. */
  private doubtful(network: ZoneNetwork, pool: PoolView, topologyVersion: number): boolean {
    if (this.cutoff === Number.POSITIVE_INFINITY) return false;
    const baseKey = this.ranking.baseKey;
    for (const endpoint of this.endpoints) {
      if (endpoint.ready && baseKey(endpoint, network.tierOf(pool, endpoint.zone, topologyVersion)) <= this.cutoff) return false;
    }
    return true;
  }

  private beginScan(pool: PoolView, topologyVersion: number, now: number, size: number): void {
    const scan = this.scan;
    if (this.candidates.length < pool.readyCount)
      this.candidates = new Array<Endpoint | undefined>(Math.max(64, 2 * pool.readyCount)).fill(undefined);
    scan.running = true;
    scan.startedAt = now;
    scan.pool = pool;
    scan.topologyVersion = topologyVersion;
    scan.zones.length = 0;
    for (const zone of pool.readyZones()) scan.zones.push(zone);
    scan.zone = 0;
    scan.members = undefined;
    scan.offered = 0;
    scan.silent = 0;
    // One more than the list holds: the best endpoint left off sets the cutoff.
    this.best.reset(size + 1);
    this.size = size;
  }

  /** The list size of the scan under way. */
  private size = 0;

  /**
   * Offers up to `budget` more remote pods to the top-k (allocation-free: excluded pods, penalised
   * or silent, are skipped, the rest offered by their base key as they come); completes the list
   * when the last zone is done.
   */
  private continueScan(network: ZoneNetwork, budget: number): void {
    const scan = this.scan;
    const pool = scan.pool as PoolView;
    const { baseKey, isPenalised, isSilent, rng } = this.ranking;
    const scratch = this.candidates;
    const best = this.best;
    let left = budget;
    while (scan.zone < scan.zones.length) {
      if (scan.members === undefined) {
        const zone = scan.zones[scan.zone] as string;
        if (network.tierOf(pool, zone, scan.topologyVersion) === TIER_LOCAL) {
          scan.zone++;
          continue;
        }
        scan.members = pool.readyInZone(zone).values();
      }
      const tier = network.tierOf(pool, scan.zones[scan.zone] as string, scan.topologyVersion);
      for (;;) {
        if (left <= 0) return;
        const next = scan.members.next();
        if (next.done === true) break;
        const endpoint = next.value;
        left--;
        const quiet = isSilent(endpoint);
        if (quiet) scan.silent++;
        if (isPenalised(endpoint) || quiet) continue;
        scratch[scan.offered] = endpoint;
        best.offer(scan.offered, -baseKey(endpoint, tier), rng);
        scan.offered++;
      }
      scan.members = undefined;
      scan.zone++;
    }
    this.completeScan();
  }

  private completeScan(): void {
    const scan = this.scan;
    const best = this.best;
    const scratch = this.candidates;
    const size = this.size;
    const listed = Math.min(size, best.size);
    const out: Endpoint[] = [];
    for (let i = 0; i < listed; i++) out.push(scratch[best.index[i] as number] as Endpoint);
    this.cutoff = best.size > size ? -(best.key[size] as number) : Number.POSITIVE_INFINITY;
    this.endpoints = out;
    this.silentCount = scan.silent;
    this.scannedAt = scan.startedAt;
    // Do not pin endpoints that left the pool.
    scratch.fill(undefined, 0, scan.offered);
    this.resetScan();
  }

  private abandonScan(): void {
    if (this.scan.running) this.candidates.fill(undefined, 0, this.scan.offered);
    this.resetScan();
  }

  private resetScan(): void {
    const scan = this.scan;
    scan.running = false;
    scan.pool = undefined;
    scan.members = undefined;
    scan.zones.length = 0;
    scan.offered = 0;
    scan.silent = 0;
  }
}

/** The shortlist's size and how its scans are paced (config `remote`). */
export interface ShortlistLimits {
  /** Endpoints listed. */
  readonly size: number;
  /** A scan is due this long after the last began. */
  readonly refreshMs: number;
  /** Base keys a scan due by time may price per pick (0: no limit). */
  readonly scanPerPick: number;
}

/** Where a scan spread over several picks has got to. */
interface ScanProgress {
  running: boolean;
  /** The pick time it began at: the list it makes counts as scanned then. */
  startedAt: number;
  pool: PoolView | undefined;
  topologyVersion: number;
  /** The pool's zones when it began (a topology change abandons the scan). */
  readonly zones: string[];
  /** The zone being scanned, by index into zones. */
  zone: number;
  /** Its pods not yet offered. */
  members: Iterator<Endpoint> | undefined;
  /** Pods offered to the top-k so far (their places in the scratch array). */
  offered: number;
  silent: number;
}
