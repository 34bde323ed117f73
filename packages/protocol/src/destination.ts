// The destination list: `ip:port,ip:port`, primary first (docs/protocol.md).

/**
 * Renders the endpoints the scheduler picked, in order: no spaces, no duplicates, at most
 * `maxEndpoints`. Entries that would corrupt the list (empty, or containing a comma or
 * whitespace) are skipped rather than sent, since Envoy would try them as hosts.
 */
export function renderDestination(endpoints: Iterable<string>, maxEndpoints: number): string {
  if (!Number.isInteger(maxEndpoints) || maxEndpoints < 1) {
    throw new RangeError(`maxEndpoints must be a positive integer, got ${maxEndpoints}`);
  }
  // Lists are a handful of entries long: a linear duplicate scan beats allocating a Set.
  const picked: string[] = [];
  for (const endpoint of endpoints) {
    if (endpoint.length === 0 || /[\s,]/.test(endpoint) || picked.includes(endpoint)) continue;
    picked.push(endpoint);
    if (picked.length === maxEndpoints) break;
  }
  return picked.join(',');
}

/** Splits a destination value back into its entries (for gateways, tests and logs). */
export function parseDestination(value: string): string[] {
  return value === '' ? [] : value.split(',');
}
