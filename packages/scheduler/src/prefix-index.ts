import type { Endpoint } from '@spillway/fleet';

/**
 * The approximate prefix-cache index: for each endpoint, the block hashes this EPP has sent it,
 * as a bounded LRU (a Map in recency order), plus the reverse map hash -> endpoints.
 *
 * Chains are inserted tail first, so a block is always at least as recent as the blocks after it
 * in any chain, and LRU eviction takes tails before heads (as vLLM frees blocks). Hence holding
 * block i implies holding blocks 0..i−1: the holders of a prompt's blocks are nested sets. That makes
 * matching cheap: the deepest block anyone holds is found by binary search over the prompt's
 * blocks, and one endpoint's match length (the reference's greedy count of leading blocks) by
 * binary search over membership — O(log blocks) per candidate instead of walking every holder of a
 * shared system prompt through every block.
 */
export class PrefixIndex {
  private readonly byEndpoint = new Map<Endpoint, Map<number, true>>();
  private readonly holders = new Map<number, Set<Endpoint>>();
  // Per-pick state of prepare(): the prompt's hashes and the holder sets fetched so far.
  private hashes: Float64Array = new Float64Array(0);
  private levels: (Set<Endpoint> | undefined)[] = [];
  private fetched = new Int32Array(0);
  private epoch = 0;
  /** Blocks of the current prompt held by at least one endpoint. */
  depth = 0;

  /** Blocks currently indexed over all endpoints (a memory gauge for the EPP). */
  get size(): number {
    let total = 0;
    for (const lru of this.byEndpoint.values()) total += lru.size;
    return total;
  }

  /** Readies matchOf() for a prompt; returns how many leading blocks the best holder has. */
  prepare(hashes: Float64Array, count: number): number {
    this.hashes = hashes;
    if (this.fetched.length < hashes.length) {
      this.fetched = new Int32Array(hashes.length);
      this.levels = new Array<Set<Endpoint> | undefined>(hashes.length);
    }
    this.epoch = (this.epoch + 1) | 0;
    // Largest d in [0, count] with level d−1 held by someone (levels are nested, so emptiness is monotone).
    let lo = 0;
    let hi = count;
    while (lo < hi) {
      const mid = (lo + hi + 1) >> 1;
      if (this.level(mid - 1) !== undefined) lo = mid;
      else hi = mid - 1;
    }
    this.depth = lo;
    return lo;
  }

  /** The endpoints holding the deepest matched block: the best prefix matches of the prompt. */
  bestHolders(): ReadonlySet<Endpoint> | undefined {
    return this.depth > 0 ? this.level(this.depth - 1) : undefined;
  }

  /** Leading blocks of the prepared prompt this endpoint holds. */
  matchOf(endpoint: Endpoint): number {
    const depth = this.depth;
    if (depth === 0 || !(this.level(0) as Set<Endpoint>).has(endpoint)) return 0;
    if ((this.level(depth - 1) as Set<Endpoint>).has(endpoint)) return depth;
    let lo = 1;
    let hi = depth - 1;
    while (lo < hi) {
      const mid = (lo + hi + 1) >> 1;
      if (this.level(mid - 1)?.has(endpoint)) lo = mid;
      else hi = mid - 1;
    }
    return lo;
  }

  /** Records that `endpoint` now caches these blocks; evicts its least recently used beyond `capacity`. */
  insert(endpoint: Endpoint, hashes: ArrayLike<number>, count: number, capacity: number): void {
    if (count === 0) return;
    let lru = this.byEndpoint.get(endpoint);
    if (!lru) {
      lru = new Map();
      this.byEndpoint.set(endpoint, lru);
    }
    for (let i = count - 1; i >= 0; i--) {
      const hash = hashes[i] as number;
      if (lru.delete(hash)) {
        lru.set(hash, true);
        continue;
      }
      lru.set(hash, true);
      let set = this.holders.get(hash);
      if (!set) {
        set = new Set();
        this.holders.set(hash, set);
      }
      set.add(endpoint);
    }
    while (lru.size > capacity) {
      const oldest = lru.keys().next().value as number;
      lru.delete(oldest);
      this.unhold(oldest, endpoint);
    }
    this.epoch = (this.epoch + 1) | 0; // holder sets may have been created or dropped
  }

  /** Forgets an endpoint (deleted pod, or a restart that emptied its cache). */
  drop(endpoint: Endpoint): void {
    const lru = this.byEndpoint.get(endpoint);
    if (!lru) return;
    for (const hash of lru.keys()) this.unhold(hash, endpoint);
    this.byEndpoint.delete(endpoint);
    this.epoch = (this.epoch + 1) | 0;
  }

  endpoints(): IterableIterator<Endpoint> {
    return this.byEndpoint.keys();
  }

  private level(i: number): Set<Endpoint> | undefined {
    if (this.fetched[i] !== this.epoch) {
      this.fetched[i] = this.epoch;
      this.levels[i] = this.holders.get(this.hashes[i] as number);
    }
    return this.levels[i];
  }

  private unhold(hash: number, endpoint: Endpoint): void {
    const set = this.holders.get(hash);
    if (!set) return;
    set.delete(endpoint);
    if (set.size === 0) this.holders.delete(hash);
  }
}
