import type { Endpoint } from '@spillway/fleet';

/**
 * The approximate prefix-cache index: for each endpoint, the block hashes this EPP has sent it,
 * as a bounded LRU (a Map in recency order), plus the reverse map hash -> endpoints.
 *
 * Chains are inserted tail first, so a block is always at least as recent as the blocks after it
 * in any chain, and LRU eviction takes tails before heads (as vLLM frees blocks). Hence holding
 * block i implies holding blocks 0..i−1: the holders of a prompt's blocks are nested sets. That makes
 * matching cheap: the deepest block anyone holds is found by binary search over the prompt's
 * blocks, and one endpoint's match length (the greedy count of leading blocks of the Gateway API
 * Inference Extension's EPP, now in llm-d) by
 * binary search over membership — O(log blocks) per candidate instead of walking every holder of a
 * shared system prompt through every block.
 */
/**
 * One endpoint's blocks in recency order, plus the chain most recently inserted. Inserting a chain
 * moves its blocks to the recent end, so inserting the same chain again with nothing in between
 * leaves the map exactly as it is: insert() detects that and skips the map work (the common case of
 * prefix affinity, the same prompt prefix sent to the same endpoint request after request).
 */
class Lru extends Map<number, true> {
  last = new Float64Array(0);
  lastCount = 0;

  /** The previous insert was exactly these hashes (nothing else has changed this map since). */
  repeats(hashes: ArrayLike<number>, count: number): boolean {
    if (count !== this.lastCount) return false;
    const last = this.last;
    // Deepest block first: two chains of one prompt family differ there first.
    for (let i = count - 1; i >= 0; i--) if (last[i] !== hashes[i]) return false;
    return true;
  }

  remember(hashes: ArrayLike<number>, count: number): void {
    if (this.last.length < count) this.last = new Float64Array(Math.max(count, 2 * this.last.length));
    for (let i = 0; i < count; i++) this.last[i] = hashes[i] as number;
    this.lastCount = count;
  }
}

export class PrefixIndex {
  private readonly byEndpoint = new Map<Endpoint, Lru>();
  private readonly holders = new Map<number, Set<Endpoint>>();
  // Per-pick state of prepare(): the prompt's hashes and the holder sets fetched so far.
  private hashes: Float64Array = new Float64Array(0);
  private levels: (Set<Endpoint> | undefined)[] = [];
  private fetched = new Int32Array(0);
  private epoch = 0;
  /** Blocks of the current prompt held by at least one endpoint. */
  depth = 0;
  /** matchOf's previous answer for this prompt: its first guess. */
  private lastMatch = 0;

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
    this.lastMatch = 0;
    return lo;
  }

  /** The endpoints holding the deepest matched block: the best prefix matches of the prompt. */
  bestHolders(): ReadonlySet<Endpoint> | undefined {
    return this.depth > 0 ? this.level(this.depth - 1) : undefined;
  }

  /**
   * Leading blocks of the prepared prompt this endpoint holds: the largest d with the endpoint
   * among the holders of block d−1. Holder sets are nested, so that is a binary search. Most
   * endpoints hold none of the prompt (one lookup says so); of those that do, most hold the same
   * shared prefix (a system prompt), so the search first tries the previous holder's answer, which
   * two lookups confirm when it repeats.
   */
  matchOf(endpoint: Endpoint): number {
    const depth = this.depth;
    if (depth === 0 || this.level(0)?.has(endpoint) !== true) return 0;
    // The answer lies in [lo, hi]: the endpoint holds block lo−1.
    let lo = 1;
    let hi = depth;
    const guess = this.lastMatch;
    if (guess > 1 && guess <= depth) {
      if (this.level(guess - 1)?.has(endpoint) === true) {
        if (guess === depth || this.level(guess)?.has(endpoint) !== true) return guess;
        lo = guess + 1;
      } else {
        hi = guess - 1;
      }
    }
    while (lo < hi) {
      const mid = (lo + hi + 1) >> 1;
      if (this.level(mid - 1)?.has(endpoint) === true) lo = mid;
      else hi = mid - 1;
    }
    this.lastMatch = lo;
    return lo;
  }

  /**
   * Leading blocks of this chain the endpoint holds, without preparing it as the pick's prompt (a
   * peer's pick, before it is learnt). Holding a block implies holding the blocks before it, so a
   * binary search.
   */
  heldPrefix(endpoint: Endpoint, hashes: ArrayLike<number>, count: number): number {
    let lo = 0;
    let hi = count;
    while (lo < hi) {
      const mid = (lo + hi + 1) >> 1;
      if (this.holders.get(hashes[mid - 1] as number)?.has(endpoint) === true) lo = mid;
      else hi = mid - 1;
    }
    return lo;
  }

  /** Records that `endpoint` now caches these blocks; evicts its least recently used beyond `capacity`. */
  insert(endpoint: Endpoint, hashes: ArrayLike<number>, count: number, capacity: number): void {
    if (count === 0) return;
    let lru = this.byEndpoint.get(endpoint);
    if (!lru) {
      lru = new Lru();
      this.byEndpoint.set(endpoint, lru);
    }
    if (!lru.repeats(hashes, count)) this.touch(lru, endpoint, hashes, count);
    // Still evict: the capacity may have shrunk since the last insert.
    while (lru.size > capacity) {
      const oldest = lru.keys().next().value as number;
      lru.delete(oldest);
      this.unhold(oldest, endpoint);
    }
    // Eviction may have taken blocks of the chain itself (capacity below its length): then a repeat
    // is no longer a no-op (a larger capacity would keep more of it), so it must not be skipped.
    if (lru.size < count) lru.lastCount = -1;
    this.epoch = (this.epoch + 1) | 0; // holder sets may have been created or dropped
  }

  /** Moves the chain's blocks to the recent end of `lru` (tail first), adding the new ones to their holder sets. */
  private touch(lru: Lru, endpoint: Endpoint, hashes: ArrayLike<number>, count: number): void {
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
    lru.remember(hashes, count);
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

  /** Each endpoint's blocks, least recently used first (inserting them in this order rebuilds the index). */
  *placements(): IterableIterator<[Endpoint, IterableIterator<number>]> {
    for (const [endpoint, lru] of this.byEndpoint) yield [endpoint, lru.keys()];
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
