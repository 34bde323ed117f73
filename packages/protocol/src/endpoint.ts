// Endpoint strings as the protocol writes them: `ip:port`, `[ipv6]:port`, or a bare IP.
import { isIPv6 } from 'node:net';

export interface Endpoint {
  /** The IP without brackets; IPv6 in canonical (lower-case, compressed) form. */
  readonly host: string;
  /** Absent for a bare IP, which stands for every port of that IP. */
  readonly port: number | undefined;
  readonly family: 4 | 6;
}

// Dotted quad without leading zeros (which some parsers read as octal), optional port.
const IPV4 = /^(25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)(\.(25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)){3}$/;
const PORT = /^\d{1,5}$/;

function parsePort(text: string): number | undefined {
  if (!PORT.test(text)) return undefined;
  const port = Number(text);
  return port >= 1 && port <= 65535 ? port : undefined;
}

// The WHATWG URL parser gives the canonical text form (RFC 5952) without a hand-written compressor.
function canonicalIPv6(text: string): string | undefined {
  if (!isIPv6(text) || text.includes('%')) return undefined;
  return new URL(`http://[${text}]/`).hostname.slice(1, -1);
}

/** Parses one endpoint; undefined when it is not an IP literal with an optional valid port. */
export function parseEndpoint(text: string): Endpoint | undefined {
  if (text.length === 0) return undefined;
  if (text.charCodeAt(0) === 0x5b /* [ */) {
    const close = text.indexOf(']');
    if (close < 0) return undefined;
    const host = canonicalIPv6(text.slice(1, close));
    if (host === undefined) return undefined;
    if (close === text.length - 1) return { host, port: undefined, family: 6 };
    if (text.charCodeAt(close + 1) !== 0x3a /* : */) return undefined;
    const port = parsePort(text.slice(close + 2));
    return port === undefined ? undefined : { host, port, family: 6 };
  }
  const colon = text.indexOf(':');
  if (colon < 0) return IPV4.test(text) ? { host: text, port: undefined, family: 4 } : undefined;
  if (text.indexOf(':', colon + 1) >= 0) {
    // More than one colon without brackets: a bare IPv6 address, which cannot carry a port.
    const host = canonicalIPv6(text);
    return host === undefined ? undefined : { host, port: undefined, family: 6 };
  }
  const host = text.slice(0, colon);
  if (!IPV4.test(host)) return undefined;
  const port = parsePort(text.slice(colon + 1));
  return port === undefined ? undefined : { host, port, family: 4 };
}

/** `ip:port`, `[ipv6]:port`, or the bare host (IPv6 unbracketed) when there is no port. */
export function formatEndpoint(endpoint: Endpoint): string {
  if (endpoint.port === undefined) return endpoint.host;
  return endpoint.family === 6 ? `[${endpoint.host}]:${endpoint.port}` : `${endpoint.host}:${endpoint.port}`;
}

/**
 * The canonical spelling of an endpoint, or undefined if it is malformed. Addresses that are
 * compared with a subset hint (the fleet's pod addresses) should be canonicalised once, when
 * they enter the view, so matching on the request path is a plain string lookup.
 */
export function canonicalEndpoint(text: string): string | undefined {
  const endpoint = parseEndpoint(text);
  return endpoint === undefined ? undefined : formatEndpoint(endpoint);
}

/** The host part of a canonical `ip:port` / `[ipv6]:port` address, without brackets. */
export function hostOf(address: string): string {
  if (address.charCodeAt(0) === 0x5b) {
    const close = address.indexOf(']');
    return close < 0 ? address : address.slice(1, close);
  }
  const colon = address.lastIndexOf(':');
  return colon < 0 ? address : address.slice(0, colon);
}
