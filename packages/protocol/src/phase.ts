// One ProcessingRequest -> which phase of the HTTP exchange it carries, as a typed value.
import { readRequestHeaders, readResponseHeaders } from './headers.js';
import type { RequestHeaders, ResponseHeaders } from './headers.js';
import type { ProcessingRequest, ProtocolConfiguration } from './gen/envoy/service/ext_proc/v3/external_processor.js';
import { ProcessingMode_BodySendMode as BodySendMode } from './gen/envoy/extensions/filters/http/ext_proc/v3/processing_mode.js';

export type Phase =
  | { readonly kind: 'requestHeaders'; readonly headers: RequestHeaders }
  | { readonly kind: 'requestBody'; readonly chunk: Uint8Array; readonly endOfStream: boolean }
  | { readonly kind: 'requestTrailers' }
  | { readonly kind: 'responseHeaders'; readonly headers: ResponseHeaders }
  | { readonly kind: 'responseBody'; readonly chunk: Uint8Array; readonly endOfStream: boolean }
  | { readonly kind: 'responseTrailers' }
  /** No phase set: a malformed message; the stream should be failed. */
  | { readonly kind: 'empty' };

const REQUEST_TRAILERS: Phase = Object.freeze({ kind: 'requestTrailers' });
const RESPONSE_TRAILERS: Phase = Object.freeze({ kind: 'responseTrailers' });
const EMPTY: Phase = Object.freeze({ kind: 'empty' });

export function decodePhase(message: ProcessingRequest): Phase {
  const request = message.request;
  switch (request?.$case) {
    case 'requestHeaders':
      return { kind: 'requestHeaders', headers: readRequestHeaders(request.value) };
    case 'requestBody':
      return { kind: 'requestBody', chunk: request.value.body, endOfStream: request.value.endOfStream };
    case 'requestTrailers':
      return REQUEST_TRAILERS;
    case 'responseHeaders':
      return { kind: 'responseHeaders', headers: readResponseHeaders(request.value) };
    case 'responseBody':
      return { kind: 'responseBody', chunk: request.value.body, endOfStream: request.value.endOfStream };
    case 'responseTrailers':
      return RESPONSE_TRAILERS;
    default:
      return EMPTY;
  }
}

/**
 * How Envoy sends a body. The EPP supports 'full-duplex' (the protocol's MUST) and 'buffered';
 * 'none' means the body never reaches the EPP. The rest are named so the service can refuse them.
 */
export type BodyMode = 'full-duplex' | 'buffered' | 'buffered-partial' | 'streamed' | 'none' | 'grpc' | 'unknown';

export interface BodyModes {
  readonly request: BodyMode;
  readonly response: BodyMode;
}

/** What to assume when Envoy (before 1.34) sends no protocol_config: its reference configuration. */
export const DEFAULT_BODY_MODES: BodyModes = Object.freeze({ request: 'full-duplex', response: 'full-duplex' });

export function bodyModeOf(mode: BodySendMode): BodyMode {
  switch (mode) {
    case BodySendMode.FULL_DUPLEX_STREAMED:
      return 'full-duplex';
    case BodySendMode.BUFFERED:
      return 'buffered';
    case BodySendMode.BUFFERED_PARTIAL:
      return 'buffered-partial';
    case BodySendMode.STREAMED:
      return 'streamed';
    case BodySendMode.NONE:
      return 'none';
    case BodySendMode.GRPC:
      return 'grpc';
    default:
      return 'unknown';
  }
}

/** Body modes from the first message's protocol_config, or `fallback` when Envoy sent none. */
export function readBodyModes(config: ProtocolConfiguration | undefined, fallback: BodyModes = DEFAULT_BODY_MODES): BodyModes {
  if (config === undefined) return fallback;
  return { request: bodyModeOf(config.requestBodyMode), response: bodyModeOf(config.responseBodyMode) };
}
