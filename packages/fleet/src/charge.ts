import type { Endpoint } from './endpoint.js';

/**
 * Why the fleet ended a charge itself, without a completion signal (docs/picking.md, "A request's
 * charge"):
 * - `samples`: a sample taken after the request started can no longer hold every request still
 *   charged to the endpoint, so the surplus finished (oldest first);
 * - `bound`: the request has run past the bound derived from it (prompt and output tokens at the
 *   endpoint's rates, capped);
 * - `cap`: the charges held reached their bound in bytes (or the endpoint's in number), and this,
 *   the started charge closest to its own end, made room.
 */
export type ChargeEnd = 'samples' | 'bound' | 'cap';

/** Estimated bytes of a bare charge (its fields and its place in the lists); owners that hold more say so. */
export const CHARGE_BYTES = 160;

/**
 * One request charged to an endpoint: it loads the endpoint from `chargedAt` (its pick, on this
 * EPP's clock) until it ends. It is *started* once its response has begun (`startedAt`), and from
 * then on may last long after its ext_proc stream: until a completion is seen, the endpoint's
 * samples account for it, or its bound (`endsBy`) passes.
 *
 * The object is its own list node (the endpoint's charges, oldest first) and heap node (started
 * charges by bound), so charging, starting and ending allocate nothing. A decision record (the
 * EPP's own request) and a peer's in-flight entry extend it; the fleet tells them when it ends a
 * charge itself (`chargeEnded`). Only the fleet writes the fields.
 */
export class Charge {
  /** The endpoint the request loads; undefined while it is not charged (before, after, or refused at the cap). */
  chargedTo: Endpoint | undefined = undefined;
  /** When it was charged there (ms, the EPP's clock): its pick, or the move to the endpoint that served it. */
  chargedAt = 0;
  /** When its response began (ms, the EPP's clock); NaN until then. */
  startedAt = Number.NaN;
  /** The latest it is held without a completion signal (ms); Infinity until started. */
  endsBy = Number.POSITIVE_INFINITY;
  /**
   * Prompt tokens its endpoint must prefill for it (its prompt less what the endpoint was believed to
   * cache when it was picked; for a peer's pick, its hashed blocks the endpoint did not hold): the
   * work it puts ahead of requests picked after it (Fleet.prefillAhead). Set by its owner.
   */
  prefillTokens = 0;
  /** @internal The endpoint's charges, in `chargedAt` order. */
  prevCharge: Charge | undefined = undefined;
  /** @internal */
  nextCharge: Charge | undefined = undefined;
  /** @internal Its place in the fleet's heap of started charges; -1 when not there. */
  heapIndex = -1;

  get started(): boolean {
    return this.startedAt === this.startedAt;
  }

  /** What holding it costs, for the fleet's bound in bytes. */
  get bytes(): number {
    return CHARGE_BYTES;
  }

  /**
   * The fleet ended the charge at `at` without a completion signal (the sample's receive time, or
   * the moment its bound was found passed). Owners override it to pass the news on.
   */
  chargeEnded(_reason: ChargeEnd, _at: number): void {}
}

/** A binary min-heap of started charges by `endsBy`, each knowing its index (removal in O(log n)). */
export class ChargeHeap {
  private readonly items: Charge[] = [];

  get size(): number {
    return this.items.length;
  }

  peek(): Charge | undefined {
    return this.items[0];
  }

  push(charge: Charge): void {
    charge.heapIndex = this.items.length;
    this.items.push(charge);
    this.up(charge.heapIndex);
  }

  remove(charge: Charge): void {
    const at = charge.heapIndex;
    if (at < 0) return;
    const items = this.items;
    const last = items.pop() as Charge;
    charge.heapIndex = -1;
    if (last === charge) return;
    items[at] = last;
    last.heapIndex = at;
    this.up(at);
    this.down(last.heapIndex);
  }

  private up(index: number): void {
    const items = this.items;
    const item = items[index] as Charge;
    while (index > 0) {
      const parent = (index - 1) >> 1;
      const above = items[parent] as Charge;
      if (above.endsBy <= item.endsBy) break;
      items[index] = above;
      above.heapIndex = index;
      index = parent;
    }
    items[index] = item;
    item.heapIndex = index;
  }

  private down(index: number): void {
    const items = this.items;
    const n = items.length;
    const item = items[index] as Charge;
    for (;;) {
      let child = 2 * index + 1;
      if (child >= n) break;
      const right = child + 1;
      if (right < n && (items[right] as Charge).endsBy < (items[child] as Charge).endsBy) child = right;
      const below = items[child] as Charge;
      if (below.endsBy >= item.endsBy) break;
      items[index] = below;
      below.heapIndex = index;
      index = child;
    }
    items[index] = item;
    item.heapIndex = index;
  }
}
