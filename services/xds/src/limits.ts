/**
 * What one node may make spillway-xds hold (docs/xds.md, "Bounds"). A node's state is a few strings
 * per resource type it subscribes to; these bound it in entries and in bytes, so 1,000 connected
 * nodes cost a known amount however they behave. A request past a bound ends the node's stream
 * with RESOURCE_EXHAUSTED or INVALID_ARGUMENT naming the bound.
 */
export const LIMITS = {
  /** Resource types one stream may subscribe to (xDS defines about ten). */
  typesPerNode: 16,
  /** Resource names per type (spillway-xds serves one per type). */
  namesPerType: 32,
  /** Characters of one resource name, type URL, version or nonce sent back. */
  nameChars: 256,
  /** Characters of node.id, node.cluster, the locality's zone and region, and the user agent. */
  nodeFieldChars: 256,
  /** Characters of a NACK's message kept for the log. */
  nackMessageChars: 512,
  /** Accounted bytes of one node's state (the bounds above allow more; this caps the sum). */
  nodeBytes: 16 * 1024,
} as const;

/** Fixed cost per stream and per subscribed type (object headers, map slots, counters), in accounted bytes. */
export const SESSION_OVERHEAD_BYTES = 256;
export const TYPE_OVERHEAD_BYTES = 128;
export const NAME_OVERHEAD_BYTES = 16;
