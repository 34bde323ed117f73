// Wire compatibility with Envoy's own ext_proc definitions, in both directions.
import { beforeAll, describe, expect, it } from 'vitest';

import protobuf from 'protobufjs';
import {
  BodySendMode,
  ProcessingRequest,
  ProcessingResponse,
  StatusCode,
  decodePhase,
  immediateResponse,
  readBodyModes,
  readServedEndpoint,
  readSubsetHint,
  responseBodyResponse,
  routedResponses,
} from '@spillway/protocol';
import { loadUpstream } from './upstream.js';

type Obj = Record<string, unknown>;

let root: protobuf.Root;
let UpRequest: protobuf.Type;
let UpResponse: protobuf.Type;

beforeAll(() => {
  root = loadUpstream();
  UpRequest = root.lookupType('envoy.service.ext_proc.v3.ProcessingRequest');
  UpResponse = root.lookupType('envoy.service.ext_proc.v3.ProcessingResponse');
});

const bytes = (text: string): Uint8Array => new TextEncoder().encode(text);
const text = (data: unknown): string => new TextDecoder().decode(data as Uint8Array);

/** google.protobuf.Value in message form, as Envoy would build it. */
function value(v: unknown): Obj {
  if (typeof v === 'string') return { stringValue: v };
  if (typeof v === 'number') return { numberValue: v };
  if (typeof v === 'boolean') return { boolValue: v };
  if (Array.isArray(v)) return { listValue: { values: v.map(value) } };
  if (v === null) return { nullValue: 0 };
  return { structValue: struct(v as Obj) };
}
function struct(o: Obj): Obj {
  return { fields: Object.fromEntries(Object.entries(o).map(([k, v]) => [k, value(v)])) };
}

function upstreamEncode(message: Obj): Uint8Array {
  const error = UpRequest.verify(message);
  if (error !== null) throw new Error(error);
  return UpRequest.encode(UpRequest.fromObject(message)).finish();
}

function upstreamDecodeResponse(response: ProcessingResponse): Obj {
  const decoded = UpResponse.decode(ProcessingResponse.encode(response).finish());
  return decoded as unknown as Obj;
}

function path(o: unknown, ...keys: string[]): unknown {
  let current = o;
  for (const key of keys) current = (current as Obj | undefined)?.[key];
  return current;
}

