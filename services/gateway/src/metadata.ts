// A request's dynamic metadata, handled as the production Envoy config does (infra/envoy):
// metadata_options forwarding [envoy.lb, envoy.lb.subset_hint], receiving [envoy.lb].
import { GATEWAY_ZONE_KEY, LB_NAMESPACE, SERVED_KEY, SUBSET_KEY, SUBSET_NAMESPACE } from '@spillway/protocol';
import type { Metadata } from '@spillway/protocol';
import { applySetMetadata, type SetMetadataEntry } from './set-metadata.js';

type Namespace = Record<string, unknown>;

const FORWARDING = [LB_NAMESPACE, SUBSET_NAMESPACE] as const;
const RECEIVING: ReadonlySet<string> = new Set([LB_NAMESPACE]);

function isNamespace(value: unknown): value is Namespace {
  return value !== null && typeof value === 'object' && !Array.isArray(value);
}

export class DynamicMetadata {
  readonly #namespaces = new Map<string, Namespace>();

  /**
   * What set_metadata writes before ext_proc in the production config: the zone-local subset, and
   * the gateway's zone when it has one (so an EPP of another zone picks for this one).
   */
  setSubsetHint(endpoints: readonly string[], zone: string | undefined): void {
    this.#namespaces.set(
      SUBSET_NAMESPACE,
      zone === undefined ? { [SUBSET_KEY]: [...endpoints] } : { [SUBSET_KEY]: [...endpoints], [GATEWAY_ZONE_KEY]: zone },
    );
  }

  /** What a set_metadata filter config writes (set-metadata.ts): spillway-xds's subset filter, by ECDS. */
  setMetadata(entries: readonly SetMetadataEntry[]): void {
    applySetMetadata(this.#namespaces, entries);
  }

  /** What override_host's selected_host_key writes after each pick. */
  setServed(endpoint: string): void {
    this.#merge(LB_NAMESPACE, { [SERVED_KEY]: endpoint });
  }

  /**
   * ProcessingResponse.dynamic_metadata: only receiving namespaces are kept (Envoy drops the
   * rest), each merged into what the request already has.
   */
  receive(dynamicMetadata: Record<string, unknown> | undefined): void {
    if (dynamicMetadata === undefined) return;
    for (const [name, value] of Object.entries(dynamicMetadata)) {
      if (RECEIVING.has(name) && isNamespace(value)) this.#merge(name, value);
    }
  }

  get(namespace: string, key: string): unknown {
    return this.#namespaces.get(namespace)?.[key];
  }

  /** metadata_context for the next message: the forwarding namespaces that exist so far. */
  forwarded(): Metadata | undefined {
    const filterMetadata: Record<string, Namespace> = {};
    let any = false;
    for (const name of FORWARDING) {
      const value = this.#namespaces.get(name);
      if (value === undefined) continue;
      filterMetadata[name] = { ...value };
      any = true;
    }
    return any ? { filterMetadata, typedFilterMetadata: {} } : undefined;
  }

  #merge(name: string, values: Namespace): void {
    this.#namespaces.set(name, { ...this.#namespaces.get(name), ...values });
  }
}
