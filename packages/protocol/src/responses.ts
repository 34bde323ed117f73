// ProcessingResponse builders for every reply the EPP sends (docs/protocol.md).
import { BODY_CHUNK_BYTES, DESTINATION_KEY, LB_NAMESPACE } from './constants.js';
import {
  CommonResponse_ResponseStatus as ResponseStatus,
  type CommonResponse,
  type HeaderMutation,
  type ProcessingResponse,
} from './gen/envoy/service/ext_proc/v3/external_processor.js';
import { HeaderValueOption_HeaderAppendAction as AppendAction } from './gen/envoy/config/core/v3/base.js';
import type { HeaderValueOption } from './gen/envoy/config/core/v3/base.js';

const EMPTY_BYTES = new Uint8Array(0);

/**
 * One header to set. The value goes in raw_value only: Envoy reads nothing else, and a
 * HeaderValue with both fields set fails the request. `append` stays unset, which Envoy's
 * ext_proc treats as overwrite.
 */
export function setHeader(key: string, value: string): HeaderValueOption {
  return {
    // Buffer.from draws short strings from Node's pool: far cheaper than TextEncoder here.
    header: { key, value: '', rawValue: Buffer.from(value, 'utf8') },
    appendAction: AppendAction.APPEND_IF_EXISTS_OR_ADD,
    keepEmptyValue: false,
  };
}

function common(headerMutation: HeaderMutation | undefined, clearRouteCache: boolean): CommonResponse {
  return { status: ResponseStatus.CONTINUE, headerMutation, clearRouteCache };
}

// Plain continues carry nothing per request, so one frozen instance of each is shared.
function frozen(response: ProcessingResponse): ProcessingResponse {
  return Object.freeze(response);
}
function frozenContinue(kind: 'requestHeaders' | 'responseHeaders' | 'responseBody'): ProcessingResponse {
  return frozen({ response: { $case: kind, value: { response: common(undefined, false) } }, requestDrain: false });
}
const CONTINUE_REQUEST_HEADERS = frozenContinue('requestHeaders');
const CONTINUE_RESPONSE_HEADERS = frozenContinue('responseHeaders');
const CONTINUE_RESPONSE_BODY = frozenContinue('responseBody');
const REQUEST_TRAILERS_RESPONSE = frozen({ response: { $case: 'requestTrailers', value: {} }, requestDrain: false });
const RESPONSE_TRAILERS_RESPONSE = frozen({ response: { $case: 'responseTrailers', value: {} }, requestDrain: false });

/** What to change on the forwarded request. */
export interface RequestMutation {
  /** Rendered destination list; sets the header, the `envoy.lb` metadata and clear_route_cache. */
  readonly destination?: string | undefined;
  /** Sets `content-length` (the body was rewritten, or Envoy may keep it; see routedResponses). */
  readonly contentLength?: number | undefined;
  /** Header names to remove, e.g. RequestHeaders.destinationHeaders. */
  readonly removeHeaders?: readonly string[] | undefined;
}

function headerMutation(mutation: RequestMutation): HeaderMutation | undefined {
  const setHeaders: HeaderValueOption[] = [];
  if (mutation.destination !== undefined) setHeaders.push(setHeader(DESTINATION_KEY, mutation.destination));
  if (mutation.contentLength !== undefined) setHeaders.push(setHeader('content-length', String(mutation.contentLength)));
  let removeHeaders: string[] = [];
  if (mutation.removeHeaders !== undefined && mutation.removeHeaders.length > 0) {
    // The header we set overwrites a client's copy; removing it in the same mutation would
    // depend on the order in which Envoy applies the two lists.
    removeHeaders =
      mutation.destination === undefined ? [...mutation.removeHeaders] : mutation.removeHeaders.filter((name) => name !== DESTINATION_KEY);
  }
  return setHeaders.length === 0 && removeHeaders.length === 0 ? undefined : { setHeaders, removeHeaders };
}

function destinationMetadata(destination: string | undefined): { [key: string]: unknown } | undefined {
  return destination === undefined ? undefined : { [LB_NAMESPACE]: { [DESTINATION_KEY]: destination } };
}

/**
 * The reply to request headers. With a destination it is the routing decision (full duplex,
 * header-only requests); without one it is the immediate continue BUFFERED mode needs.
 */
export function requestHeadersResponse(mutation: RequestMutation = {}): ProcessingResponse {
  const changes = headerMutation(mutation);
  if (changes === undefined) return CONTINUE_REQUEST_HEADERS;
  return {
    response: { $case: 'requestHeaders', value: { response: common(changes, mutation.destination !== undefined) } },
    dynamicMetadata: destinationMetadata(mutation.destination),
    requestDrain: false,
  };
}

/**
 * The BUFFERED-mode reply to the complete request body: a plain body response (never
 * streamed_response) carrying the routing decision; `body` replaces the body when given.
 */
