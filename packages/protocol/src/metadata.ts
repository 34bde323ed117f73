// Reads the protocol's values out of ProcessingRequest.metadata_context.
import { parseEndpointAddress, type SubsetHint } from '@spillway/events';
import { GATEWAY_ZONE_KEY, LB_NAMESPACE, MAX_ZONE_CHARS, SERVED_KEY, SUBSET_KEY, SUBSET_NAMESPACE } from './constants.js';
import type { Metadata } from './gen/envoy/config/core/v3/base.js';

/**
 * Reads `filter_metadata["envoy.lb.subset_hint"]["x-gateway-destination-endpoint-subset"]`.
 * Undefined when the key is absent (no restriction). A value that is neither a list nor a string
 * becomes a list of that one (malformed) entry: a gateway that meant to restrict the pick must
 * get a 503 rather than silently the whole pool.
 */
export function readSubsetHint(metadata: Metadata | undefined): SubsetHint | undefined {
  const namespace = metadata?.filterMetadata[SUBSET_NAMESPACE];
  if (namespace === undefined || !Object.hasOwn(namespace, SUBSET_KEY)) return undefined;
  const value: unknown = namespace[SUBSET_KEY];
  if (typeof value === 'string' || Array.isArray(value)) return value as SubsetHint;
  return [value];
}

/**
 * Reads `filter_metadata["envoy.lb.subset_hint"]["x-spillway-gateway-zone"]`: the zone of the
 * gateway that sent the request. Undefined when absent; null when present but not a zone name (a
 * non-empty string of at most MAX_ZONE_CHARS), so the EPP can count it rather than take it for
 * "no zone". Whether the pool has the zone is the scheduler's question.
 */
export function readGatewayZone(metadata: Metadata | undefined): string | null | undefined {
  const namespace = metadata?.filterMetadata[SUBSET_NAMESPACE];
  if (namespace === undefined || !Object.hasOwn(namespace, GATEWAY_ZONE_KEY)) return undefined;
  const value: unknown = namespace[GATEWAY_ZONE_KEY];
  return typeof value === 'string' && value.length > 0 && value.length <= MAX_ZONE_CHARS ? value : null;
}

/**
 * Reads `filter_metadata["envoy.lb"]["x-gateway-destination-endpoint-served"]` from a response
 * message: the endpoint the gateway actually used, canonicalised; undefined if absent or malformed.
 * `primary`, a canonical `ip:port` key: a value exactly equal to it (the usual case) is returned
 * as is, without parsing, since a canonical key parses to itself.
 */
export function readServedEndpoint(metadata: Metadata | undefined, primary?: string): string | undefined {
  const value = metadata?.filterMetadata[LB_NAMESPACE]?.[SERVED_KEY];
  if (typeof value !== 'string') return undefined;
  if (value === primary) return primary;
  return parseEndpointAddress(value.trim())?.key;
}
