// The generated ext_proc and health messages, re-exported under stable names, plus a gRPC
// service definition whose serialisers avoid the copy the generated one makes.
import type { ServiceDefinition } from '@grpc/grpc-js';
import { ProcessingRequest, ProcessingResponse } from './gen/envoy/service/ext_proc/v3/external_processor.js';

export {
  BodyMutation,
  BodyResponse,
  CommonResponse,
  CommonResponse_ResponseStatus as ResponseStatus,
  ExternalProcessorClient,
  ExternalProcessorService,
  HeaderMutation,
  HeadersResponse,
  HttpBody,
  HttpHeaders,
  HttpTrailers,
  ImmediateResponse,
  ProcessingRequest,
  ProcessingResponse,
  ProtocolConfiguration,
  StreamedBodyResponse,
  TrailersResponse,
} from './gen/envoy/service/ext_proc/v3/external_processor.js';
export type { ExternalProcessorServer } from './gen/envoy/service/ext_proc/v3/external_processor.js';
export {
  ProcessingMode,
  ProcessingMode_BodySendMode as BodySendMode,
  ProcessingMode_HeaderSendMode as HeaderSendMode,
} from './gen/envoy/extensions/filters/http/ext_proc/v3/processing_mode.js';
export {
  HeaderMap,
  HeaderValue,
  HeaderValueOption,
  Metadata,
} from './gen/envoy/config/core/v3/base.js';
export { HttpStatus, StatusCode } from './gen/envoy/type/v3/http_status.js';
export {
  HealthCheckRequest,
  HealthCheckResponse,
  HealthCheckResponse_ServingStatus as ServingStatus,
  HealthClient,
  HealthService,
} from './gen/grpc/health/v1/health.js';
export type { HealthServer } from './gen/grpc/health/v1/health.js';

/** Full gRPC method path; Envoy calls exactly this. */
export const EXT_PROC_PATH = '/envoy.service.ext_proc.v3.ExternalProcessor/Process';
/** Health service name Envoy's health check asks for. */
export const EXT_PROC_SERVICE_NAME = 'envoy.service.ext_proc.v3.ExternalProcessor';

// BinaryWriter.finish() returns a fresh array, so wrapping it is safe and saves a copy per message.
function asBuffer(bytes: Uint8Array): Buffer {
  return Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
}

/**
 * `ExternalProcessor` for `server.addService(extProcService, { process })`. Same path and
 * messages as the generated `ExternalProcessorService`, without its per-message copy.
 * Decoded `bytes` fields are views into the received frame (no copy either).
 */
export const extProcService = {
  process: {
    path: EXT_PROC_PATH,
    requestStream: true,
    responseStream: true,
    requestSerialize: (value: ProcessingRequest): Buffer => asBuffer(ProcessingRequest.encode(value).finish()),
    requestDeserialize: (value: Buffer): ProcessingRequest => ProcessingRequest.decode(value),
    responseSerialize: (value: ProcessingResponse): Buffer => asBuffer(ProcessingResponse.encode(value).finish()),
    responseDeserialize: (value: Buffer): ProcessingResponse => ProcessingResponse.decode(value),
  },
} as const satisfies ServiceDefinition;
