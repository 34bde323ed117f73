import { describe, expect, it } from 'vitest';
import { BodySendMode, DEFAULT_BODY_MODES, decodePhase, readBodyModes, readRequestHeaders } from '@spillway/protocol';
import type { HttpHeaders, ProcessingRequest } from '@spillway/protocol';

const raw = (key: string, value: string) => ({ key, value: '', rawValue: new TextEncoder().encode(value) });
const headers = (list: { key: string; value: string; rawValue: Uint8Array }[], endOfStream = false): HttpHeaders => ({
  headers: { headers: list },
  attributes: {},
  endOfStream,
});
const request = (r: ProcessingRequest['request']): ProcessingRequest => ({ request: r, attributes: {}, observabilityMode: false });

describe('readRequestHeaders', () => {
  it('reads the headers the EPP acts on, raw_value first, value as fallback', () => {
    const read = readRequestHeaders(
      headers([
        raw(':path', '/v1/completions'),
        raw(':method', 'POST'),
        raw('Content-Type', 'application/json'),
        raw('content-length', '42'),
        raw('x-gateway-inference-objective', ' critical '),
        { key: 'x-gateway-model-name-rewrite', value: 'via-value', rawValue: new Uint8Array(0) },
        raw('x-request-id', 'abc'),
        raw('x-gateway-destination-endpoint', '1.2.3.4:5'),
        raw('x-gateway-destination-endpoint-subset', '1.2.3.4:5'),
        raw('X-Gateway-Destination-Endpoint-Served', '1.2.3.4:5'),
        raw('x-gateway-destination-endpoint', 'twice'),
      ]),
    );
    expect(read).toEqual({
      path: '/v1/completions',
      method: 'POST',
      contentType: 'application/json',
      contentLength: 42,
      objective: 'critical',
      modelRewrite: 'via-value',
      requestId: 'abc',
      endOfStream: false,
      destinationHeaders: [
        'x-gateway-destination-endpoint',
        'x-gateway-destination-endpoint-subset',
        'x-gateway-destination-endpoint-served',
      ],
    });
  });

  it('treats empty control headers as absent, tolerates a bad content-length, and flags header-only requests', () => {
    const read = readRequestHeaders(
      headers([raw('x-gateway-inference-objective', ''), raw('x-gateway-model-name-rewrite', '  '), raw('content-length', 'abc')], true),
    );
    expect(read).toMatchObject({
      objective: undefined,
      modelRewrite: undefined,
      contentLength: undefined,
      endOfStream: true,
      destinationHeaders: [],
    });
    expect(readRequestHeaders({ attributes: {}, endOfStream: false })).toMatchObject({ path: undefined, destinationHeaders: [] });
  });
});

describe('decodePhase', () => {
  it('names every phase', () => {
    const body = { body: new Uint8Array([1]), endOfStream: true, endOfStreamWithoutMessage: false, grpcMessageCompressed: false };
    expect(decodePhase(request({ $case: 'requestHeaders', value: headers([], true) }))).toMatchObject({
      kind: 'requestHeaders',
      headers: { endOfStream: true },
    });
    expect(decodePhase(request({ $case: 'requestBody', value: body }))).toEqual({
      kind: 'requestBody',
      chunk: body.body,
      endOfStream: true,
    });
    expect(decodePhase(request({ $case: 'requestTrailers', value: {} }))).toEqual({ kind: 'requestTrailers' });
    expect(
      decodePhase(request({ $case: 'responseHeaders', value: headers([raw(':status', '503'), raw('content-type', 'text/event-stream')]) })),
    ).toEqual({
      kind: 'responseHeaders',
      headers: { status: 503, contentType: 'text/event-stream', endOfStream: false },
    });
    expect(decodePhase(request({ $case: 'responseBody', value: body }))).toEqual({
      kind: 'responseBody',
      chunk: body.body,
      endOfStream: true,
    });
    expect(decodePhase(request({ $case: 'responseTrailers', value: {} }))).toEqual({ kind: 'responseTrailers' });
    expect(decodePhase(request(undefined))).toEqual({ kind: 'empty' });
  });
});

describe('readBodyModes', () => {
  it('maps protocol_config, and falls back when Envoy sent none', () => {
    const config = (request: BodySendMode, response: BodySendMode) => ({
      requestBodyMode: request,
      responseBodyMode: response,
      sendBodyWithoutWaitingForHeaderResponse: false,
    });
    expect(readBodyModes(config(BodySendMode.FULL_DUPLEX_STREAMED, BodySendMode.BUFFERED))).toEqual({
      request: 'full-duplex',
      response: 'buffered',
    });
    expect(readBodyModes(config(BodySendMode.NONE, BodySendMode.STREAMED))).toEqual({ request: 'none', response: 'streamed' });
    expect(readBodyModes(config(BodySendMode.BUFFERED_PARTIAL, BodySendMode.GRPC))).toEqual({
      request: 'buffered-partial',
      response: 'grpc',
    });
    expect(readBodyModes(config(99 as BodySendMode, BodySendMode.NONE))).toEqual({ request: 'unknown', response: 'none' });
    expect(readBodyModes(undefined)).toBe(DEFAULT_BODY_MODES);
    const fallback = { request: 'buffered', response: 'buffered' } as const;
    expect(readBodyModes(undefined, fallback)).toBe(fallback);
  });
});
