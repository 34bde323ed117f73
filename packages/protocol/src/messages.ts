// The generated ext_proc and health messages, re-exported under stable names, plus a gRPC
// service definition whose serialisers avoid the copy the generated one makes.
import type { ServiceDefinition } from '@grpc/grpc-js';
import { BinaryWriter } from '@bufbuild/protobuf/wire';
import { ProcessingRequest, ProcessingResponse } from './gen/envoy/service/ext_proc/v3/external_processor.js';
import { decodeProcessingRequest } from './decode.js';

export {
  BodyMutation,
  BodyResponse,
  CommonResponse,
  CommonResponse_ResponseStatus as ResponseStatus,
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
export { HeaderMap, HeaderValue, HeaderValueOption, Metadata } from './gen/envoy/config/core/v3/base.js';
export { HttpStatus, StatusCode } from './gen/envoy/type/v3/http_status.js';
export {
  HealthCheckRequest,
  HealthCheckResponse,
  HealthCheckResponse_ServingStatus as ServingStatus,
  HealthService,
} from './gen/grpc/health/v1/health.js';
export type { HealthServer } from './gen/grpc/health/v1/health.js';

/** Full gRPC method path; Envoy calls exactly this. */
export const EXT_PROC_PATH = '/envoy.service.ext_proc.v3.ExternalProcessor/Process';
/** Health service name Envoy's health check asks for. */
export const EXT_PROC_SERVICE_NAME = 'envoy.service.ext_proc.v3.ExternalProcessor';

// Allocating typed arrays over 64 bytes is slow in V8 (off-heap backing stores), and a fresh
// BinaryWriter allocates several while it grows, then once more in finish(). One writer is
// shared instead (encoding is synchronous, so it cannot interleave), and its bytes are copied
// into a Buffer from Node's pool. This reaches into the writer's private fields, so it checks
// their shape first and falls back to the public path if a library update changes them.
const shared = new BinaryWriter();
const internals = shared as unknown as { buffer?: unknown; pos?: unknown; stackPos?: unknown };
const canReuse = internals.buffer instanceof Uint8Array && typeof internals.pos === 'number' && Array.isArray(internals.stackPos);

/** Any generated message's encoder. */
export interface Encoder<T> {
  encode(message: T, writer?: BinaryWriter): BinaryWriter;
}

/** Encodes a message into a Buffer suitable for grpc-js, with as few allocations as possible. */
export function encodeToBuffer<T>(fns: Encoder<T>, message: T): Buffer {
  if (!canReuse) {
    const bytes = fns.encode(message).finish();
    return Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  }
  const writer = internals as { buffer: Uint8Array; pos: number; stackPos: number[] };
  try {
    fns.encode(message, shared);
    const out = Buffer.allocUnsafe(writer.pos);
    out.set(writer.buffer.subarray(0, writer.pos));
    return out;
  } finally {
    writer.pos = 0;
    writer.stackPos.length = 0;
  }
}

/**
 * `ExternalProcessor` for `server.addService(extProcService, { process })`. Same path and
 * messages as the generated `ExternalProcessorService`, with the cheaper encoder above and the
 * cheaper request decoder of decode.ts (same result as the generated one).
 * Decoded `bytes` fields are views into the received frame (no copy either).
 */
export const extProcService = {
  process: {
    path: EXT_PROC_PATH,
    requestStream: true,
    responseStream: true,
    requestSerialize: (value: ProcessingRequest): Buffer => encodeToBuffer(ProcessingRequest, value),
    requestDeserialize: (value: Buffer): ProcessingRequest => decodeProcessingRequest(value),
    responseSerialize: (value: ProcessingResponse): Buffer => encodeToBuffer(ProcessingResponse, value),
    responseDeserialize: (value: Buffer): ProcessingResponse => ProcessingResponse.decode(value),
  },
} as const satisfies ServiceDefinition;
