// Applying the EPP's answers the way Envoy's ext_proc filter does (docs/protocol.md).
import { DESTINATION_KEY, LB_NAMESPACE } from '@spillway/protocol';
import type { HeaderMutation, HeaderValueOption, ImmediateResponse } from '@spillway/protocol';
import type { DynamicMetadata } from './metadata.js';

export type Headers = Array<[name: string, value: string]>;

/** A reply Envoy would reject ("spurious message", an invalid mutation): the request fails with 500. */
export class ProtocolViolation extends Error {
  override readonly name = 'ProtocolViolation';
}

// Envoy's default mutation rules: these cannot be set; `:`-prefixed names and host cannot be removed.
const NOT_SETTABLE = /^(host|:authority|:scheme|:method|x-envoy-.*)$/;
const NOT_REMOVABLE = /^(host|:.*)$/;

/** The value of a set_headers entry. Envoy reads raw_value only and rejects both being set. */
function optionValue(option: HeaderValueOption): [string, string] | undefined {
  const header = option.header;
  if (header === undefined || header.key === '') return undefined;
  if (header.value !== '' && header.rawValue.length > 0) {
    throw new ProtocolViolation(`header ${header.key}: only one of value or raw_value may be set`);
  }
  // A value sent in `value` alone arrives empty at Envoy (envoy issue #31555); do the same, so
  // an EPP with that bug fails here as it would in production.
  return [header.key.toLowerCase(), Buffer.from(header.rawValue).toString('latin1')];
}

/** Applies set_headers (overwrite: Envoy treats an unset `append` as false) and remove_headers. */
export function applyHeaderMutation(headers: Headers, mutation: HeaderMutation | undefined): Headers {
  if (mutation === undefined) return headers;
  let result = headers;
  for (const name of mutation.removeHeaders) {
    const key = name.toLowerCase();
    if (!NOT_REMOVABLE.test(key)) result = result.filter(([n]) => n !== key);
  }
  for (const option of mutation.setHeaders) {
    const entry = optionValue(option);
    if (entry === undefined || NOT_SETTABLE.test(entry[0])) continue;
    const append = option.append === true;
    result = append ? [...result, entry] : [...result.filter(([n]) => n !== entry[0]), entry];
  }
  return result;
}

/**
 * The destination the override_host policy of the production config reads: the `envoy.lb`
 * metadata (its only source, like Istio), falling back to the header the EPP set for
 * header-only consumers. Reading one source avoids Envoy's doubled list when both are configured.
 */
export function destinationOf(metadata: DynamicMetadata, headers: Headers): string | undefined {
  const fromMetadata = metadata.get(LB_NAMESPACE, DESTINATION_KEY);
  if (typeof fromMetadata === 'string') return fromMetadata;
  return headers.find(([name]) => name === DESTINATION_KEY)?.[1];
}

/** override_host's parsing: split on `,`, trim, skip empty parts; order kept. */
export function destinationEntries(value: string | undefined): string[] {
  if (value === undefined) return [];
  return value
    .split(',')
    .map((part) => part.trim())
    .filter((part) => part.length > 0);
}

export interface LocalReply {
  readonly status: number;
  readonly headers: Headers;
  readonly body: Uint8Array;
}

/** An immediate_response as the reply Envoy sends the client. */
export function immediateReply(response: ImmediateResponse): LocalReply {
  const code = response.status?.code ?? 0;
  // HttpStatus is required; Envoy answers an invalid or missing code with 500.
  const status = Number.isInteger(code) && code >= 200 && code <= 599 ? code : 500;
  return { status, headers: applyHeaderMutation([], response.headers), body: response.body };
}
