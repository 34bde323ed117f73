// Host selection for one request as the shipped config's model-server cluster does it: the
// override_host policy walks the EPP's list, and its fallback policy (round robin over the
// cluster's priorities, priority-lb.ts) serves whatever the list does not (envoyproxy/envoy,
// source/extensions/load_balancing_policies/override_host/load_balancer.cc).
import { canonicalAddress } from './endpoints.js';
import type { EndpointTable } from './endpoints.js';

/**
 * One request's walk along its destination list (OverrideHostFilterState::consumeNextHost, one
 * entry per pick; LoadBalancerImpl::getEndpoint). An entry the cluster does not know is skipped
 * without using an attempt (LoadBalancerImpl::findHost looks it up in the cluster's host map). A
 * known host is taken whatever its health: Envoy's findHost does not check it (its TODO says so).
 */
export class DestinationWalk {
  readonly #entries: readonly string[];
  readonly #table: EndpointTable;
  readonly #passthrough: boolean;
  #next = 0;
  #skipped = 0;

  constructor(entries: readonly string[], table: EndpointTable, passthrough: boolean) {
    this.#entries = entries;
    this.#table = table;
    this.#passthrough = passthrough;
  }

  /** Entries skipped so far because the cluster does not know them. */
  get skipped(): number {
    return this.#skipped;
  }

  /** The next usable entry, or undefined once the list is used up (the fallback policy picks then). */
  next(): string | undefined {
    while (this.#next < this.#entries.length) {
      const entry = this.#entries[this.#next++] as string;
      const known = this.#table.lookup(entry)?.address ?? (this.#passthrough ? canonicalAddress(entry) : undefined);
      if (known !== undefined) return known;
      this.#skipped++;
    }
    return undefined;
  }
}
