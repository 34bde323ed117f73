import type { KvKnown } from '@spillway/events';

/** What the relay knows of one rank's cache. */
interface RankView {
  /** When the relay's continuous view of the rank began (ms, the relay's clock). */
  since: number;
  /** The view covers every block the rank's server holds. */
  complete: boolean;
}

/**
 * Whether the relay knows every block a pod's servers hold, per data-parallel rank and for the
 * pod (the `known` of its relayed batches and snapshots, docs/kv-events.md "After a collector
 * restart"). vLLM announces a block once, when it enters the cache, so a relay that did not follow
 * a server from an empty cache cannot name the blocks stored before it: its view is *partial*, and
 * a receiver must not take a block's absence from it as a miss. A rank's view is complete when the
 * relay followed it:
 * - from the server's first batch (sequence 0, live or replayed: its cache was empty before it);
 * - or from a cache reset the server reported (`AllBlocksCleared`, TensorRT-LLM's `created`);
 * - or, after a partial start, once the server's cache turned over: it stored as many blocks as it
 *   holds since the last block the relay could not key for lack of its parent (an `orphan`, which
 *   is a request extending a block stored before the relay's view began) and since the relay last
 *   forgot blocks for its byte bound. An LRU cache that stored its size in blocks has evicted every
 *   block not used meanwhile, and a block used meanwhile almost always gets a continuation stored
 *   (the rest of the prompt, the generated tokens), which would have been that orphan.
 * It becomes partial at every fresh start that is not at sequence 0 (a gap without a full replay, a
 * replay of only the buffer's tail, a dropped connection, a malformed batch) and when the relay
 * forgets blocks for its bound. A rank not heard from yet counts for nothing: its first batch says
 * how its view begins. Pure: the clock is handed in.
 */
export class PodKnowledge {
  private readonly ranks: (RankView | undefined)[] = [];

  /** The rank's view (re)begins at `at`: complete when it begins with the server's first batch. */
  began(rank: number, at: number, fromServerStart: boolean): void {
    this.ranks[rank] = { since: at, complete: fromServerStart };
  }

  heard(rank: number): boolean {
    return this.ranks[rank] !== undefined;
  }

  isComplete(rank: number): boolean {
    return this.ranks[rank]?.complete === true;
  }

  /** The server reported an empty cache, or its cache turned over: from here on the view names every block. */
  completed(rank: number): void {
    const view = this.ranks[rank];
    if (view !== undefined) view.complete = true;
  }

  /** The relay forgot blocks the server may still hold (its byte bound). */
  lost(rank: number): void {
    const view = this.ranks[rank];
    if (view !== undefined) view.complete = false;
  }

  /** The pod's view: continuous since its ranks' latest (re)start, complete when every rank heard from is. */
  known(startedAt: number): KvKnown {
    let since = startedAt;
    let complete = true;
    let any = false;
    for (const view of this.ranks) {
      if (view === undefined) continue;
      if (!any || view.since > since) since = view.since;
      any = true;
      complete &&= view.complete;
    }
    return { since, complete: any && complete };
  }
}
