// The set_metadata filter before ext_proc: what it writes into each request's metadata. With a
// static endpoint list, the healthy endpoints of the gateway's zone and the zone (the shipped
// Envoy config's filter with a config written by hand); with --xds, the config spillway-xds serves
// by ECDS, as Envoy's `config_discovery` filter takes it, and until the first one arrives the
// rendered config's `default_config`: the gateway's zone, no subset.
import { GATEWAY_ZONE_KEY, SUBSET_KEY, SUBSET_NAMESPACE } from '@spillway/protocol';
import type { HealthView } from './health.js';
import type { DynamicMetadata } from './metadata.js';
import type { SetMetadataEntry } from './set-metadata.js';

export interface SubsetFilter {
  apply(metadata: DynamicMetadata): void;
  /** The subset the next request would carry. */
  subset(): string[];
}

/** The hint from the gateway's own health view of its static endpoints. */
export function staticSubsetFilter(health: HealthView, zone: string | undefined): SubsetFilter {
  return {
    apply: (metadata) => metadata.setSubsetHint(health.healthyLocal(), zone),
    subset: () => health.healthyLocal(),
  };
}

/** The config spillway-xds serves (ECDS), replaced whole by each accepted update. */
export class DiscoveredSubsetFilter implements SubsetFilter {
  #entries: readonly SetMetadataEntry[];

  constructor(zone: string) {
    this.#entries = [{ metadataNamespace: SUBSET_NAMESPACE, allowOverwrite: false, value: { [GATEWAY_ZONE_KEY]: zone } }];
  }

  update(entries: readonly SetMetadataEntry[]): void {
    this.#entries = entries;
  }

  apply(metadata: DynamicMetadata): void {
    metadata.setMetadata(this.#entries);
  }

  subset(): string[] {
    const values = this.#entries.find((e) => e.metadataNamespace === SUBSET_NAMESPACE)?.value?.[SUBSET_KEY];
    return Array.isArray(values) ? values.filter((v): v is string => typeof v === 'string') : [];
  }
}