describe('upstream ProcessingRequest -> ours', () => {
  it('decodes request headers, metadata and protocol_config', () => {
    const wire = upstreamEncode({
      request_headers: {
        headers: {
          headers: [
            { key: ':path', raw_value: bytes('/v1/chat/completions') },
            { key: ':method', raw_value: bytes('POST') },
            { key: 'content-type', raw_value: bytes('application/json') },
            { key: 'x-gateway-inference-objective', raw_value: bytes('batch') },
            { key: 'x-gateway-destination-endpoint', raw_value: bytes('6.6.6.6:1') },
            { key: 'x-legacy', value: 'plain' },
          ],
        },
        end_of_stream: false,
      },
      metadata_context: {
        filter_metadata: {
          'envoy.lb.subset_hint': struct({ 'x-gateway-destination-endpoint-subset': ['10.0.0.1:8000', '[fd00::1]:8000', 'bogus'] }),
        },
      },
      attributes: { 'envoy.filters.http.ext_proc': struct({ 'request.path': '/v1/chat/completions' }) },
      protocol_config: { request_body_mode: 4, response_body_mode: 2, send_body_without_waiting_for_header_response: true },
    });

    const ours = ProcessingRequest.decode(wire);
    const phase = decodePhase(ours);
    expect(phase.kind).toBe('requestHeaders');
    if (phase.kind !== 'requestHeaders') return;
    expect(phase.headers).toMatchObject({
      path: '/v1/chat/completions',
      method: 'POST',
      contentType: 'application/json',
      objective: 'batch',
      endOfStream: false,
      destinationHeaders: ['x-gateway-destination-endpoint'],
    });
    expect(ours.request?.$case === 'requestHeaders' && ours.request.value.headers?.headers[5]?.value).toBe('plain');
    expect(ours.protocolConfig).toEqual({
      requestBodyMode: BodySendMode.FULL_DUPLEX_STREAMED,
      responseBodyMode: BodySendMode.BUFFERED,
      sendBodyWithoutWaitingForHeaderResponse: true,
    });
    expect(readBodyModes(ours.protocolConfig)).toEqual({ request: 'full-duplex', response: 'buffered' });
    expect(ours.attributes['envoy.filters.http.ext_proc']).toEqual({ 'request.path': '/v1/chat/completions' });
    expect(readSubsetHint(ours.metadataContext)).toEqual(['10.0.0.1:8000', '[fd00::1]:8000', 'bogus']);
  });

  it('decodes body chunks, trailers and the served endpoint on responses', () => {
    const body = ProcessingRequest.decode(upstreamEncode({ request_body: { body: bytes('{"model":"m"}'), end_of_stream: true } }));
    const bodyPhase = decodePhase(body);
    expect(bodyPhase).toMatchObject({ kind: 'requestBody', endOfStream: true });
    expect(bodyPhase.kind === 'requestBody' && text(bodyPhase.chunk)).toBe('{"model":"m"}');

    expect(decodePhase(ProcessingRequest.decode(upstreamEncode({ request_trailers: { trailers: { headers: [] } } })))).toEqual({
      kind: 'requestTrailers',
    });

    const response = ProcessingRequest.decode(
      upstreamEncode({
        response_headers: { headers: { headers: [{ key: ':status', raw_value: bytes('200') }] }, end_of_stream: false },
        metadata_context: { filter_metadata: { 'envoy.lb': struct({ 'x-gateway-destination-endpoint-served': '10.0.0.2:8000' }) } },
      }),
    );
    expect(decodePhase(response)).toMatchObject({ kind: 'responseHeaders', headers: { status: 200 } });
    expect(readServedEndpoint(response.metadataContext)).toBe('10.0.0.2:8000');

    const chunk = ProcessingRequest.decode(upstreamEncode({ response_body: { body: bytes('data: x\n\n'), end_of_stream: false } }));
    const chunkPhase = decodePhase(chunk);
    expect(chunkPhase).toMatchObject({ kind: 'responseBody', endOfStream: false });
    expect(chunkPhase.kind === 'responseBody' && text(chunkPhase.chunk)).toBe('data: x\n\n');
  });

  it('skips fields it does not know, such as the newer flow_control_init = 12', () => {
    const local = loadUpstream();
    const Request = local.lookupType('envoy.service.ext_proc.v3.ProcessingRequest');
    Request.add(new protobuf.Field('flow_control_init', 12, 'bytes'));
    local.resolveAll();
    const wire = Request.encode(
      Request.fromObject({ flow_control_init: bytes('window'), request_body: { body: bytes('x') }, observability_mode: true }),
    ).finish();
    const ours = ProcessingRequest.decode(wire);
    expect(ours.observabilityMode).toBe(true);
    expect(decodePhase(ours)).toMatchObject({ kind: 'requestBody', endOfStream: false });
  });
});