export function bufferedRequestBodyResponse(mutation: RequestMutation, body?: Uint8Array): ProcessingResponse {
  const changes = headerMutation(mutation);
  const response = common(changes, mutation.destination !== undefined);
  if (body !== undefined) response.bodyMutation = { mutation: { $case: 'body', value: body } };
  return {
    response: { $case: 'requestBody', value: { response } },
    dynamicMetadata: destinationMetadata(mutation.destination),
    requestDrain: false,
  };
}

/**
 * A body as FULL_DUPLEX_STREAMED replies: streamed_response chunks of at most 62,000 bytes,
 * end_of_stream on the last one only when `endOfStream` (false when trailers follow). An
 * empty body still yields one (empty) chunk, which Envoy needs to finish the body.
 * Chunks are views into `body`; nothing is copied until encoding.
 */
export function streamedBodyResponses(
  direction: 'request' | 'response',
  body: Uint8Array,
  endOfStream = true,
  chunkBytes = BODY_CHUNK_BYTES,
): ProcessingResponse[] {
  const kind = direction === 'request' ? 'requestBody' : 'responseBody';
  const responses: ProcessingResponse[] = [];
  let offset = 0;
  do {
    const end = Math.min(offset + chunkBytes, body.length);
    responses.push(streamedChunk(kind, body.subarray(offset, end), endOfStream && end === body.length));
    offset = end;
  } while (offset < body.length);
  return responses;
}

function streamedChunk(kind: 'requestBody' | 'responseBody', body: Uint8Array, endOfStream: boolean): ProcessingResponse {
  const response = common(undefined, false);
  response.bodyMutation = {
    mutation: {
      $case: 'streamedResponse',
      value: { body, endOfStream, endOfStreamWithoutMessage: false, grpcMessageCompressed: false },
    },
  };
  return { response: { $case: kind, value: { response } }, requestDrain: false };
}

/** How the request reached the EPP, which decides the shape of the routed reply. */
export type RoutedMode = 'full-duplex' | 'buffered' | 'header-only';

export interface RoutedRequest {
  readonly mode: RoutedMode;
  /** Rendered destination list (renderDestination). */
  readonly destination: string;
  /** The body to forward (after any model rewrite). Ignored for header-only requests. */
  readonly body?: Uint8Array | undefined;
  /** The body differs from what the client sent. */
  readonly bodyChanged?: boolean | undefined;
  /** Header names to remove, e.g. RequestHeaders.destinationHeaders. */
  readonly removeHeaders?: readonly string[] | undefined;
  /** Full duplex only: the request ended with trailers, so answer them and keep EoS off the body. */
  readonly endedWithTrailers?: boolean | undefined;
}

/**
 * Every reply for a request the scheduler routed, in the order they must be written.
 * - full-duplex: headers response with the decision, then the body as streamed_response
 *   chunks (then an empty trailers response if the request had trailers). content-length is
 *   set to the forwarded length: Envoy drops it in this mode unless allow_content_length_header
 *   is configured (v1.38+), in which case it is what the upstream needs.
 * - buffered: one plain body response with the decision; content-length only when the body changed.
 *   (The headers were already answered with requestHeadersResponse({ removeHeaders }).)
 * - header-only: the headers response with the decision, nothing else.
 */
export function routedResponses(request: RoutedRequest): ProcessingResponse[] {
  const body = request.body ?? EMPTY_BYTES;
  const changed = request.bodyChanged === true;
  switch (request.mode) {
    case 'header-only':
      return [requestHeadersResponse({ destination: request.destination, removeHeaders: request.removeHeaders })];
    case 'buffered':
      return [
        bufferedRequestBodyResponse(
          {
            destination: request.destination,
            contentLength: changed ? body.length : undefined,
            removeHeaders: request.removeHeaders,
          },
          changed ? body : undefined,
        ),
      ];
    case 'full-duplex': {
      const trailers = request.endedWithTrailers === true;
      const responses = [
        requestHeadersResponse({
          destination: request.destination,
          contentLength: body.length > 0 ? body.length : undefined,
          removeHeaders: request.removeHeaders,
        }),
      ];
      for (const chunk of streamedBodyResponses('request', body, !trailers)) responses.push(chunk);
      if (trailers) responses.push(REQUEST_TRAILERS_RESPONSE);
      return responses;
    }
  }
}

/** Reply to response headers: pass through unchanged. */
export function responseHeadersResponse(): ProcessingResponse {
  return CONTINUE_RESPONSE_HEADERS;
}

/**
 * Reply to a response body message. In full duplex Envoy has drained the chunk, so it is echoed
 * as streamed_response; in the other modes a plain continue leaves it untouched.
 */
export function responseBodyResponse(chunk: Uint8Array, endOfStream: boolean, fullDuplex: boolean): ProcessingResponse {
  return fullDuplex ? streamedChunk('responseBody', chunk, endOfStream) : CONTINUE_RESPONSE_BODY;
}

export function requestTrailersResponse(): ProcessingResponse {
  return REQUEST_TRAILERS_RESPONSE;
}

export function responseTrailersResponse(): ProcessingResponse {
  return RESPONSE_TRAILERS_RESPONSE;
}
