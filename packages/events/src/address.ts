import { isIPv4, isIPv6 } from 'node:net';

/**
 * A model-server endpoint address as the protocol writes it: `ip:port`, IPv6 as `[addr]:port`.
 * `key` is the canonical spelling used for lookups and for the destination list, so two spellings
 * of one IPv6 address (`[::1]:80`, `[0:0::1]:80`) are one endpoint.
 */
export interface EndpointAddress {
  readonly ip: string;
  readonly port: number;
  readonly key: string;
}

/** A subset-hint entry: an exact endpoint, or a bare IP that stands for every port of that IP. */
export type AddressPattern = EndpointAddress | { readonly ip: string; readonly port: undefined; readonly key: string };

const PORT = /^[0-9]{1,5}$/;

function parsePort(text: string): number | undefined {
  if (!PORT.test(text)) return undefined;
  const port = Number(text);
  return port >= 1 && port <= 65535 ? port : undefined;
}

/** Canonical IPv6 text (lower case, zero runs compressed) so equal addresses compare equal. */
function canonicalIPv6(ip: string): string {
  // The WHATWG URL parser canonicalises IPv6 per RFC 5952 and is pure.
  return new URL(`http://[${ip}]/`).hostname.slice(1, -1);
}

function canonicalIp(ip: string): string | undefined {
  if (isIPv4(ip)) return ip;
  if (isIPv6(ip) && !ip.includes('%')) return canonicalIPv6(ip);
  return undefined;
}

function formatKey(ip: string, port: number): string {
  return ip.includes(':') ? `[${ip}]:${port}` : `${ip}:${port}`;
}

/**
 * The last address parsed and its result. A readiness event's address is parsed twice in a row,
 * by the schema's check and then by the view applying it; the second is answered from here.
 * Results are frozen, so sharing one is safe.
 */
let lastText: string | undefined;
let lastResult: EndpointAddress | undefined;

/** Parses `ip:port` or `[ipv6]:port`; undefined when malformed. */
export function parseEndpointAddress(text: string): EndpointAddress | undefined {
  if (text === lastText) return lastResult;
  const result = parseAddress(text);
  lastText = text;
  lastResult = result;
  return result;
}

function parseAddress(text: string): EndpointAddress | undefined {
  let ipText: string;
  let portText: string;
  if (text.startsWith('[')) {
    const close = text.indexOf(']');
    if (close < 0 || text[close + 1] !== ':') return undefined;
    ipText = text.slice(1, close);
    portText = text.slice(close + 2);
    if (!isIPv6(ipText)) return undefined;
  } else {
    const colon = text.lastIndexOf(':');
    if (colon < 0) return undefined;
    ipText = text.slice(0, colon);
    portText = text.slice(colon + 1);
    if (!isIPv4(ipText)) return undefined;
  }
  const ip = canonicalIp(ipText);
  const port = parsePort(portText);
  if (ip === undefined || port === undefined) return undefined;
  return Object.freeze({ ip, port, key: formatKey(ip, port) });
}

/**
 * Parses a subset-hint entry (docs/protocol.md, "The subset hint"): an exact endpoint, or a bare IP (IPv4, IPv6 with or
 * without brackets) matching every port of that IP. Undefined when malformed.
 */
export function parseAddressPattern(text: string): AddressPattern | undefined {
  const trimmed = text.trim();
  const exact = parseEndpointAddress(trimmed);
  if (exact) return exact;
  const bare = trimmed.startsWith('[') && trimmed.endsWith(']') ? trimmed.slice(1, -1) : trimmed;
  const ip = canonicalIp(bare);
  return ip === undefined ? undefined : { ip, port: undefined, key: ip };
}

/**
 * The gateway's subset hint as sent (docs/protocol.md): a list of `ip:port` / bare-IP entries, or one
 * comma-separated string. The protocol layer finds it; the scheduler resolves its entries with
 * parseAddressPattern and counts the malformed ones.
 */
export type SubsetHint = readonly unknown[] | string;
