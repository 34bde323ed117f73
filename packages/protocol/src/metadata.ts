// Reads the protocol's values out of ProcessingRequest.metadata_context.
import { formatEndpoint, hostOf, parseEndpoint } from './endpoint.js';
import { LB_NAMESPACE, SERVED_KEY, SUBSET_KEY, SUBSET_NAMESPACE } from './constants.js';
import type { Metadata } from './gen/envoy/config/core/v3/base.js';

/** The gateway's subset hint: the only endpoints the EPP may pick from. */
export interface SubsetHint {
  /** Entries with a port, canonical `ip:port` / `[ipv6]:port`: match that endpoint exactly. */
  readonly endpoints: ReadonlySet<string>;
  /** Bare IPs (IPv6 unbracketed, canonical): match every port of that IP. */
  readonly hosts: ReadonlySet<string>;
  /** Valid distinct entries; 0 means the hint allows nothing (the EPP answers 503). */
  readonly size: number;
  /** Malformed entries that were ignored (for the `subset entries ignored` metric). */
  readonly ignored: number;
}

/** Whether a canonical pod address (see canonicalEndpoint) is allowed by the hint. */
export function subsetIncludes(hint: SubsetHint, address: string): boolean {
  return hint.endpoints.has(address) || (hint.hosts.size > 0 && hint.hosts.has(hostOf(address)));
}

function addEntry(text: string, endpoints: Set<string>, hosts: Set<string>): boolean {
  const endpoint = parseEndpoint(text.trim());
  if (endpoint === undefined) return false;
  if (endpoint.port === undefined) hosts.add(endpoint.host);
  else endpoints.add(formatEndpoint(endpoint));
  return true;
}

/**
 * Reads `filter_metadata["envoy.lb.subset_hint"]["x-gateway-destination-endpoint-subset"]`.
 * Undefined when the key is absent (no restriction). A list of strings is the protocol's form;
 * one comma-separated string (what header_to_metadata produces) is accepted too. Any other
 * value counts as one malformed entry and leaves an empty subset: a gateway that meant to
 * restrict the pick must not silently get the whole pool.
 */
export function readSubsetHint(metadata: Metadata | undefined): SubsetHint | undefined {
  const namespace = metadata?.filterMetadata[SUBSET_NAMESPACE];
  if (namespace === undefined || !Object.hasOwn(namespace, SUBSET_KEY)) return undefined;
  const value = namespace[SUBSET_KEY];
  // A gateway usually sends the same per-route subset on every request: reuse the last parse.
  if (last !== undefined && sameValue(value, last.value)) return last.hint;
  const hint = parseSubset(value);
  last = { value: Array.isArray(value) ? value.slice() : value, hint };
  return hint;
}

// One entry is enough for the common case and cannot grow; hints are never mutated.
let last: { readonly value: unknown; readonly hint: SubsetHint } | undefined;

function sameValue(value: unknown, previous: unknown): boolean {
  if (typeof value === 'string') return value === previous;
  if (!Array.isArray(value) || !Array.isArray(previous) || value.length !== previous.length) return false;
  for (let i = 0; i < value.length; i++) {
    const item: unknown = value[i];
    if (typeof item !== 'string' || item !== previous[i]) return false;
  }
  return true;
}

function parseSubset(value: unknown): SubsetHint {
  const endpoints = new Set<string>();
  const hosts = new Set<string>();
  let ignored = 0;
  if (typeof value === 'string') {
    if (value.trim() !== '') {
      for (const part of value.split(',')) if (!addEntry(part, endpoints, hosts)) ignored++;
    }
  } else if (Array.isArray(value)) {
    for (const item of value as readonly unknown[]) {
      if (typeof item !== 'string' || !addEntry(item, endpoints, hosts)) ignored++;
    }
  } else {
    ignored = 1;
  }
  return Object.freeze({ endpoints, hosts, size: endpoints.size + hosts.size, ignored });
}

/**
 * Reads `filter_metadata["envoy.lb"]["x-gateway-destination-endpoint-served"]` from a response
 * message: the endpoint the gateway actually used, canonicalised; undefined if absent or malformed.
 */
export function readServedEndpoint(metadata: Metadata | undefined): string | undefined {
  const value = metadata?.filterMetadata[LB_NAMESPACE]?.[SERVED_KEY];
  if (typeof value !== 'string') return undefined;
  const served = parseEndpoint(value.trim());
  return served?.port === undefined ? undefined : formatEndpoint(served);
}
