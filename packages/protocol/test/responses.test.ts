import { describe, expect, it } from 'vitest';
import fc from 'fast-check';
import {
  BODY_CHUNK_BYTES,
  ProcessingResponse,
  immediateResponse,
  parseDestination,
  renderDestination,
  requestHeadersResponse,
  responseBodyResponse,
  responseHeadersResponse,
  routedResponses,
  streamedBodyResponses,
} from '@spillway/protocol';
import type { CommonResponse, HeaderValueOption } from '@spillway/protocol';

const text = (data: Uint8Array | undefined): string => new TextDecoder().decode(data);

/** Every reply goes through the wire in production; check the decoded form. */
function wire(response: ProcessingResponse): ProcessingResponse {
  return ProcessingResponse.decode(ProcessingResponse.encode(response).finish());
}

function commonOf(response: ProcessingResponse): CommonResponse | undefined {
  const r = response.response;
  switch (r?.$case) {
    case 'requestHeaders':
    case 'responseHeaders':
    case 'requestBody':
    case 'responseBody':
      return r.value.response;
    default:
      return undefined;
  }
}

function headerMap(options: readonly HeaderValueOption[] | undefined): Record<string, string> {
  const map: Record<string, string> = {};
  for (const option of options ?? []) {
    // raw_value only, never value (Envoy rejects both and ignores value alone).
    expect(option.header?.value).toBe('');
    expect(option.append).toBeUndefined();
    map[option.header?.key ?? ''] = text(option.header?.rawValue);
  }
  return map;
}

function streamedOf(response: ProcessingResponse): { body: Uint8Array; endOfStream: boolean } | undefined {
  const mutation = commonOf(response)?.bodyMutation?.mutation;
  return mutation?.$case === 'streamedResponse' ? mutation.value : undefined;
}

describe('renderDestination', () => {
  it('joins without spaces, keeps order, drops duplicates and caps at maxEndpoints', () => {
    expect(renderDestination(['10.0.0.1:80', '10.0.0.2:80', '10.0.0.1:80', '10.0.0.3:80', '10.0.0.4:80'], 3)).toBe(
      '10.0.0.1:80,10.0.0.2:80,10.0.0.3:80',
    );
    expect(renderDestination(['10.0.0.1:80', '10.0.0.2:80'], 1)).toBe('10.0.0.1:80');
    expect(renderDestination(['[fd00::1]:80'], 3)).toBe('[fd00::1]:80');
  });

  it('skips entries that would corrupt the list', () => {
    expect(renderDestination(['', '10.0.0.1:80 ', 'a,b', '10.0.0.2:80'], 3)).toBe('10.0.0.2:80');
  });

  it('rejects a maxEndpoints below 1', () => {
    expect(() => renderDestination(['10.0.0.1:80'], 0)).toThrow(RangeError);
    expect(() => renderDestination(['10.0.0.1:80'], 1.5)).toThrow(RangeError);
  });

  it('property: renders and parses back to the first maxEndpoints distinct entries', () => {
    const endpoint = fc.tuple(fc.nat(255), fc.nat(255), fc.integer({ min: 1, max: 65535 })).map(([a, b, port]) => `10.${a}.${b}.1:${port}`);
    fc.assert(
      fc.property(fc.array(endpoint, { maxLength: 12 }), fc.integer({ min: 1, max: 8 }), (endpoints, max) => {
        const rendered = renderDestination(endpoints, max);
        expect(rendered).not.toMatch(/\s/);
        expect(parseDestination(rendered)).toEqual([...new Set(endpoints)].slice(0, max));
      }),
      { numRuns: 200 },
    );
  });
});

