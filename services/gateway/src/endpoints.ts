// The configured model servers: the gateway's "cluster". Like Envoy's STATIC cluster, a
// destination entry is usable only if it names one of these (unless --passthrough).
import { loadConfigFile } from '@spillway/cli';
import { parseEndpointAddress } from '@spillway/events';
import { z } from 'zod';
import type { EndpointConfig } from './options.js';

const address = z.string().refine((text) => parseEndpointAddress(text.trim()) !== undefined, 'must be ip:port or [ipv6]:port');

// Same shape as the collector's endpoints file ({ pod, address, zone?, ... }), so one file can
// feed both; fields the gateway does not use (pod, region, engine, labels) are accepted and ignored.
const entrySchema = z.object({ address, zone: z.string().min(1).max(253).optional() });

// A bare list, or `{ endpoints: [...] }`; unwrapped first so errors keep their path (`2.address`).
export const endpointsFileSchema = z.preprocess(
  (raw) =>
    raw !== null && typeof raw === 'object' && !Array.isArray(raw) && 'endpoints' in raw ? (raw as { endpoints: unknown }).endpoints : raw,
  z.array(entrySchema),
);

/** Reads and validates an endpoints file (YAML or JSON); a bad entry throws a CliError naming it. */
export function loadEndpointsFile(path: string): EndpointConfig[] {
  return loadConfigFile(path, endpointsFileSchema);
}

/**
 * The canonical `ip:port` / `[ipv6]:port` spelling (the one the collector publishes and the EPP
 * compares), so `[0:0::1]:80` in a destination finds the endpoint configured as `[::1]:80`.
 */
export function canonicalAddress(text: string): string | undefined {
  return parseEndpointAddress(text.trim())?.key;
}

export interface KnownEndpoint {
  /** Canonical `ip:port`. */
  readonly address: string;
  readonly zone: string | undefined;
  readonly local: boolean;
  readonly priority: number;
  /** What the cluster's source says of its health (EDS); true for a static list. */
  readonly sourceHealthy: boolean;
}

/** Canonicalised, de-duplicated endpoints, looked up by their canonical address. */
export class EndpointTable {
  readonly all: readonly KnownEndpoint[];
  readonly #byAddress: ReadonlyMap<string, KnownEndpoint>;

  constructor(endpoints: readonly EndpointConfig[], zone: string | undefined) {
    const byAddress = new Map<string, KnownEndpoint>();
    for (const endpoint of endpoints) {
      const canonical = canonicalAddress(endpoint.address);
      if (canonical === undefined) {
        throw new RangeError(`endpoint address ${JSON.stringify(endpoint.address)} is not ip:port`);
      }
      if (byAddress.has(canonical)) throw new RangeError(`endpoint ${canonical} is listed twice`);
      // Without a zone of its own the gateway treats every endpoint as local.
      byAddress.set(canonical, {
        address: canonical,
        zone: endpoint.zone,
        local: zone === undefined || endpoint.zone === zone,
        priority: endpoint.priority ?? 0,
        sourceHealthy: endpoint.healthy ?? true,
      });
    }
    this.#byAddress = byAddress;
    this.all = [...byAddress.values()];
  }

  /** The hosts by priority (0 first), in configuration order within each. */
  priorities(): string[][] {
    const levels: string[][] = [];
    for (const endpoint of this.all) (levels[endpoint.priority] ??= []).push(endpoint.address);
    return Array.from(levels, (level) => level ?? []);
  }

  /** The configured endpoint a destination entry names, matched on its canonical spelling. */
  lookup(entry: string): KnownEndpoint | undefined {
    const canonical = canonicalAddress(entry);
    return canonical === undefined ? undefined : this.#byAddress.get(canonical);
  }
}
