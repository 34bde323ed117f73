import type { Decision } from '@spillway/scheduler';

/** One decision as the debug endpoint shows it: why each listed endpoint is where it is. */
export interface DecisionSummary {
  at: number;
  /** The gateway's `x-request-id`, so a decision can be matched to its request. */
  requestId: string | undefined;
  status: Decision['status'];
  rule: Decision['rule'];
  policy: Decision['policy'];
  priority: number;
  /** The zone the request was picked for (its local zone), and what the gateway said of its zone. */
  zone: string;
  gatewayZone: Decision['gatewayZone'];
  destination: string;
  counts: Decision['counts'];
  /** The first subset entries that named no routable pod (`counts.subsetUnmatched` counts them all). */
  subsetUnmatchedEntries: readonly string[];
  prefixBlocks: number;
  prefixMatched: number;
  /** Which index priced the primary's cached prefix (precise: the servers' KV events), and the tokens it says the primary caches. */
  prefixSource: Decision['prefixSource'];
  kvMatchedTokens: number;
  entries: {
    address: string;
    pod: string;
    zone: string | undefined;
    reason: string;
    full: boolean;
    cost: Decision['entries'][number]['cost'];
  }[];
}

/**
 * The last `capacity` decisions, for `GET /debug/decisions` on the metrics port. The request path
 * only stores a reference in a ring (no copy, no serialisation); summaries are built when someone
 * asks. Memory is bounded: a decision holds at most maxEndpoints small entries, and the pod names
 * and zones it points at are the fleet's own strings.
 */
export class DecisionLog {
  private readonly ring: (Decision | undefined)[];
  private next = 0;

  constructor(readonly capacity = 100) {
    this.ring = new Array<Decision | undefined>(capacity);
  }

  record(decision: Decision): void {
    if (this.capacity === 0) return;
    this.ring[this.next] = decision;
    this.next = (this.next + 1) % this.capacity;
  }

  /** Newest first, at most `limit`. */
  recent(limit = this.capacity): DecisionSummary[] {
    const out: DecisionSummary[] = [];
    for (let i = 1; i <= this.capacity && out.length < limit; i++) {
      const decision = this.ring[(this.next - i + this.capacity) % this.capacity];
      if (decision !== undefined) out.push(summarize(decision));
    }
    return out;
  }
}

function summarize(d: Decision): DecisionSummary {
  return {
    at: d.at,
    requestId: d.requestId,
    status: d.status,
    rule: d.rule,
    policy: d.policy,
    priority: d.priority,
    zone: d.zone,
    gatewayZone: d.gatewayZone,
    destination: d.destination,
    counts: d.counts,
    subsetUnmatchedEntries: d.subsetUnmatchedEntries,
    prefixBlocks: d.prefixBlocks,
    prefixMatched: d.prefixMatched,
    prefixSource: d.prefixSource,
    kvMatchedTokens: d.kvMatchedTokens,
    entries: d.entries.map((e) => ({
      address: e.address,
      pod: e.endpoint.pod,
      zone: e.zone,
      reason: e.reason,
      full: e.full,
      cost: e.cost,
    })),
  };
}
