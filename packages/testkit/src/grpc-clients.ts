import {
  makeGenericClientConstructor,
  type CallOptions,
  type ChannelCredentials,
  type Client,
  type ClientDuplexStream,
  type ClientOptions,
  type Metadata,
  type ServiceError,
} from '@grpc/grpc-js';
import {
  ExternalProcessorService,
  HealthService,
  type HealthCheckRequest,
  type HealthCheckResponse,
  type ProcessingRequest,
  type ProcessingResponse,
} from '@spillway/protocol';

/**
 * gRPC clients of the EPP's two services, made with grpc-js from @spillway/protocol's service
 * definitions (the pure protocol package builds no client). Tests use them as a gateway and a
 * kubelet would: real HTTP/2 over a socket.
 */
export interface ExternalProcessorClient extends Client {
  process(options?: Partial<CallOptions>): ClientDuplexStream<ProcessingRequest, ProcessingResponse>;
  process(metadata: Metadata, options?: Partial<CallOptions>): ClientDuplexStream<ProcessingRequest, ProcessingResponse>;
}

export const ExternalProcessorClient = makeGenericClientConstructor(
  ExternalProcessorService,
  'envoy.service.ext_proc.v3.ExternalProcessor',
) as unknown as new (address: string, credentials: ChannelCredentials, options?: Partial<ClientOptions>) => ExternalProcessorClient;

export interface HealthClient extends Client {
  check(request: HealthCheckRequest, callback: (error: ServiceError | null, response: HealthCheckResponse) => void): void;
}

export const HealthClient = makeGenericClientConstructor(HealthService, 'grpc.health.v1.Health') as unknown as new (
  address: string,
  credentials: ChannelCredentials,
  options?: Partial<ClientOptions>,
) => HealthClient;
