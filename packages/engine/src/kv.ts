/**
 * The KV-cache block pool with a prefix cache, modelled on vLLM's block manager.
 *
 * Blocks only need an identity once they hold a hashed, full prompt block; everything else (the
 * partial tail of a prompt, decode blocks, blocks still being prefilled) is counted, not named.
 * So the pool is: `emptyFree` anonymous free blocks, a map hash → CachedBlock, and an LRU list of
 * cached blocks nobody references (evictable; they count as free and are reused oldest first).
 */
export interface CachedBlock {
  hash: number;
  refs: number;
  prev: CachedBlock | null;
  next: CachedBlock | null;
}

export class KvPool {
  private emptyFree: number;
  private evictable = 0;
  private readonly cache = new Map<number, CachedBlock>();
  private lruHead: CachedBlock | null = null;
  private lruTail: CachedBlock | null = null;
  /** Evicted block objects, reused so steady-state caching allocates nothing. */
  private readonly spare: CachedBlock[] = [];
  /** Set by `match`: how many matched blocks were evictable (acquiring them takes them off the free count). */
  lastEvictableHits = 0;

  constructor(
    readonly numBlocks: number,
    /** Told each evicted block's hash (KV events); must not touch the pool. */
    private readonly onEvict?: (hash: number) => void,
  ) {
    this.emptyFree = numBlocks;
  }

  /** Blocks that an allocation may use: empty ones plus evictable cached ones. */
  get freeBlocks(): number {
    return this.emptyFree + this.evictable;
  }

  get usedBlocks(): number {
    return this.numBlocks - this.emptyFree - this.evictable;
  }

  get cachedBlocks(): number {
    return this.cache.size;
  }

  get evictableBlocks(): number {
    return this.evictable;
  }

  /** Leading blocks of `hashes[0, limit)` present in the cache. */
  match(hashes: ArrayLike<number> | undefined, limit: number): number {
    this.lastEvictableHits = 0;
    if (!hashes) return 0;
    let k = 0;
    for (; k < limit; k++) {
      const b = this.cache.get(hashes[k] as number);
      if (!b) break;
      if (b.refs === 0) this.lastEvictableHits++;
    }
    return k;
  }

  /** Reference the first `k` blocks of `hashes` (all present: call `match` first) into `out`. */
  acquire(hashes: ArrayLike<number>, k: number, out: CachedBlock[]): void {
    for (let i = 0; i < k; i++) {
      const b = this.cache.get(hashes[i] as number) as CachedBlock;
      if (b.refs === 0) {
        this.lruRemove(b);
        this.evictable--;
      }
      b.refs++;
      out.push(b);
    }
  }

  /** Take `n` anonymous blocks, evicting least recently used cached blocks if needed. */
  allocate(n: number): boolean {
    if (n > this.freeBlocks) return false;
    for (let i = 0; i < n; i++) {
      if (this.emptyFree > 0) {
        this.emptyFree--;
        continue;
      }
      const victim = this.lruHead as CachedBlock;
      this.lruRemove(victim);
      this.cache.delete(victim.hash);
      this.onEvict?.(victim.hash);
      this.evictable--;
      this.spare.push(victim);
    }
    return true;
  }

  /**
   * Drop every cached block (vLLM's reset_prefix_cache). Refused (false) while any block is
   * referenced, as vLLM refuses while requests hold blocks.
   */
  reset(): boolean {
    if (this.usedBlocks > 0) return false;
    this.cache.clear();
    for (let b = this.lruHead; b;) {
      const next: CachedBlock | null = b.next;
      b.prev = b.next = null;
      this.spare.push(b);
      b = next;
    }
    this.lruHead = this.lruTail = null;
    this.evictable = 0;
    this.emptyFree = this.numBlocks;
    return true;
  }

  /** Return anonymous blocks to the pool. */
  releaseAnonymous(n: number): void {
    this.emptyFree += n;
  }

  /**
   * Turn one of the caller's anonymous blocks (a prompt block it just computed) into a cached one.
   * Returns null, leaving the block anonymous, if another request already cached that hash.
   */
  publish(hash: number): CachedBlock | null {
    if (this.cache.has(hash)) return null;
    const b = this.spare.pop() ?? { hash, refs: 0, prev: null, next: null };
    b.hash = hash;
    b.refs = 1;
    b.prev = b.next = null;
    this.cache.set(hash, b);
    return b;
  }

  /**
   * Drop references to `blocks`, last block first, so that when unreferenced they are evicted
   * tail-first: a later request sharing the prefix keeps the head of the chain (what vLLM does).
   */
  release(blocks: CachedBlock[]): void {
    for (let i = blocks.length - 1; i >= 0; i--) {
      const b = blocks[i] as CachedBlock;
      if (--b.refs === 0) {
        this.lruAppend(b);
        this.evictable++;
      }
    }
    blocks.length = 0;
  }

  private lruAppend(b: CachedBlock): void {
    b.prev = this.lruTail;
    b.next = null;
    if (this.lruTail) this.lruTail.next = b;
    else this.lruHead = b;
    this.lruTail = b;
  }

  private lruRemove(b: CachedBlock): void {
    if (b.prev) b.prev.next = b.next;
    else this.lruHead = b.next;
    if (b.next) b.next.prev = b.prev;
    else this.lruTail = b.prev;
    b.prev = b.next = null;
  }
}
