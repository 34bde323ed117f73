import { parseAddressPattern, type AddressPattern, type SubsetHint } from '@spillway/events';
import type { Endpoint, PoolView } from '@spillway/fleet';

/** What the gateway's subset hint said: entries read, malformed ones, and well-formed ones matching nothing routable. */
export interface SubsetCounts {
  entries: number;
  ignored: number;
  unmatched: number;
}

/**
 * Longest subset entry read, in characters. The longest valid entry, an IPv6 address written with
 * an IPv4 tail, bracketed, with a port (`[ffff:ffff:ffff:ffff:ffff:ffff:255.255.255.255]:65535`),
 * is 53; the rest is room for surrounding spaces. A longer entry is malformed: ignored and counted.
 */
export const MAX_SUBSET_ENTRY_CHARS = 64;
/** Entries read from one hint; the rest are ignored and counted (a pool's subset is far smaller). */
export const MAX_SUBSET_ENTRIES = 16_384;
/** Entries naming no routable pod kept per resolution, so the EPP can say which (they are counted in full). */
export const MAX_UNMATCHED_KEPT = 8;
/** Parsed entries cached, and their approximate size in bytes: past either the cache starts over. */
const CACHE_ENTRIES = 16_384;
const CACHE_BYTES = 2 * 1024 * 1024;
/** Map slot, key string header and the parsed pattern, roughly, per cached entry. */
const CACHE_ENTRY_OVERHEAD = 160;

/**
 * Resolves subset entries (docs/protocol.md: exact `ip:port`, or a bare IP meaning all its ports) to
 * routable endpoints. Gateways send the same entries request after request, so well-formed
 * entries are cached by their text. Hostile hints cannot make the cache or the request path hold
 * much: an entry longer than MAX_SUBSET_ENTRY_CHARS is never copied or parsed, at most
 * MAX_SUBSET_ENTRIES are read per hint, and the cache is bounded in entries and bytes (it is
 * cleared when full).
 */
export class SubsetResolver {
  private readonly patterns = new Map<string, AddressPattern>();
  private cachedBytes = 0;

  /** Where the current resolution puts the first entries that name no routable pod (detached copies). */
  private unmatched: string[] | undefined;

  /**
   * Calls `visit` for each routable endpoint any entry matches (an endpoint may be visited more than
   * once when entries overlap; the caller deduplicates). Fills the counts, and `unmatched` (when
   * given) with the first MAX_UNMATCHED_KEPT well-formed entries that name no routable pod: a
   * stale hint (pods rescheduled) silently narrows the subset otherwise.
   */
  resolve(
    pool: PoolView | undefined,
    hint: SubsetHint,
    visit: (endpoint: Endpoint) => void,
    counts: SubsetCounts,
    unmatched?: string[],
  ): void {
    counts.entries = 0;
    counts.ignored = 0;
    counts.unmatched = 0;
    this.unmatched = unmatched;
    if (typeof hint === 'string') this.resolveText(pool, hint, visit, counts);
    else this.resolveList(pool, hint, visit, counts);
    this.unmatched = undefined;
  }

  private resolveList(
    pool: PoolView | undefined,
    list: readonly unknown[],
    visit: (endpoint: Endpoint) => void,
    counts: SubsetCounts,
  ): void {
    const n = Math.min(list.length, MAX_SUBSET_ENTRIES);
    for (let i = 0; i < n; i++) {
      const entry = list[i];
      this.resolveEntry(pool, typeof entry === 'string' && entry.length <= MAX_SUBSET_ENTRY_CHARS ? entry : undefined, visit, counts);
    }
    const skipped = list.length - n;
    counts.entries += skipped;
    counts.ignored += skipped;
  }

  /** One comma-separated string, walked without splitting it (an oversized part is never copied). */
  private resolveText(pool: PoolView | undefined, text: string, visit: (endpoint: Endpoint) => void, counts: SubsetCounts): void {
    if (text.length === 0) return;
    let start = 0;
    for (;;) {
      const comma = text.indexOf(',', start);
      const end = comma < 0 ? text.length : comma;
      if (counts.entries < MAX_SUBSET_ENTRIES) {
        this.resolveEntry(pool, end - start <= MAX_SUBSET_ENTRY_CHARS ? text.slice(start, end) : undefined, visit, counts);
      } else {
        counts.entries++;
        counts.ignored++;
      }
      if (comma < 0) return;
      start = comma + 1;
    }
  }

  /** `entry` undefined: malformed before parsing (not a string, or too long). */
  private resolveEntry(
    pool: PoolView | undefined,
    entry: string | undefined,
    visit: (endpoint: Endpoint) => void,
    counts: SubsetCounts,
  ): void {
    counts.entries++;
    const pattern = entry === undefined ? undefined : this.parse(entry);
    if (pattern === undefined) {
      counts.ignored++;
      return;
    }
    const matched = pool === undefined ? [] : pattern.port === undefined ? pool.routableOnIp(pattern.ip) : pool.routableAt(pattern.key);
    if (matched.length === 0) {
      counts.unmatched++;
      if (this.unmatched !== undefined && this.unmatched.length < MAX_UNMATCHED_KEPT) this.unmatched.push(detached(pattern.key));
    }
    for (let j = 0; j < matched.length; j++) visit(matched[j] as Endpoint);
  }

  private parse(text: string): AddressPattern | undefined {
    const cached = this.patterns.get(text);
    if (cached !== undefined) return cached;
    const pattern = parseAddressPattern(text);
    // Malformed entries are not cached: junk cannot push out the entries gateways keep sending.
    if (pattern === undefined) return undefined;
    const bytes = text.length * 2 + CACHE_ENTRY_OVERHEAD;
    if (this.patterns.size >= CACHE_ENTRIES || this.cachedBytes + bytes > CACHE_BYTES) {
      this.patterns.clear();
      this.cachedBytes = 0;
    }
    this.patterns.set(detached(text), pattern);
    this.cachedBytes += bytes;
    return pattern;
  }
}

/**
 * A copy of `text` that shares no memory with the string it was cut from. V8 keeps a substring
 * of 13 or more characters as a view into its parent, so caching `hint.slice(...)` would keep
 * the whole (possibly megabytes long) hint alive; flattening a concatenation makes a fresh string.
 */
export function detached(text: string): string {
  return (' ' + text).slice(1);
}
