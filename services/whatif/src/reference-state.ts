import type { ScrapeSample } from './routers.js';

/**
 * The reference EPP's own state, as its code keeps it (the Gateway API Inference Extension's EPP,
 * now in llm-d; the behaviour is summarised in docs/whatif.md):
 * - its datastore's metrics per pod, from its own scrapes (UpdateTime = when a scrape returned);
 * - the approximate prefix index: per server an LRU of the 64-character block hashes of the
 *   prompts it was sent, sized from the server's KV cache (auto-tune), and a count of each
 *   candidate's leading blocks held;
 * - for `reference-plus` only, a ledger of its own picks the latest scrape cannot have seen.
 */
export interface PodView {
  readonly waiting: number;
  readonly running: number;
  readonly kvUsage: number;
  readonly lora: ScrapeSample['lora'];
  /** When the scrape returned (the datastore's UpdateTime). */
  readonly updatedAt: number;
  readonly readAt: number;
}

const NEVER: PodView = {
  waiting: 0,
  running: 0,
  kvUsage: 0,
  lora: undefined,
  updatedAt: Number.NEGATIVE_INFINITY,
  readAt: Number.NEGATIVE_INFINITY,
};

/** Per replica: the latest scrape, as the datastore holds it (zeros before the first, as a fresh pod's metrics). */
export class ScrapedView {
  private readonly pods: PodView[] = [];

  apply(replica: number, sample: ScrapeSample, now: number): void {
    // Replies can cross (a slow scrape after a fast one): the newest reading wins.
    const prev = this.pods[replica];
    if (prev && prev.readAt > sample.readAt) return;
    this.pods[replica] = {
      waiting: sample.waiting,
      running: sample.running,
      kvUsage: sample.kvUsage,
      lora: sample.lora,
      updatedAt: now,
      readAt: sample.readAt,
    };
  }

  get(replica: number): PodView {
    return this.pods[replica] ?? NEVER;
  }

  fresh(replica: number, now: number, limitMs: number): boolean {
    return now - this.get(replica).updatedAt <= limitMs;
  }
}

/**
 * Picks not yet covered by a scrape: each recorded with when the request reaches the pod; a scrape
 * read after that time counts it, so it leaves the ledger. What `reference-plus` adds to the
 * waiting queue it scores (the reference itself keeps none).
 */
export class PickLedger {
  private readonly arrivals: number[][] = [];

  record(replica: number, reachesPodAt: number): void {
    let list = this.arrivals[replica];
    if (!list) {
      list = [];
      this.arrivals[replica] = list;
    }
    list.push(reachesPodAt);
  }

  /** A scrape read at `readAt` has seen every pick that reached the pod by then. */
  cover(replica: number, readAt: number): void {
    const list = this.arrivals[replica];
    if (!list || list.length === 0) return;
    let keep = 0;
    for (const at of list) if (at > readAt) list[keep++] = at;
    list.length = keep;
  }

  pending(replica: number): number {
    return this.arrivals[replica]?.length ?? 0;
  }
}

/**
 * The approximate prefix index: per server, the hashes of the prompt blocks the picker sent it
 * (an LRU in insertion order, most recent last, as the reference adds a prompt's blocks in order),
 * and the reverse map hash → servers. A server's match is its count of leading blocks held.
 */
export class ApproxPrefixIndex {
  private readonly lrus = new Map<number, Map<number, true>>();
  private readonly holders = new Map<number, Set<number>>();

  /** Leading blocks of `hashes[0..count)` that `replica` holds. */
  match(replica: number, hashes: Float64Array, count: number): number {
    const lru = this.lrus.get(replica);
    if (!lru || count === 0 || !this.holders.get(hashes[0] as number)?.has(replica)) return 0;
    let k = 0;
    while (k < count && lru.has(hashes[k] as number)) k++;
    return k;
  }

  /** The picker sent these blocks to `replica`; its LRU keeps the `capacity` most recent. */
  insert(replica: number, hashes: Float64Array, count: number, capacity: number): void {
    let lru = this.lrus.get(replica);
    if (!lru) {
      lru = new Map();
      this.lrus.set(replica, lru);
    }
    for (let i = 0; i < count; i++) {
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
      set.add(replica);
    }
    while (lru.size > capacity) {
      const oldest = lru.keys().next().value as number;
      lru.delete(oldest);
      const set = this.holders.get(oldest);
      set?.delete(replica);
      if (set?.size === 0) this.holders.delete(oldest);
    }
  }
}
