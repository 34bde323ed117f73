// The gRPC service definition: serialisers and a loopback round trip through grpc-js.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import * as grpc from '@grpc/grpc-js';
import type { ProcessingRequest } from '@spillway/protocol';
import {
  EXT_PROC_PATH,
  ExternalProcessorService,
  HealthService,
  ProcessingResponse,
  decodePhase,
  encodeToBuffer,
  extProcService,
  immediateResponse,
  routedResponses,
} from '@spillway/protocol';

describe('encodeToBuffer', () => {
  it('produces the same bytes as the generated encoder, message after message', () => {
    const messages = [
      ...routedResponses({ mode: 'full-duplex', destination: '10.0.0.1:80', body: new Uint8Array(70_000).fill(7) }),
      immediateResponse(503, 'none'),
      ...routedResponses({ mode: 'header-only', destination: '10.0.0.2:80' }),
    ];
    for (const message of messages) {
      const expected = ProcessingResponse.encode(message).finish();
      expect(Buffer.compare(encodeToBuffer(ProcessingResponse, message), Buffer.from(expected))).toBe(0);
    }
  });

  it('recovers after an encode that throws midway', () => {
    const bad = {
      response: { $case: 'immediateResponse', value: { status: { code: 1.5 }, body: new Uint8Array(0), details: '' } },
      requestDrain: false,
    } as unknown as ProcessingResponse;
    expect(() => encodeToBuffer(ProcessingResponse, bad)).toThrow();
    const good = immediateResponse(400, 'x');
    expect(Buffer.compare(encodeToBuffer(ProcessingResponse, good), Buffer.from(ProcessingResponse.encode(good).finish()))).toBe(0);
  });

  it('keeps the upstream method paths', () => {
    expect(extProcService.process.path).toBe(EXT_PROC_PATH);
    expect(ExternalProcessorService.process.path).toBe('/envoy.service.ext_proc.v3.ExternalProcessor/Process');
    expect(HealthService.check.path).toBe('/grpc.health.v1.Health/Check');
    expect(HealthService.watch.path).toBe('/grpc.health.v1.Health/Watch');
    expect(HealthService.watch.responseStream).toBe(true);
  });
});

describe('grpc-js loopback', () => {
  const server = new grpc.Server();
  let client: grpc.Client & { process(): grpc.ClientDuplexStream<ProcessingRequest, ProcessingResponse> };

  beforeAll(async () => {
    server.addService(extProcService, {
      process: (call: grpc.ServerDuplexStream<ProcessingRequest, ProcessingResponse>) => {
        call.on('data', (message: ProcessingRequest) => {
          const phase = decodePhase(message);
          if (phase.kind === 'requestHeaders' && phase.headers.endOfStream) {
            for (const reply of routedResponses({ mode: 'header-only', destination: '10.0.0.9:8000' })) call.write(reply);
            call.end();
          }
        });
        call.on('end', () => call.end());
      },
    });
    const port = await new Promise<number>((resolve, reject) =>
      server.bindAsync('127.0.0.1:0', grpc.ServerCredentials.createInsecure(), (error, bound) => (error ? reject(error) : resolve(bound))),
    );
    const Client = grpc.makeGenericClientConstructor(extProcService, 'ExternalProcessor');
    client = new Client(`127.0.0.1:${port}`, grpc.credentials.createInsecure()) as unknown as typeof client;
  });

  afterAll(() => {
    client.close();
    server.forceShutdown();
  });

  it('answers a header-only request over a real stream', async () => {
    const call = client.process();
    const replies: ProcessingResponse[] = [];
    const done = new Promise<void>((resolve, reject) => {
      call.on('data', (reply: ProcessingResponse) => replies.push(reply));
      call.on('end', resolve);
      call.on('error', reject);
    });
    call.write({
      request: { $case: 'requestHeaders', value: { headers: { headers: [] }, attributes: {}, endOfStream: true } },
      attributes: {},
      observabilityMode: false,
    });
    call.end();
    await done;
    expect(replies).toHaveLength(1);
    expect(replies[0]?.dynamicMetadata).toEqual({ 'envoy.lb': { 'x-gateway-destination-endpoint': '10.0.0.9:8000' } });
  });
});
