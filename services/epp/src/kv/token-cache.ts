/**
 * Token ids of prompt prefixes, bounded in bytes (keys and ids both count), least recently used
 * evicted first. A Map keeps insertion order, so a hit moves its entry to the end and eviction
 * walks from the front.
 */
export class TokenCache {
  private readonly entries = new Map<string, Uint32Array>();
  private held = 0;
  hits = 0;
  misses = 0;
  evictions = 0;

  constructor(readonly maxBytes: number) {}

  /** What one entry costs: the key's UTF-16 code units, the ids, and a fixed overhead for the Map slot and the objects. */
  static bytesOf(key: string, ids: Uint32Array): number {
    return key.length * 2 + ids.byteLength + 128;
  }

  get bytes(): number {
    return this.held;
  }

  get size(): number {
    return this.entries.size;
  }

  get(key: string): Uint32Array | undefined {
    const ids = this.entries.get(key);
    if (ids === undefined) {
      this.misses++;
      return undefined;
    }
    this.hits++;
    this.entries.delete(key);
    this.entries.set(key, ids);
    return ids;
  }

  set(key: string, ids: Uint32Array): void {
    const size = TokenCache.bytesOf(key, ids);
    // An entry that alone would take more than an eighth of the cache is not kept: it would flush the rest.
    if (size > this.maxBytes / 8) return;
    const old = this.entries.get(key);
    if (old !== undefined) {
      this.held -= TokenCache.bytesOf(key, old);
      this.entries.delete(key);
    }
    this.entries.set(key, ids);
    this.held += size;
    for (const [oldest, value] of this.entries) {
      if (this.held <= this.maxBytes) break;
      this.entries.delete(oldest);
      this.held -= TokenCache.bytesOf(oldest, value);
      this.evictions++;
    }
  }

  clear(): void {
    this.entries.clear();
    this.held = 0;
  }
}