describe('ours -> upstream', () => {
  it('encodes the full-duplex routing decision as Envoy expects it', () => {
    const replies = routedResponses({
      mode: 'full-duplex',
      destination: '10.0.0.1:8000,10.0.0.2:8000',
      body: bytes('{"model":"m"}'),
      removeHeaders: ['x-gateway-destination-endpoint-subset'],
    }).map(upstreamDecodeResponse);
    expect(replies).toHaveLength(2);

    const [headers, body] = replies;
    const common = path(headers, 'request_headers', 'response') as Obj;
    expect(common['clear_route_cache']).toBe(true);
    const set = path(common, 'header_mutation', 'set_headers') as Obj[];
    const destination = set[0]?.['header'] as Obj;
    expect(destination['key']).toBe('x-gateway-destination-endpoint');
    expect(text(destination['raw_value'])).toBe('10.0.0.1:8000,10.0.0.2:8000');
    // raw_value only: `value` is not on the wire at all (protobufjs leaves absent fields on the prototype).
    expect(Object.hasOwn(destination, 'value')).toBe(false);
    expect(Object.hasOwn(set[0] as Obj, 'append')).toBe(false);
    expect(path(common, 'header_mutation', 'remove_headers')).toEqual(['x-gateway-destination-endpoint-subset']);
    expect(
      path(headers, 'dynamic_metadata', 'fields', 'envoy.lb', 'structValue', 'fields', 'x-gateway-destination-endpoint', 'stringValue'),
    ).toBe('10.0.0.1:8000,10.0.0.2:8000');

    const streamed = path(body, 'request_body', 'response', 'body_mutation', 'streamed_response') as Obj;
    expect(text(streamed['body'])).toBe('{"model":"m"}');
    expect(streamed['end_of_stream']).toBe(true);
  });

  it('encodes the buffered reply as a plain body mutation', () => {
    const [reply] = routedResponses({
      mode: 'buffered',
      destination: '10.0.0.1:8000',
      body: bytes('{"model":"n"}'),
      bodyChanged: true,
    }).map(upstreamDecodeResponse);
    const mutation = path(reply, 'request_body', 'response', 'body_mutation') as protobuf.Message & Obj;
    expect(text(mutation['body'])).toBe('{"model":"n"}');
    expect(Object.hasOwn(mutation, 'streamed_response')).toBe(false);
    expect(path(reply, 'request_body', 'response', 'clear_route_cache')).toBe(true);
  });

  it('encodes immediate responses and response-body echoes', () => {
    const immediate = path(upstreamDecodeResponse(immediateResponse(503, 'no endpoint')), 'immediate_response') as Obj;
    expect(path(immediate, 'status', 'code')).toBe(StatusCode.ServiceUnavailable);
    const header = path(immediate, 'headers', 'set_headers', '0', 'header') as Obj;
    expect([header['key'], text(header['raw_value'])]).toEqual(['content-type', 'application/json']);
    expect(JSON.parse(text(immediate['body']))).toMatchObject({ error: { message: 'no endpoint' } });

    const echo = upstreamDecodeResponse(responseBodyResponse(bytes('data: y'), true, true));
    expect(text(path(echo, 'response_body', 'response', 'body_mutation', 'streamed_response', 'body'))).toBe('data: y');
  });

  it('round-trips a request our client encodes (the development gateway path)', () => {
    const ours: ProcessingRequest = {
      request: {
        $case: 'requestBody',
        value: { body: bytes('abc'), endOfStream: true, endOfStreamWithoutMessage: false, grpcMessageCompressed: false },
      },
      attributes: {},
      observabilityMode: false,
      protocolConfig: {
        requestBodyMode: BodySendMode.FULL_DUPLEX_STREAMED,
        responseBodyMode: BodySendMode.FULL_DUPLEX_STREAMED,
        sendBodyWithoutWaitingForHeaderResponse: false,
      },
      metadataContext: {
        filterMetadata: { 'envoy.lb.subset_hint': { 'x-gateway-destination-endpoint-subset': ['10.0.0.1:8000'] } },
        typedFilterMetadata: {},
      },
    };
    const upstream = UpRequest.toObject(UpRequest.decode(ProcessingRequest.encode(ours).finish()), { enums: String, bytes: String });
    expect(upstream).toMatchObject({
      request_body: { body: Buffer.from('abc').toString('base64'), end_of_stream: true },
      protocol_config: { request_body_mode: 'FULL_DUPLEX_STREAMED', response_body_mode: 'FULL_DUPLEX_STREAMED' },
      metadata_context: {
        filter_metadata: {
          'envoy.lb.subset_hint': {
            fields: { 'x-gateway-destination-endpoint-subset': { listValue: { values: [{ stringValue: '10.0.0.1:8000' }] } } },
          },
        },
      },
    });
  });

  it('decodes what an upstream-encoded response says (the gateway reading EPP replies)', () => {
    const wire = UpResponse.encode(
      UpResponse.fromObject({
        request_body: { response: { body_mutation: { streamed_response: { body: bytes('xyz'), end_of_stream: true } } } },
      }),
    ).finish();
    const ours = ProcessingResponse.decode(wire);
    const mutation = ours.response?.$case === 'requestBody' ? ours.response.value.response?.bodyMutation?.mutation : undefined;
    expect(mutation?.$case).toBe('streamedResponse');
    if (mutation?.$case === 'streamedResponse') {
      expect(text(mutation.value.body)).toBe('xyz');
      expect(mutation.value.endOfStream).toBe(true);
    }
  });
});
