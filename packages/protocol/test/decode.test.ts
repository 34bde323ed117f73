import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { decodeProcessingRequest, extProcService, ProcessingRequest } from '../src/index.js';

/** What the generated decoder gives, or the error it throws. */
function generated(bytes: Uint8Array): { value: unknown } | { error: string } {
  try {
    return { value: ProcessingRequest.decode(bytes) };
  } catch (error) {
    return { error: (error as Error).message };
  }
}
function ours(bytes: Uint8Array): { value: unknown } | { error: string } {
  try {
    return { value: decodeProcessingRequest(bytes) };
  } catch (error) {
    return { error: (error as Error).message };
  }
}

// Struct values: what JSON can hold (the generated encoder writes numbers as doubles).
const structValue = fc.jsonValue({ maxDepth: 3 });
const struct = fc.dictionary(
  fc.oneof(
    fc.string({ maxLength: 12 }),
    fc.constantFrom('x-gateway-destination-endpoint-subset', 'x-gateway-destination-endpoint-served', '__proto__'),
  ),
  structValue,
  { maxKeys: 4 },
);
const namespaces = fc.dictionary(fc.oneof(fc.string({ maxLength: 12 }), fc.constantFrom('envoy.lb', 'envoy.lb.subset_hint')), struct, {
  maxKeys: 3,
});
const bytes = fc.uint8Array({ maxLength: 64 });
const headers = fc.array(fc.record({ key: fc.string({ maxLength: 16 }), value: fc.string({ maxLength: 8 }), rawValue: bytes }), {
  maxLength: 4,
});

const requestArb: fc.Arbitrary<ProcessingRequest> = fc.record({
  request: fc.oneof(
    fc.constant(undefined),
    fc.record({
      $case: fc.constantFrom('requestHeaders' as const, 'responseHeaders' as const),
      value: fc.record({ headers: fc.record({ headers }), attributes: fc.constant({}), endOfStream: fc.boolean() }),
    }),
    fc.record({
      $case: fc.constantFrom('requestBody' as const, 'responseBody' as const),
      value: fc.record({
        body: bytes,
        endOfStream: fc.boolean(),
        endOfStreamWithoutMessage: fc.boolean(),
        grpcMessageCompressed: fc.boolean(),
      }),
    }),
  ),
  metadataContext: fc.oneof(fc.constant(undefined), fc.record({ filterMetadata: namespaces, typedFilterMetadata: fc.constant({}) })),
  attributes: fc.oneof(fc.constant({}), fc.dictionary(fc.string({ maxLength: 8 }), struct, { maxKeys: 2 })),
  observabilityMode: fc.boolean(),
  protocolConfig: fc.oneof(
    fc.constant(undefined),
    fc.record({ requestBodyMode: fc.nat(6), responseBodyMode: fc.nat(6), sendBodyWithoutWaitingForHeaderResponse: fc.boolean() }),
  ),
}) as fc.Arbitrary<ProcessingRequest>;

describe('decodeProcessingRequest', () => {
  it('equals the generated decoder on every encoded request (metadata of every shape, attributes, bodies, headers)', () => {
    fc.assert(
      fc.property(requestArb, (request) => {
        const encoded = ProcessingRequest.encode(request).finish();
        expect(ours(encoded)).toStrictEqual(generated(encoded));
      }),
      { numRuns: 500 },
    );
  });

  it('equals the generated decoder on damaged input: truncated, bytes flipped, or random', () => {
    const damaged = fc.oneof(
      fc.tuple(requestArb, fc.nat()).map(([request, cut]) => {
        const encoded = ProcessingRequest.encode(request).finish();
        return encoded.subarray(0, encoded.length === 0 ? 0 : cut % encoded.length);
      }),
      fc.tuple(requestArb, fc.nat(), fc.integer({ min: 0, max: 255 })).map(([request, at, byte]) => {
        const encoded = ProcessingRequest.encode(request).finish().slice();
        if (encoded.length > 0) encoded[at % encoded.length] = byte;
        return encoded;
      }),
      fc.uint8Array({ maxLength: 200 }),
    );
    fc.assert(
      fc.property(damaged, (input) => {
        expect(ours(input)).toStrictEqual(generated(input));
      }),
      { numRuns: 2000 },
    );
  });

  it('keeps the subset hint and the served endpoint exactly as Envoy sent them', () => {
    const request: ProcessingRequest = {
      request: { $case: 'responseHeaders', value: { headers: { headers: [] }, attributes: {}, endOfStream: false } },
      metadataContext: {
        filterMetadata: {
          'envoy.lb': {
            'x-gateway-destination-endpoint-served': '10.0.0.7:8000',
            'x-gateway-destination-endpoint': '10.0.0.7:8000,10.0.0.8:8000',
          },
          'envoy.lb.subset_hint': { 'x-gateway-destination-endpoint-subset': ['10.0.0.7:8000', '10.0.0.8:8000', 3, null, { odd: true }] },
        },
        typedFilterMetadata: {},
      },
      attributes: {},
      observabilityMode: false,
      protocolConfig: undefined,
    };
    const decoded = extProcService.process.requestDeserialize(Buffer.from(ProcessingRequest.encode(request).finish()));
    expect(decoded).toEqual(request);
  });

  it('drops a forged `__proto__` key as the generated decoder does, so nothing is inherited', () => {
    // Encoders will not write such a key from a JS object, so a same-length key is swapped in the bytes.
    const request = {
      ...ProcessingRequest.fromPartial({}),
      metadataContext: { filterMetadata: { ns: { __proto_X: { polluted: 'yes' }, kept: 1 } }, typedFilterMetadata: {} },
    };
    const encoded = Buffer.from(ProcessingRequest.encode(request).finish());
    const at = encoded.indexOf('__proto_X');
    expect(at).toBeGreaterThan(0);
    encoded.write('__proto__', at, 'latin1');
    for (const decoded of [ProcessingRequest.decode(encoded), decodeProcessingRequest(encoded)]) {
      const ns = decoded.metadataContext?.filterMetadata['ns'] as Record<string, unknown>;
      expect(Object.getPrototypeOf(ns)).toBe(Object.prototype);
      expect(ns['polluted']).toBeUndefined();
      expect(ns).toStrictEqual({ kept: 1 });
    }
  });

  it('stops at the same nesting limit as the generated decoder', () => {
    // A Struct nested 40 deep (each level is Struct > FieldsEntry > Value, three decoder levels).
    let value: unknown = 'leaf';
    for (let i = 0; i < 40; i++) value = { nested: value };
    const request = {
      ...ProcessingRequest.fromPartial({}),
      metadataContext: { filterMetadata: { ns: value as Record<string, unknown> }, typedFilterMetadata: {} },
    };
    const encoded = ProcessingRequest.encode(request).finish();
    const expected = generated(encoded);
    expect(expected).toEqual({ error: 'protobuf decode recursion limit exceeded' });
    expect(ours(encoded)).toEqual(expected);
  });
});
