// Typed views of the header messages. Only the headers the EPP acts on are decoded.
import { DESTINATION_HEADER_PREFIX, FAIRNESS_ID_HEADER, MODEL_REWRITE_HEADER, OBJECTIVE_HEADER } from './constants.js';
import type { HttpHeaders } from './gen/envoy/service/ext_proc/v3/external_processor.js';
import type { HeaderValue } from './gen/envoy/config/core/v3/base.js';

const utf8 = new TextDecoder();
const NONE: readonly string[] = Object.freeze([]);
const NONE_HEADERS: readonly HeaderValue[] = Object.freeze([]);

/** Envoy sends values in raw_value; older ones (and some gateways) use value. */
export function headerValue(header: HeaderValue): string {
  return header.rawValue.length > 0 ? utf8.decode(header.rawValue) : header.value;
}

export interface RequestHeaders {
  readonly path: string | undefined;
  readonly method: string | undefined;
  readonly contentType: string | undefined;
  readonly contentLength: number | undefined;
  /** `x-gateway-inference-objective`; undefined when absent or empty (priority 0). */
  readonly objective: string | undefined;
  /** `x-gateway-model-name-rewrite`; overrides configured rewrites. */
  readonly modelRewrite: string | undefined;
  readonly requestId: string | undefined;
  /** `x-gateway-inference-fairness-id`: flow control's fairness flow; undefined when absent or empty (the default flow). */
  readonly fairnessId: string | undefined;
  /** True for a header-only request (no body follows). */
  readonly endOfStream: boolean;
  /**
   * Client-supplied `x-gateway-destination-endpoint*` header names (lower-case). They never
   * influence the pick and must be removed from the forwarded request (`remove_headers`).
   */
  readonly destinationHeaders: readonly string[];
}

export interface ResponseHeaders {
  /** `:status` of the model server's response. */
  readonly status: number | undefined;
  readonly contentType: string | undefined;
  readonly endOfStream: boolean;
}

function nonEmpty(value: string): string | undefined {
  return value === '' ? undefined : value;
}

export function readRequestHeaders(message: HttpHeaders): RequestHeaders {
  let path: string | undefined;
  let method: string | undefined;
  let contentType: string | undefined;
  let contentLength: number | undefined;
  let objective: string | undefined;
  let modelRewrite: string | undefined;
  let requestId: string | undefined;
  let fairnessId: string | undefined;
  let destinationHeaders: string[] | undefined;
  for (const header of message.headers?.headers ?? NONE_HEADERS) {
    // Envoy lower-cases keys; other ext_proc clients may not.
    const key = header.key.toLowerCase();
    switch (key) {
      case ':path':
        path = headerValue(header);
        break;
      case ':method':
        method = headerValue(header);
        break;
      case 'content-type':
        contentType = headerValue(header);
        break;
      case 'content-length': {
        const length = Number(headerValue(header));
        contentLength = Number.isSafeInteger(length) && length >= 0 ? length : undefined;
        break;
      }
      case OBJECTIVE_HEADER:
        objective = nonEmpty(headerValue(header).trim());
        break;
      case MODEL_REWRITE_HEADER:
        modelRewrite = nonEmpty(headerValue(header).trim());
        break;
      case 'x-request-id':
        requestId = nonEmpty(headerValue(header));
        break;
      case FAIRNESS_ID_HEADER:
        fairnessId = nonEmpty(headerValue(header).trim());
        break;
      default:
        if (key.startsWith(DESTINATION_HEADER_PREFIX) && !destinationHeaders?.includes(key)) {
          (destinationHeaders ??= []).push(key);
        }
    }
  }
  return {
    path,
    method,
    contentType,
    contentLength,
    objective,
    modelRewrite,
    requestId,
    fairnessId,
    endOfStream: message.endOfStream,
    destinationHeaders: destinationHeaders ?? NONE,
  };
}

export function readResponseHeaders(message: HttpHeaders): ResponseHeaders {
  let status: number | undefined;
  let contentType: string | undefined;
  for (const header of message.headers?.headers ?? NONE_HEADERS) {
    const key = header.key.toLowerCase();
    if (key === ':status') {
      const code = Number(headerValue(header));
      status = Number.isInteger(code) ? code : undefined;
    } else if (key === 'content-type') {
      contentType = headerValue(header);
    }
  }
  return { status, contentType, endOfStream: message.endOfStream };
}