describe('routed responses', () => {
  const destination = '10.0.0.1:8000,10.0.0.2:8000';

  it('full duplex: headers response carries the decision, header equals metadata, then the body streamed', () => {
    const body = new TextEncoder().encode('{"model":"m","prompt":"hi"}');
    const replies = routedResponses({
      mode: 'full-duplex',
      destination,
      body,
      removeHeaders: ['x-gateway-destination-endpoint', 'x-gateway-destination-endpoint-subset'],
    }).map(wire);
    expect(replies.map((r) => r.response?.$case)).toEqual(['requestHeaders', 'requestBody']);

    const [headers, chunk] = replies as [ProcessingResponse, ProcessingResponse];
    const common = commonOf(headers);
    expect(common?.clearRouteCache).toBe(true);
    const set = headerMap(common?.headerMutation?.setHeaders);
    expect(set).toEqual({ 'x-gateway-destination-endpoint': destination, 'content-length': String(body.length) });
    expect(headers.dynamicMetadata).toEqual({ 'envoy.lb': { 'x-gateway-destination-endpoint': destination } });
    // The header we set overwrites a client's copy, so only the others are removed.
    expect(common?.headerMutation?.removeHeaders).toEqual(['x-gateway-destination-endpoint-subset']);

    expect(commonOf(chunk)?.clearRouteCache).toBe(false);
    expect(streamedOf(chunk)).toMatchObject({ endOfStream: true });
    expect(text(streamedOf(chunk)?.body)).toBe('{"model":"m","prompt":"hi"}');
  });

  it('full duplex: an empty body still gets one empty end-of-stream chunk and no content-length', () => {
    const replies = routedResponses({ mode: 'full-duplex', destination, body: new Uint8Array(0) }).map(wire);
    expect(replies).toHaveLength(2);
    expect(headerMap(commonOf(replies[0] as ProcessingResponse)?.headerMutation?.setHeaders)).toEqual({
      'x-gateway-destination-endpoint': destination,
    });
    expect(streamedOf(replies[1] as ProcessingResponse)).toEqual({
      body: new Uint8Array(0),
      endOfStream: true,
      endOfStreamWithoutMessage: false,
      grpcMessageCompressed: false,
    });
  });

  it('full duplex with trailers: no end of stream on the body, then a trailers response', () => {
    const replies = routedResponses({ mode: 'full-duplex', destination, body: new Uint8Array(10), endedWithTrailers: true }).map(wire);
    expect(replies.map((r) => r.response?.$case)).toEqual(['requestHeaders', 'requestBody', 'requestTrailers']);
    expect(streamedOf(replies[1] as ProcessingResponse)?.endOfStream).toBe(false);
  });

  it('buffered: one plain body reply with the decision, never streamed_response', () => {
    const unchanged = routedResponses({ mode: 'buffered', destination, body: new Uint8Array(5), bodyChanged: false }).map(wire);
    expect(unchanged.map((r) => r.response?.$case)).toEqual(['requestBody']);
    const common = commonOf(unchanged[0] as ProcessingResponse);
    expect(common?.bodyMutation).toBeUndefined();
    expect(common?.clearRouteCache).toBe(true);
    expect(headerMap(common?.headerMutation?.setHeaders)).toEqual({ 'x-gateway-destination-endpoint': destination });
    expect((unchanged[0] as ProcessingResponse).dynamicMetadata).toEqual({ 'envoy.lb': { 'x-gateway-destination-endpoint': destination } });

    const rewritten = new TextEncoder().encode('{"model":"new"}');
    const [changed] = routedResponses({ mode: 'buffered', destination, body: rewritten, bodyChanged: true }).map(wire);
    const changedCommon = commonOf(changed as ProcessingResponse);
    expect(changedCommon?.bodyMutation?.mutation?.$case).toBe('body');
    expect(changedCommon?.bodyMutation?.mutation?.$case === 'body' && text(changedCommon.bodyMutation.mutation.value)).toBe(
      '{"model":"new"}',
    );
    expect(headerMap(changedCommon?.headerMutation?.setHeaders)['content-length']).toBe(String(rewritten.length));
  });

  it('buffered: the headers are answered at once with a plain continue that strips client destination headers', () => {
    expect(wire(requestHeadersResponse())).toEqual(
      wire({ response: { $case: 'requestHeaders', value: { response: { status: 0, clearRouteCache: false } } }, requestDrain: false }),
    );
    const strip = wire(requestHeadersResponse({ removeHeaders: ['x-gateway-destination-endpoint'] }));
    expect(commonOf(strip)?.headerMutation?.removeHeaders).toEqual(['x-gateway-destination-endpoint']);
    expect(commonOf(strip)?.clearRouteCache).toBe(false);
    expect(strip.dynamicMetadata).toBeUndefined();
  });

  it('header-only: just the headers response with the decision', () => {
    const replies = routedResponses({ mode: 'header-only', destination }).map(wire);
    expect(replies).toHaveLength(1);
    expect(commonOf(replies[0] as ProcessingResponse)?.clearRouteCache).toBe(true);
    expect((replies[0] as ProcessingResponse).dynamicMetadata).toEqual({ 'envoy.lb': { 'x-gateway-destination-endpoint': destination } });
  });
});

