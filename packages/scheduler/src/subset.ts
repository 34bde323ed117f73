import { parseAddressPattern, type AddressPattern } from '@spillway/events';
import type { Endpoint, PoolView } from '@spillway/fleet';

/** What the gateway's subset hint said: entries read, malformed ones, and well-formed ones matching nothing routable. */
export interface SubsetCounts {
  entries: number;
  ignored: number;
  unmatched: number;
}

/** A subset hint as the protocol layer hands it over: a list, or one comma-separated string. */
export type SubsetHint = readonly unknown[] | string;

const CACHE_LIMIT = 16_384;

/**
 * Resolves subset entries (DESIGN §4: exact `ip:port`, or a bare IP meaning all its ports) to
 * routable endpoints. Gateways send the same entries request after request, so parsed patterns are
 * cached by their text; the cache is simply cleared when full, which bounds it against junk input.
 */
export class SubsetResolver {
  private readonly patterns = new Map<string, AddressPattern | null>();

  /**
   * Calls `visit` for each routable endpoint any entry matches (an endpoint may be visited more than
   * once when entries overlap; the caller deduplicates). Returns the counts.
   */
  resolve(pool: PoolView | undefined, hint: SubsetHint, visit: (endpoint: Endpoint) => void, counts: SubsetCounts): void {
    counts.entries = 0;
    counts.ignored = 0;
    counts.unmatched = 0;
    const list: readonly unknown[] = typeof hint === 'string' ? (hint.length === 0 ? [] : hint.split(',')) : hint;
    for (let i = 0; i < list.length; i++) {
      const entry = list[i];
      counts.entries++;
      const pattern = typeof entry === 'string' ? this.parse(entry) : null;
      if (pattern === null) {
        counts.ignored++;
        continue;
      }
      const matched = pool === undefined ? [] : pattern.port === undefined ? pool.routableOnIp(pattern.ip) : pool.routableAt(pattern.key);
      if (matched.length === 0) counts.unmatched++;
      for (let j = 0; j < matched.length; j++) visit(matched[j] as Endpoint);
    }
  }

  private parse(text: string): AddressPattern | null {
    let pattern = this.patterns.get(text);
    if (pattern === undefined) {
      pattern = parseAddressPattern(text) ?? null;
      if (this.patterns.size >= CACHE_LIMIT) this.patterns.clear();
      this.patterns.set(text, pattern);
    }
    return pattern;
  }
}
