import type { Endpoint, PoolView } from '@spillway/fleet';
import type { Tier } from './network.js';
import type { SubsetHint } from '@spillway/events';
import { detached, MAX_SUBSET_ENTRY_CHARS, type SubsetCounts, type SubsetResolver } from './subset.js';

/** One hint resolved against one topology: its routable endpoints, each once in first-match order, with their tiers. */
export interface ResolvedSubset {
  readonly endpoints: readonly Endpoint[];
  readonly tiers: Uint8Array;
  readonly counts: Readonly<SubsetCounts>;
  /** The first entries (canonical, at most MAX_UNMATCHED_KEPT) that name no routable pod. */
  readonly unmatched: readonly string[];
}

/** Hints remembered at once: a few gateways (or routes) each keep sending their own. */
const MEMO_HINTS = 4;
/** A hint longer than this (characters, a separator counted per entry) is resolved on every pick, never remembered. */
const MEMO_HINT_CHARS = 64 * 1024;
/** Characters of remembered hints over all of them; past it the oldest are forgotten. */
const MEMO_CHARS = 4 * MEMO_HINT_CHARS;

interface Memo {
  /** The local zone the tiers were taken from. */
  readonly zone: string;
  /** A detached copy of the hint: its text, or its entries. */
  readonly key: string | readonly string[];
  readonly chars: number;
  readonly resolved: ResolvedSubset;
}

/**
 * Gateways send the same subset hint request after request, and the pool's topology changes far
 * less often than requests arrive: resolving the hint (parsing, looking up and deduplicating up to
 * thousands of entries) once per distinct hint and topology, instead of on every pick, leaves a
 * pick with one comparison of the hint against what it was (a string comparison, or one per entry).
 *
 * Everything a resolution depends on is in the key: the hint's content, the local zone its tiers
 * are seen from (the gateway's or the EPP's: one zone's gateways send one hint), the pool and the fleet's
 * topology version (which changes with every readiness event, and so with every change of an
 * address, of readiness or of a region). Time-dependent exclusions (penalties, readiness
 * silences) are not resolved here: the caller applies them on every pick. Bounded: at most
 * MEMO_HINTS hints, MEMO_CHARS characters, and no hint over MEMO_HINT_CHARS.
 */
export class SubsetMemo {
  private memos: Memo[] = [];
  private chars = 0;
  private pool: PoolView | undefined;
  private version = -1;
  // Scratch for a resolution: endpoints in first-match order, deduplicated.
  private readonly seen = new Set<Endpoint>();
  private readonly found: Endpoint[] = [];
  private readonly visit = (endpoint: Endpoint): void => {
    if (this.seen.has(endpoint)) return;
    this.seen.add(endpoint);
    this.found.push(endpoint);
  };

  constructor(private readonly resolver: SubsetResolver) {}

  /** The hint's endpoints with their tiers from `zone` (by `tierOf`). */
  resolve(pool: PoolView, hint: SubsetHint, topologyVersion: number, zone: string, tierOf: (endpoint: Endpoint) => Tier): ResolvedSubset {
    if (pool !== this.pool || topologyVersion !== this.version) this.forget(pool, topologyVersion);
    const memos = this.memos;
    for (let i = 0; i < memos.length; i++) {
      const memo = memos[i] as Memo;
      if (memo.zone === zone && sameHint(memo.key, hint)) return memo.resolved;
    }
    const counts: SubsetCounts = { entries: 0, ignored: 0, unmatched: 0 };
    const unmatched: string[] = [];
    this.resolver.resolve(pool, hint, this.visit, counts, unmatched);
    const endpoints = this.found.slice();
    const tiers = new Uint8Array(endpoints.length);
    for (let i = 0; i < endpoints.length; i++) tiers[i] = tierOf(endpoints[i] as Endpoint);
    this.found.length = 0;
    this.seen.clear();
    const resolved: ResolvedSubset = { endpoints, tiers, counts, unmatched };
    this.remember(hint, zone, resolved);
    return resolved;
  }

  private forget(pool: PoolView, topologyVersion: number): void {
    this.memos = [];
    this.chars = 0;
    this.pool = pool;
    this.version = topologyVersion;
  }

  /** `zone` is an origin's (origins.ts), already a detached copy. */
  private remember(hint: SubsetHint, zone: string, resolved: ResolvedSubset): void {
    const key = detachedKey(hint);
    if (key === undefined) return;
    const chars = typeof key === 'string' ? key.length : key.reduce((sum, entry) => sum + entry.length + 1, 0);
    this.memos.unshift({ zone, key, chars, resolved });
    this.chars += chars;
    while (this.memos.length > MEMO_HINTS || this.chars > MEMO_CHARS) this.chars -= (this.memos.pop() as Memo).chars;
  }
}

/** Same entries: the same text, or lists equal entry by entry. */
function sameHint(key: string | readonly string[], hint: SubsetHint): boolean {
  if (typeof key === 'string' || typeof hint === 'string') return key === hint;
  if (key.length !== hint.length) return false;
  for (let i = 0; i < key.length; i++) if (key[i] !== hint[i]) return false;
  return true;
}

/**
 * A copy of the hint sharing no memory with the caller's strings (V8 keeps substrings as views
 * into their parent, which may be a whole message), or undefined when it is not worth keeping:
 * too long, or a list with an entry that is not a short string (such entries are malformed).
 */
function detachedKey(hint: SubsetHint): string | readonly string[] | undefined {
  if (typeof hint === 'string') return hint.length <= MEMO_HINT_CHARS ? detached(hint) : undefined;
  let chars = 0;
  for (const entry of hint) {
    if (typeof entry !== 'string' || entry.length > MAX_SUBSET_ENTRY_CHARS) return undefined;
    chars += entry.length + 1;
    if (chars > MEMO_HINT_CHARS) return undefined;
  }
  return (hint as readonly string[]).map(detached);
}