describe('streamedBodyResponses', () => {
  it.each([
    [0, [0]],
    [1, [1]],
    [BODY_CHUNK_BYTES, [BODY_CHUNK_BYTES]],
    [BODY_CHUNK_BYTES + 1, [BODY_CHUNK_BYTES, 1]],
    [3 * BODY_CHUNK_BYTES + 7, [BODY_CHUNK_BYTES, BODY_CHUNK_BYTES, BODY_CHUNK_BYTES, 7]],
  ])('splits %i bytes into chunks of at most 62,000 bytes', (size, sizes) => {
    const body = Uint8Array.from({ length: size }, (_, i) => i % 251);
    const chunks = streamedBodyResponses('request', body).map(wire).map(streamedOf);
    expect(chunks.map((c) => c?.body.length)).toEqual(sizes);
    expect(chunks.map((c) => c?.endOfStream)).toEqual(sizes.map((_, i) => i === sizes.length - 1));
    const joined = Buffer.concat(chunks.map((c) => c?.body ?? new Uint8Array(0)));
    expect(joined.equals(Buffer.from(body))).toBe(true);
  });
});

describe('response path', () => {
  it('passes headers through and echoes body chunks as streamed_response in full duplex', () => {
    expect(commonOf(wire(responseHeadersResponse()))?.headerMutation).toBeUndefined();
    const echoed = wire(responseBodyResponse(new TextEncoder().encode('data: 1\n\n'), false, true));
    expect(echoed.response?.$case).toBe('responseBody');
    expect(streamedOf(echoed)).toMatchObject({ endOfStream: false });
    expect(text(streamedOf(echoed)?.body)).toBe('data: 1\n\n');
    const buffered = wire(responseBodyResponse(new Uint8Array(3), true, false));
    expect(buffered.response?.$case).toBe('responseBody');
    expect(commonOf(buffered)?.bodyMutation).toBeUndefined();
  });
});

describe('immediateResponse', () => {
  it.each([400, 404, 413, 429, 500, 503] as const)('answers %i with an OpenAI-shaped JSON error', (status) => {
    const response = wire(immediateResponse(status, 'something went wrong', { code: 'custom_code' }));
    expect(response.response?.$case).toBe('immediateResponse');
    if (response.response?.$case !== 'immediateResponse') return;
    const immediate = response.response.value;
    expect(immediate.status?.code).toBe(status);
    expect(headerMap(immediate.headers?.setHeaders)).toEqual({ 'content-type': 'application/json' });
    const body = JSON.parse(text(immediate.body)) as { error: Record<string, unknown> };
    expect(Object.keys(body)).toEqual(['error']);
    expect(body.error).toEqual({ message: 'something went wrong', type: expect.any(String), code: 'custom_code' });
  });

  it('uses OpenAI error types and default codes', () => {
    const decode = (r: ProcessingResponse): unknown =>
      r.response?.$case === 'immediateResponse' ? JSON.parse(text(r.response.value.body)) : undefined;
    expect(decode(immediateResponse(400, 'bad'))).toEqual({
      error: { message: 'bad', type: 'invalid_request_error', code: 'bad_request' },
    });
    expect(decode(immediateResponse(429, 'busy'))).toEqual({
      error: { message: 'busy', type: 'rate_limit_error', code: 'system_saturated' },
    });
    expect(decode(immediateResponse(503, 'none', { type: 'x' }))).toEqual({
      error: { message: 'none', type: 'x', code: 'no_endpoint_available' },
    });
  });
});
