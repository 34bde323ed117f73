import type { Endpoint } from '@spillway/fleet';
import type { DecisionEntry, DecisionRule, EntryReason } from './decision.js';

/** The best few of one group, best first (remote groups: nearest tier first, then score). */
export class RankedGroup {
  readonly endpoints: Endpoint[] = [];
  readonly scores: number[] = [];
  length = 0;

  clear(): void {
    this.length = 0;
  }

  push(endpoint: Endpoint, score: number): void {
    this.endpoints[this.length] = endpoint;
    this.scores[this.length] = score;
    this.length++;
  }
}

export interface ListInput {
  readonly maxEndpoints: number;
  readonly crossZoneFallbacks: number;
  readonly sheddable: boolean;
  readonly localUnsaturated: RankedGroup;
  readonly localSaturated: RankedGroup;
  readonly remoteUnsaturated: RankedGroup;
  readonly remoteSaturated: RankedGroup;
}

export interface ListOutcome {
  readonly rule: Extract<DecisionRule, 'local' | 'spill' | 'last-resort' | 'shed'>;
  readonly entries: DecisionEntry[];
  readonly localOverloaded: boolean;
}

function take(
  entries: DecisionEntry[],
  group: RankedGroup,
  from: number,
  upTo: number,
  saturated: boolean,
  reason: (position: number) => EntryReason,
): number {
  let taken = 0;
  for (let i = from; i < group.length && entries.length < upTo; i++, taken++) {
    const endpoint = group.endpoints[i] as Endpoint;
    entries.push({
      endpoint,
      address: endpoint.address as string,
      zone: endpoint.zone,
      reason: reason(entries.length),
      score: group.scores[i] as number,
      saturated,
    });
  }
  return taken;
}

/**
 * DESIGN §5 steps 2–5 over groups already ranked and cut to maxEndpoints. Groups are disjoint, so
 * the list has no duplicates by construction. Requires at least one eligible endpoint (step 1 is the
 * caller's).
 */
export function buildList(input: ListInput): ListOutcome {
  const { maxEndpoints: max, localUnsaturated: lu, localSaturated: ls, remoteUnsaturated: ru, remoteSaturated: rs } = input;
  const entries: DecisionEntry[] = [];
  // Never let fallbacks take the primary's slot.
  const fallbackCap = Math.min(input.crossZoneFallbacks, max - 1);

  if (lu.length > 0) {
    // Step 3: local first; the last slots for the nearest remote capacity; unfilled remote slots
    // go to further local endpoints, unfilled local slots to further remote ones.
    const fallbacks = Math.min(fallbackCap, ru.length);
    const localSlots = max - fallbacks;
    take(entries, lu, 0, localSlots, false, (p) => (p === 0 ? 'local-best' : 'local'));
    take(entries, ls, 0, localSlots, true, () => 'local-saturated');
    take(entries, ru, 0, max, false, () => 'cross-zone-fallback');
    return { rule: 'local', entries, localOverloaded: false };
  }

  const localEligible = ls.length > 0;
  if (ru.length > 0) {
    // Step 4: widen. The best local endpoint keeps the last slot when there are two or more.
    const reserve = max >= 2 && localEligible ? 1 : 0;
    take(entries, ru, 0, max - reserve, false, () => 'spill');
    take(entries, ls, 0, max, true, () => 'local-fallback');
    return { rule: 'spill', entries, localOverloaded: true };
  }

  // Step 5: nothing unsaturated anywhere.
  if (input.sheddable) return { rule: 'shed', entries, localOverloaded: true };
  const fallbacks = localEligible ? Math.min(fallbackCap, rs.length) : 0;
  take(entries, ls, 0, max - fallbacks, true, () => 'last-resort');
  take(entries, rs, 0, max, true, () => 'last-resort');
  return { rule: 'last-resort', entries, localOverloaded: true };
}
