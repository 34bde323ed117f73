import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { parseEndpointAddress } from '@spillway/events';
import { headerValue, readServedEndpoint } from '@spillway/protocol';

const metadata = (served: unknown) => ({
  filterMetadata: { 'envoy.lb': { 'x-gateway-destination-endpoint-served': served } },
  typedFilterMetadata: {},
});

describe('readServedEndpoint', () => {
  it('returns the same canonical key with or without the primary given', () => {
    const endpoint = fc.oneof(
      fc.ipV4(),
      fc.ipV6().map((ip) => `[${ip}]`),
    );
    fc.assert(
      fc.property(endpoint, fc.integer({ min: 1, max: 65535 }), fc.oneof(fc.constant(''), fc.constant(' ')), (ip, port, pad) => {
        const text = `${pad}${ip}:${port}${pad}`;
        const key = parseEndpointAddress(`${ip}:${port}`)?.key;
        if (key === undefined) return;
        // A canonical key parses to itself: what makes the shortcut sound.
        expect(parseEndpointAddress(key)?.key).toBe(key);
        const parsed = readServedEndpoint(metadata(text));
        expect(readServedEndpoint(metadata(text), key)).toBe(parsed);
        expect(readServedEndpoint(metadata(key), key)).toBe(key);
        expect(readServedEndpoint(metadata(text), '10.255.255.255:1')).toBe(parsed);
      }),
    );
  });

  it('is undefined when absent, not a string, or malformed, primary or not', () => {
    expect(readServedEndpoint(undefined, '10.0.0.1:8000')).toBeUndefined();
    expect(readServedEndpoint(metadata(42), '10.0.0.1:8000')).toBeUndefined();
    expect(readServedEndpoint(metadata('not an address'), '10.0.0.1:8000')).toBeUndefined();
    expect(readServedEndpoint(metadata(' 10.0.0.1:8000 '), '10.0.0.1:8000')).toBe('10.0.0.1:8000');
  });
});

describe('headerValue', () => {
  it('decodes raw_value exactly as TextDecoder does, ASCII or not, short or long', () => {
    const decoder = new TextDecoder();
    const ascii = fc.uint8Array({ maxLength: 200 }).map((b) => b.map((x) => x & 0x7f));
    fc.assert(
      fc.property(
        fc.oneof(
          ascii,
          fc.uint8Array({ maxLength: 200 }),
          fc.string({ unit: 'grapheme', maxLength: 60 }).map((t) => new TextEncoder().encode(t)),
        ),
        (raw) => {
          const expected = raw.length > 0 ? decoder.decode(raw) : 'fallback';
          expect(headerValue({ key: 'k', value: 'fallback', rawValue: raw })).toBe(expected);
        },
      ),
      { numRuns: 1000 },
    );
  });
});
