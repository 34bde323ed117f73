import { BodySendMode, type ProcessingRequest } from '@spillway/protocol';

/** The ext_proc messages Envoy sends, built for tests and benchmarks that play Envoy. */
const utf8 = new TextEncoder();

export interface RequestOptions {
  path?: string;
  body?: string | Uint8Array;
  /** Split the body into this many chunks. */
  chunks?: number;
  mode?: 'full-duplex' | 'buffered';
  subset?: unknown;
  /** The gateway's zone, in the subset hint's namespace as spillway-xds's filter config writes it (`x-spillway-gateway-zone`). */
  gatewayZone?: unknown;
  headers?: Record<string, string>;
  /** Send no protocol_config (Envoy before 1.34). */
  noProtocolConfig?: boolean;
}

/** The messages Envoy sends for one HTTP request, as our generated types. */
export function envoyRequestMessages(options: RequestOptions = {}): ProcessingRequest[] {
  const body = typeof options.body === 'string' ? utf8.encode(options.body) : options.body;
  const mode = options.mode === 'buffered' ? BodySendMode.BUFFERED : BodySendMode.FULL_DUPLEX_STREAMED;
  const headers = {
    ':method': body ? 'POST' : 'GET',
    ':path': options.path ?? '/v1/completions',
    ':authority': 'gateway',
    'content-type': 'application/json',
    ...options.headers,
  };
  const hint: Record<string, unknown> = {};
  if (options.subset !== undefined) hint['x-gateway-destination-endpoint-subset'] = options.subset;
  if (options.gatewayZone !== undefined) hint['x-spillway-gateway-zone'] = options.gatewayZone;
  const metadataContext =
    Object.keys(hint).length === 0 ? undefined : { filterMetadata: { 'envoy.lb.subset_hint': hint }, typedFilterMetadata: {} };
  const messages: ProcessingRequest[] = [
    {
      request: {
        $case: 'requestHeaders',
        value: {
          headers: { headers: Object.entries(headers).map(([key, value]) => ({ key, value: '', rawValue: utf8.encode(value) })) },
          attributes: {},
          endOfStream: body === undefined,
        },
      },
      metadataContext,
      attributes: {},
      observabilityMode: false,
      protocolConfig: options.noProtocolConfig
        ? undefined
        : { requestBodyMode: mode, responseBodyMode: mode, sendBodyWithoutWaitingForHeaderResponse: false },
    },
  ];
  if (body) {
    const n = Math.max(1, options.chunks ?? 1);
    const size = Math.ceil(body.length / n);
    for (let i = 0; i < n; i++) {
      const chunk = body.subarray(i * size, Math.min(body.length, (i + 1) * size));
      messages.push(bodyMessage('requestBody', chunk, i === n - 1, metadataContext));
    }
  }
  return messages;
}

export function bodyMessage(
  kind: 'requestBody' | 'responseBody',
  chunk: Uint8Array,
  endOfStream: boolean,
  metadataContext?: ProcessingRequest['metadataContext'],
): ProcessingRequest {
  return {
    request: { $case: kind, value: { body: chunk, endOfStream, endOfStreamWithoutMessage: false, grpcMessageCompressed: false } },
    metadataContext,
    attributes: {},
    observabilityMode: false,
  } as ProcessingRequest;
}

export interface ResponseHeadersOptions {
  status?: number;
  headers?: Record<string, string>;
  /** The endpoint Envoy's override_host used, forwarded in `envoy.lb` (selected_host_key). */
  served?: string;
  /** The EPP's destination list as Envoy holds it in `envoy.lb` (received dynamic metadata). */
  destination?: string;
  /** The subset hint, forwarded on every message when its namespace is forwarded. */
  subset?: unknown;
}

/**
 * The response_headers message Envoy sends once the model server answers, with the metadata the
 * shipped config forwards (`envoy.lb`, `envoy.lb.subset_hint`).
 */
export function envoyResponseHeadersMessage(options: ResponseHeadersOptions = {}): ProcessingRequest {
  const headers = { ':status': String(options.status ?? 200), 'content-type': 'application/json', ...options.headers };
  const lb: Record<string, string> = {};
  if (options.destination !== undefined) lb['x-gateway-destination-endpoint'] = options.destination;
  if (options.served !== undefined) lb['x-gateway-destination-endpoint-served'] = options.served;
  const filterMetadata: Record<string, Record<string, unknown>> = {};
  if (Object.keys(lb).length > 0) filterMetadata['envoy.lb'] = lb;
  if (options.subset !== undefined) filterMetadata['envoy.lb.subset_hint'] = { 'x-gateway-destination-endpoint-subset': options.subset };
  return {
    request: {
      $case: 'responseHeaders',
      value: {
        headers: { headers: Object.entries(headers).map(([key, value]) => ({ key, value: '', rawValue: utf8.encode(value) })) },
        attributes: {},
        endOfStream: false,
      },
    },
    metadataContext: Object.keys(filterMetadata).length > 0 ? { filterMetadata, typedFilterMetadata: {} } : undefined,
    attributes: {},
    observabilityMode: false,
  };
}
