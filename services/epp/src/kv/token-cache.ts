/**
 * Token ids of prompt prefixes, bounded in bytes (the prefix's text and its ids both count), least
 * recently used evicted first. A prefix is a list of strings (a conversation's roles and contents, or
 * a leading piece of a completions prompt). Entries are found by a sampled hash of those strings and
 * confirmed by comparing them whole: building and hashing one long key string per request would cost
 * more than the lookup saves (a 10,000-character context is ~30 µs and 20 KB of garbage). Prefixes
 * that differ only where the hash does not look share a bucket (at most BUCKET_ENTRIES, the oldest
 * dropped), so they cost a comparison, never each other's entry. A Map keeps insertion order, so a
 * hit moves its bucket to the end and eviction walks from the front.
 */
interface Entry {
  readonly parts: readonly string[];
  readonly ids: Uint32Array;
  readonly bytes: number;
}

/** Fixed cost of one entry besides its strings and ids: the Map slot, the entry and the parts array. */
const ENTRY_OVERHEAD_BYTES = 160;
/** Entries in one hash bucket at most. */
const BUCKET_ENTRIES = 8;

export class TokenCache {
  private readonly buckets = new Map<number, Entry[]>();
  private held = 0;
  private count = 0;
  hits = 0;
  misses = 0;
  evictions = 0;

  constructor(readonly maxBytes: number) {}

  get bytes(): number {
    return this.held;
  }

  get size(): number {
    return this.count;
  }

  /** The ids of the prefix made of `parts[0..count)`, when cached. */
  get(parts: readonly string[], count = parts.length): Uint32Array | undefined {
    const hash = hashParts(parts, count);
    const bucket = this.buckets.get(hash);
    const entry = bucket?.find((e) => samePrefix(e.parts, parts, count));
    if (bucket === undefined || entry === undefined) {
      this.misses++;
      return undefined;
    }
    this.hits++;
    this.buckets.delete(hash);
    this.buckets.set(hash, bucket);
    return entry.ids;
  }

  set(parts: readonly string[], count: number, ids: Uint32Array): void {
    let chars = 0;
    for (let i = 0; i < count; i++) chars += (parts[i] as string).length;
    const bytes = chars * 2 + ids.byteLength + ENTRY_OVERHEAD_BYTES;
    // An entry that alone would take more than an eighth of the cache is not kept: it would flush the rest.
    if (bytes > this.maxBytes / 8) return;
    const hash = hashParts(parts, count);
    const bucket = this.buckets.get(hash) ?? [];
    const same = bucket.findIndex((e) => samePrefix(e.parts, parts, count));
    if (same >= 0) this.drop(bucket, same);
    if (bucket.length >= BUCKET_ENTRIES) {
      this.drop(bucket, 0);
      this.evictions++;
    }
    bucket.push({ parts: parts.slice(0, count), ids, bytes });
    this.held += bytes;
    this.count++;
    this.buckets.delete(hash);
    this.buckets.set(hash, bucket);
    for (const [oldest, entries] of this.buckets) {
      if (this.held <= this.maxBytes) break;
      this.buckets.delete(oldest);
      for (const entry of entries) this.held -= entry.bytes;
      this.count -= entries.length;
      this.evictions += entries.length;
    }
  }

  clear(): void {
    this.buckets.clear();
    this.held = 0;
    this.count = 0;
  }

  private drop(bucket: Entry[], index: number): void {
    const [entry] = bucket.splice(index, 1);
    if (entry === undefined) return;
    this.held -= entry.bytes;
    this.count--;
  }
}

function samePrefix(cached: readonly string[], parts: readonly string[], count: number): boolean {
  if (cached.length !== count) return false;
  for (let i = 0; i < count; i++) if (cached[i] !== parts[i]) return false;
  return true;
}

/** Characters of each part that feed the hash: its first HASH_HEAD, HASH_SAMPLES spread over it, its last HASH_TAIL, and its length. */
const HASH_HEAD = 512;
const HASH_SAMPLES = 256;
const HASH_TAIL = 64;

/** A 32-bit hash of sampled characters of each part; a collision only costs a comparison. */
function hashParts(parts: readonly string[], count: number): number {
  let h = 0x811c9dc5 ^ count;
  for (let p = 0; p < count; p++) {
    const s = parts[p] as string;
    const n = s.length;
    h = Math.imul(h ^ n, 0x01000193);
    const head = Math.min(n, HASH_HEAD);
    for (let i = 0; i < head; i++) h = Math.imul(h ^ s.charCodeAt(i), 0x01000193);
    const stride = Math.max(1, Math.floor(n / HASH_SAMPLES));
    for (let i = head; i < n; i += stride) h = Math.imul(h ^ s.charCodeAt(i), 0x01000193);
    for (let i = Math.max(head, n - HASH_TAIL); i < n; i++) h = Math.imul(h ^ s.charCodeAt(i), 0x01000193);
  }
  return h >>> 0;
}
