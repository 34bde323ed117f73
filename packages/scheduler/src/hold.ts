import { TIER_LOCAL } from './network.js';

/**
 * What the hold rule reads of a priced pick: each candidate's ranking key (ms, plus bands for
 * limits: a key at or past `limitBand` is full), its expected wait before prefill, and its tier.
 * These are the pricing policy's outputs, whatever its terms: the rule never looks inside them.
 */
export interface PricedCandidates {
  readonly count: number;
  readonly keys: Float64Array;
  readonly waits: Float64Array;
  readonly tiers: Uint8Array;
  readonly limitBand: number;
}

/**
 * Hold or spill, one decision in the cost's currency. A request is held only when
 *   - no eligible endpoint has room: each is full, or its expected wait exceeds `budgetMs`; and
 *   - waiting for local room is expected to be faster than going to the best remote endpoint now:
 *     the least time until a local endpoint's wait falls to the budget (its wait beyond the
 *     budget) is below the cheapest remote endpoint's whole cost (a full one costs a band).
 * Otherwise the request goes now, as the pick ranked it: an endpoint with room wins, and when none
 * has, a remote endpoint that is cheaper than waiting at home takes it (spill at once).
 */
export function shouldHold(priced: PricedCandidates, budgetMs: number): boolean {
  const { count, keys, waits, tiers, limitBand } = priced;
  let localRoomMs = Number.POSITIVE_INFINITY;
  let bestRemote = Number.POSITIVE_INFINITY;
  for (let i = 0; i < count; i++) {
    const key = keys[i] as number;
    const wait = waits[i] as number;
    if (key < limitBand && wait <= budgetMs) return false;
    if (tiers[i] === TIER_LOCAL) {
      const roomMs = wait - budgetMs;
      if (roomMs < localRoomMs) localRoomMs = roomMs;
    } else if (key < bestRemote) {
      bestRemote = key;
    }
  }
  return count > 0 && localRoomMs < bestRemote;
}
