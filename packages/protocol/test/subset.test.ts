import { describe, expect, it } from 'vitest';
import { readGatewayZone, readServedEndpoint, readSubsetHint } from '@spillway/protocol';
import type { Metadata } from '@spillway/protocol';

function withHint(value: unknown): Metadata {
  return {
    filterMetadata: { 'envoy.lb.subset_hint': { 'x-gateway-destination-endpoint-subset': value } },
    typedFilterMetadata: {},
  };
}

describe('readSubsetHint', () => {
  it('is undefined when the namespace or the key is absent', () => {
    expect(readSubsetHint(undefined)).toBeUndefined();
    expect(readSubsetHint({ filterMetadata: {}, typedFilterMetadata: {} })).toBeUndefined();
    expect(
      readSubsetHint({ filterMetadata: { 'envoy.lb.subset_hint': { other: ['10.0.0.1:80'] } }, typedFilterMetadata: {} }),
    ).toBeUndefined();
    expect(
      readSubsetHint({
        filterMetadata: { 'envoy.lb': { 'x-gateway-destination-endpoint-subset': ['10.0.0.1:80'] } },
        typedFilterMetadata: {},
      }),
    ).toBeUndefined();
  });

  it('hands over a list or a comma-separated string as sent (the scheduler resolves entries)', () => {
    expect(readSubsetHint(withHint(['10.0.0.1:8000', '10.0.0.2']))).toEqual(['10.0.0.1:8000', '10.0.0.2']);
    expect(readSubsetHint(withHint('10.0.0.1:8000, 10.0.0.2:8000'))).toBe('10.0.0.1:8000, 10.0.0.2:8000');
    expect(readSubsetHint(withHint([]))).toEqual([]);
    expect(readSubsetHint(withHint(''))).toBe('');
  });

  it('turns any other value into one malformed entry, never into "no restriction"', () => {
    expect(readSubsetHint(withHint(42))).toEqual([42]);
    expect(readSubsetHint(withHint({ a: 1 }))).toEqual([{ a: 1 }]);
    expect(readSubsetHint(withHint(null))).toEqual([null]);
  });
});

describe('readGatewayZone', () => {
  const withZone = (value: unknown, namespace = 'envoy.lb.subset_hint'): Metadata => ({
    filterMetadata: { [namespace]: { 'x-spillway-gateway-zone': value } },
    typedFilterMetadata: {},
  });

  it("reads the gateway's zone beside the subset", () => {
    expect(readGatewayZone(withZone('zone-b'))).toBe('zone-b');
    expect(readGatewayZone(withZone('z'.repeat(253)))).toBe('z'.repeat(253));
  });

  it('is undefined when absent, in another namespace or without the key', () => {
    expect(readGatewayZone(undefined)).toBeUndefined();
    expect(readGatewayZone(withHint(['10.0.0.1:80']))).toBeUndefined();
    expect(readGatewayZone(withZone('zone-b', 'envoy.lb'))).toBeUndefined();
  });

  it('is null for a value that is not a zone name, so it is counted rather than taken for none', () => {
    for (const value of ['', 'z'.repeat(254), 7, null, ['zone-b'], { zone: 'zone-b' }, true])
      expect(readGatewayZone(withZone(value))).toBeNull();
  });
});

describe('readServedEndpoint', () => {
  const served = (value: unknown): Metadata => ({
    filterMetadata: { 'envoy.lb': { 'x-gateway-destination-endpoint-served': value } },
    typedFilterMetadata: {},
  });

  it('reads the endpoint the gateway used', () => {
    expect(readServedEndpoint(served('10.0.0.2:8000'))).toBe('10.0.0.2:8000');
    expect(readServedEndpoint(served('[FD00::1]:8000'))).toBe('[fd00::1]:8000');
  });

  it('is undefined when absent or malformed', () => {
    expect(readServedEndpoint(undefined)).toBeUndefined();
    expect(readServedEndpoint({ filterMetadata: {}, typedFilterMetadata: {} })).toBeUndefined();
    expect(readServedEndpoint(served(7))).toBeUndefined();
    expect(readServedEndpoint(served('10.0.0.2'))).toBeUndefined();
    expect(readServedEndpoint(served('upstream-host:80'))).toBeUndefined();
  });
});
