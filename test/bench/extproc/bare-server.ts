/**
 * The ext_proc bench's baseline (the transport's limit): a bare grpc-js ext_proc server with the
 * EPP's service definition and server options that answers every request with a fixed destination
 * and does nothing else: the minimum valid exchange. It buffers the request body until end_of_stream,
 * then writes what the EPP writes for a full-duplex request (one headers response with the
 * destination, the body echoed as streamed_response), answers response_headers with a plain continue,
 * echoes each response body chunk (as streamed_response when the response body mode is
 * FULL_DUPLEX_STREAMED), and ends the stream when the client half-closes. What it reaches is the transport's own limit on
 * this machine.
 *
 *   node --conditions=@spillway/source --import tsx test/bench/extproc/bare-server.ts [PORT]
 *
 * Prints the bound port on stdout as one line of JSON: {"port":N}.
 */
import { Server, ServerCredentials, type ServerDuplexStream } from '@grpc/grpc-js';
import {
  BodySendMode,
  extProcService,
  responseBodyResponse,
  responseHeadersResponse,
  routedResponses,
  type ProcessingRequest,
  type ProcessingResponse,
} from '@spillway/protocol';

const DESTINATION = '10.0.0.1:8000';

function process_(call: ServerDuplexStream<ProcessingRequest, ProcessingResponse>): void {
  const chunks: Uint8Array[] = [];
  let answered = false;
  let responseFullDuplex = false;
  call.on('data', (message: ProcessingRequest) => {
    const request = message.request;
    if (message.protocolConfig !== undefined)
      responseFullDuplex = message.protocolConfig.responseBodyMode === BodySendMode.FULL_DUPLEX_STREAMED;
    if (answered) {
      if (request?.$case === 'responseHeaders') call.write(responseHeadersResponse());
      else if (request?.$case === 'responseBody')
        call.write(responseBodyResponse(request.value.body, request.value.endOfStream, responseFullDuplex));
      return;
    }
    if (request?.$case === 'requestHeaders' && !request.value.endOfStream) return;
    if (request?.$case === 'requestBody') {
      chunks.push(request.value.body);
      if (!request.value.endOfStream) return;
    }
    answered = true;
    const body = chunks.length === 1 ? (chunks[0] as Uint8Array) : Buffer.concat(chunks);
    const mode = request?.$case === 'requestHeaders' ? 'header-only' : 'full-duplex';
    for (const response of routedResponses({ mode, destination: DESTINATION, body })) call.write(response);
  });
  call.on('end', () => call.end());
  call.on('error', () => undefined);
}

// The same options as spillway-epp's ext_proc server (services/epp/src/app/grpc.ts newGrpcServer).
const server = new Server({
  'grpc.max_concurrent_streams': 10_000,
  'grpc.keepalive_permit_without_calls': 1,
  'grpc.http2.min_ping_interval_without_data_ms': 5_000,
});
server.addService(extProcService, { process: process_ });
const wanted = Number(process.argv[2] ?? 0);
server.bindAsync(`127.0.0.1:${wanted}`, ServerCredentials.createInsecure(), (error, port) => {
  if (error) {
    console.error(`bare ext_proc server: cannot listen: ${error.message}`);
    process.exit(1);
  }
  process.stdout.write(`${JSON.stringify({ port })}\n`);
});
const stop = (): void => server.tryShutdown(() => process.exit(0));
process.once('SIGTERM', stop);
process.once('SIGINT', stop);
