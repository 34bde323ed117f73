// Errors as one ImmediateResponse with an OpenAI-shaped JSON body (docs/protocol.md, "Errors").
import type { ProcessingResponse } from './gen/envoy/service/ext_proc/v3/external_processor.js';
import { setHeader } from './responses.js';

/** The statuses the EPP answers with itself. */
export type ErrorStatus = 400 | 404 | 413 | 429 | 500 | 503;

// OpenAI error `type` per status, so clients' existing error handling applies.
const ERROR_TYPE: Readonly<Record<ErrorStatus, string>> = {
  400: 'invalid_request_error',
  404: 'not_found_error',
  413: 'invalid_request_error',
  429: 'rate_limit_error',
  500: 'server_error',
  503: 'service_unavailable_error',
};

const DEFAULT_CODE: Readonly<Record<ErrorStatus, string>> = {
  400: 'bad_request',
  404: 'not_found',
  413: 'request_too_large',
  429: 'system_saturated',
  500: 'internal_error',
  503: 'no_endpoint_available',
};

export interface ErrorDetails {
  /** Machine-readable `error.code`; defaults per status. */
  readonly code?: string | undefined;
  /** Overrides the OpenAI `error.type` derived from the status. */
  readonly type?: string | undefined;
}

/** The JSON body: `{"error":{"message","type","code"}}`. */
export function errorBody(status: ErrorStatus, message: string, details: ErrorDetails = {}): string {
  return JSON.stringify({
    error: { message, type: details.type ?? ERROR_TYPE[status], code: details.code ?? DEFAULT_CODE[status] },
  });
}

export function immediateResponse(status: ErrorStatus, message: string, details: ErrorDetails = {}): ProcessingResponse {
  return {
    response: {
      $case: 'immediateResponse',
      value: {
        status: { code: status },
        headers: { setHeaders: [setHeader('content-type', 'application/json')], removeHeaders: [] },
        body: Buffer.from(errorBody(status, message, details), 'utf8'),
        details: '',
      },
    },
    requestDrain: false,
  };
}
