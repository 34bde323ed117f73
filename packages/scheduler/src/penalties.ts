import type { Endpoint } from '@spillway/fleet';

/**
 * Passive health (docs/picking.md, "The list", step 7): a primary the gateway did not serve is treated as not ready
 * until its penalty expires. Few endpoints are penalised at a time, so checks are one Map lookup
 * and skipped entirely while the box is empty.
 *
 * A penalty comes from this EPP or from a peer (shared state, docs/sharing.md). A peer's penalties
 * are kept apart so that they go when the peer is forgotten: what a peer claimed lasts no longer
 * than the peer itself. The box answers with the latest end over every source.
 */
export class PenaltyBox {
  /** When each endpoint's penalty ends, over every source: the one lookup a pick makes. */
  private readonly until = new Map<Endpoint, number>();
  /** This EPP's own penalties (what it snapshots for a starting peer). */
  private readonly own = new Map<Endpoint, number>();
  /** Each peer's penalties, by the peer's key. */
  private readonly bySource = new Map<string, Map<Endpoint, number>>();

  get size(): number {
    return this.until.size;
  }

  /** Penalises `endpoint` until `until`; `source` names the peer that said so (none: this EPP). */
  penalise(endpoint: Endpoint, until: number, source?: string): void {
    let held: Map<Endpoint, number> | undefined;
    if (source === undefined) held = this.own;
    else {
      held = this.bySource.get(source);
      if (held === undefined) {
        held = new Map();
        this.bySource.set(source, held);
      }
    }
    const previous = held.get(endpoint);
    if (previous === undefined || previous < until) held.set(endpoint, until);
    const current = this.until.get(endpoint);
    if (current === undefined || current < until) this.until.set(endpoint, until);
  }

  /** Forgets every penalty a peer gave; an endpoint stays penalised only as long as other sources say. */
  forgetSource(source: string): boolean {
    const held = this.bySource.get(source);
    if (held === undefined) return false;
    this.bySource.delete(source);
    for (const endpoint of held.keys()) this.recompute(endpoint);
    return held.size > 0;
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

  /** When the first penalty in force at `now` ends; undefined when none is (few are: a walk of the box). */
  nextEndAfter(now: number): number | undefined {
    let next: number | undefined;
    for (const until of this.until.values()) if (now < until && (next === undefined || until < next)) next = until;
    return next;
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

  /** Housekeeping: forgets expired penalties of every source (`active` keeps only the merged view tidy). */
  prune(now: number): void {
    this.active(now);
    dropExpired(this.own, now);
    for (const [source, held] of this.bySource) {
      dropExpired(held, now);
      if (held.size === 0) this.bySource.delete(source);
    }
  }

  /** This EPP's own penalties in force at `now`, with when each ends (a peer's are its own to tell). */
  *ownEntries(now: number): IterableIterator<[Endpoint, number]> {
    for (const [endpoint, until] of this.own) if (now < until) yield [endpoint, until];
  }

  forget(endpoint: Endpoint): void {
    this.until.delete(endpoint);
    this.own.delete(endpoint);
    for (const held of this.bySource.values()) held.delete(endpoint);
  }

  private recompute(endpoint: Endpoint): void {
    let until = this.own.get(endpoint);
    for (const held of this.bySource.values()) {
      const other = held.get(endpoint);
      if (other !== undefined && (until === undefined || other > until)) until = other;
    }
    if (until === undefined) this.until.delete(endpoint);
    else this.until.set(endpoint, until);
  }
}

function dropExpired(held: Map<Endpoint, number>, now: number): void {
  for (const [endpoint, until] of held) if (now >= until) held.delete(endpoint);
}
