import type { Endpoint } from '@spillway/fleet';

/**
 * Passive health (docs/picking.md, "The list", step 7): a primary the gateway did not serve is treated as not ready
 * until its penalty expires. Few endpoints are penalised at a time, so checks are one Map lookup
 * and skipped entirely while the box is empty.
 */
export class PenaltyBox {
  private readonly until = new Map<Endpoint, number>();

  get size(): number {
    return this.until.size;
  }

  penalise(endpoint: Endpoint, until: number): void {
    const current = this.until.get(endpoint);
    if (current === undefined || current < until) this.until.set(endpoint, until);
  }

  isPenalised(endpoint: Endpoint, now: number): boolean {
    if (this.until.size === 0) return false;
    const until = this.until.get(endpoint);
    if (until === undefined) return false;
    if (now < until) return true;
    this.until.delete(endpoint);
    return false;
  }

  /** When the endpoint's penalty ends (ms); undefined when it has none now. Read-only. */
  penalisedUntil(endpoint: Endpoint, now: number): number | undefined {
    const until = this.until.get(endpoint);
    return until !== undefined && now < until ? until : undefined;
  }

  /** Drops expired entries and returns the live ones, for counting and inspection. */
  active(now: number): Endpoint[] {
    const live: Endpoint[] = [];
    for (const [endpoint, until] of this.until) {
      if (now < until) live.push(endpoint);
      else this.until.delete(endpoint);
    }
    return live;
  }

  /** The penalties in force at `now`, with when each ends. */
  *entries(now: number): IterableIterator<[Endpoint, number]> {
    for (const [endpoint, until] of this.until) if (now < until) yield [endpoint, until];
  }

  forget(endpoint: Endpoint): void {
    this.until.delete(endpoint);
  }
}
