/** Names and limits fixed by the Endpoint Picker Protocol and Envoy (docs/protocol.md). */

/** Header and metadata key that carries the picked endpoint list. */
export const DESTINATION_KEY = 'x-gateway-destination-endpoint';
/** Prefix of every protocol-owned header; a client must never be able to supply one. */
export const DESTINATION_HEADER_PREFIX = 'x-gateway-destination-endpoint';
export const SUBSET_NAMESPACE = 'envoy.lb.subset_hint';
export const SUBSET_KEY = 'x-gateway-destination-endpoint-subset';
/**
 * Beside the subset, in the same namespace: the gateway's zone (spillway-xds's subset filter writes
 * it), the request's local zone for picking. Spillway's own key, not the protocol's.
 */
export const GATEWAY_ZONE_KEY = 'x-spillway-gateway-zone';
/** Longest zone name (a Kubernetes label value's limit, and the events' limit on names). */
export const MAX_ZONE_CHARS = 253;
export const LB_NAMESPACE = 'envoy.lb';
export const SERVED_KEY = 'x-gateway-destination-endpoint-served';

export const OBJECTIVE_HEADER = 'x-gateway-inference-objective';
export const MODEL_REWRITE_HEADER = 'x-gateway-model-name-rewrite';
/** The flow a request belongs to for flow control's fairness (absent: the default flow). */
export const FAIRNESS_ID_HEADER = 'x-gateway-inference-fairness-id';

/** Envoy caps a streamed body message at 64 KiB; the Gateway API Inference Extension's EPP (now in llm-d) uses 62,000 bytes. */
export const BODY_CHUNK_BYTES = 62_000;

/**
 * Default largest request body the EPP buffers. Large enough for a 1M-token prompt as text
 * (~4 MB), small enough that a few concurrent oversize requests cannot exhaust the heap.
 */
export const DEFAULT_MAX_BODY_BYTES = 8 * 1024 * 1024;
