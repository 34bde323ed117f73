import { describe, expect, it } from 'vitest';
import fc from 'fast-check';
import {
  canonicalEndpoint,
  parseEndpoint,
  readServedEndpoint,
  readSubsetHint,
  subsetIncludes,
} from '@spillway/protocol';
import type { Metadata } from '@spillway/protocol';

function withHint(value: unknown): Metadata {
  return {
    filterMetadata: { 'envoy.lb.subset_hint': { 'x-gateway-destination-endpoint-subset': value } },
    typedFilterMetadata: {},
  };
}

describe('parseEndpoint', () => {
  it.each([
    ['10.0.0.1:8000', { host: '10.0.0.1', port: 8000, family: 4 }],
    ['10.0.0.1', { host: '10.0.0.1', port: undefined, family: 4 }],
    ['[FD00:0:0::1]:8000', { host: 'fd00::1', port: 8000, family: 6 }],
    ['[::1]', { host: '::1', port: undefined, family: 6 }],
    ['fd00::1', { host: 'fd00::1', port: undefined, family: 6 }],
    ['10.0.0.1:08000', { host: '10.0.0.1', port: 8000, family: 4 }],
  ])('accepts %s', (text, expected) => {
    expect(parseEndpoint(text)).toEqual(expected);
  });

  it.each([
    '',
    'host:8000',
    '10.0.0.256:80',
    '10.0.0:80',
    '010.0.0.1:80',
    '10.0.0.1:0',
    '10.0.0.1:65536',
    '10.0.0.1:',
    '10.0.0.1:80x',
    '10.0.0.1: 80',
    '[fd00::1',
    '[fd00::1]8000',
    '[10.0.0.1]:80',
    '[fe80::1%eth0]:80',
    'fd00::1:8000:x',
  ])('rejects %j', (text) => {
    expect(parseEndpoint(text)).toBeUndefined();
  });
});

describe('readSubsetHint', () => {
  it('is undefined when the namespace or the key is absent', () => {
    expect(readSubsetHint(undefined)).toBeUndefined();
    expect(readSubsetHint({ filterMetadata: {}, typedFilterMetadata: {} })).toBeUndefined();
    expect(readSubsetHint({ filterMetadata: { 'envoy.lb.subset_hint': { other: ['10.0.0.1:80'] } }, typedFilterMetadata: {} })).toBeUndefined();
    expect(readSubsetHint({ filterMetadata: { 'envoy.lb': { 'x-gateway-destination-endpoint-subset': ['10.0.0.1:80'] } }, typedFilterMetadata: {} })).toBeUndefined();
  });

  it('reads a list of strings', () => {
    const hint = readSubsetHint(withHint(['10.0.0.1:8000', '10.0.0.2', '[fd00::2]:9000', '10.0.0.1:8000']));
    expect(hint).toBeDefined();
    if (hint === undefined) return;
    expect([...hint.endpoints]).toEqual(['10.0.0.1:8000', '[fd00::2]:9000']);
    expect([...hint.hosts]).toEqual(['10.0.0.2']);
    expect(hint.size).toBe(3);
    expect(hint.ignored).toBe(0);
  });

  it('reads one comma-separated string, tolerating spaces', () => {
    const hint = readSubsetHint(withHint('10.0.0.1:8000, 10.0.0.2:8000 ,[fd00::1]'));
    expect(hint && [...hint.endpoints]).toEqual(['10.0.0.1:8000', '10.0.0.2:8000']);
    expect(hint && [...hint.hosts]).toEqual(['fd00::1']);
  });

  it('treats an empty list or empty string as an empty subset (the EPP answers 503)', () => {
    expect(readSubsetHint(withHint([]))).toMatchObject({ size: 0, ignored: 0 });
    expect(readSubsetHint(withHint(''))).toMatchObject({ size: 0, ignored: 0 });
  });

  it('ignores and counts malformed entries', () => {
    const hint = readSubsetHint(withHint(['10.0.0.1:8000', 12345, 'pod-a:8000', '', null, { ip: '10.0.0.2' }, '10.0.0.1:99999']));
    expect(hint).toMatchObject({ size: 1, ignored: 6 });
    expect(readSubsetHint(withHint('10.0.0.1:8000,,nope'))).toMatchObject({ size: 1, ignored: 2 });
  });

  it('fails closed on a value that is neither list nor string', () => {
    expect(readSubsetHint(withHint(42))).toMatchObject({ size: 0, ignored: 1 });
    expect(readSubsetHint(withHint({ a: 1 }))).toMatchObject({ size: 0, ignored: 1 });
  });

  it('matches exact endpoints, and every port of a bare IP, IPv6 included', () => {
    const hint = readSubsetHint(withHint(['10.0.0.1:8000', '10.0.0.2', '[fd00::1]:8000', 'fd00::2']));
    if (hint === undefined) throw new Error('hint expected');
    expect(subsetIncludes(hint, '10.0.0.1:8000')).toBe(true);
    expect(subsetIncludes(hint, '10.0.0.1:8001')).toBe(false);
    expect(subsetIncludes(hint, '10.0.0.2:8000')).toBe(true);
    expect(subsetIncludes(hint, '10.0.0.2:9')).toBe(true);
    expect(subsetIncludes(hint, '10.0.0.3:8000')).toBe(false);
    expect(subsetIncludes(hint, '[fd00::1]:8000')).toBe(true);
    expect(subsetIncludes(hint, '[fd00::1]:8001')).toBe(false);
    expect(subsetIncludes(hint, '[fd00::2]:1234')).toBe(true);
    expect(subsetIncludes(hint, canonicalEndpoint('[FD00:0::2]:1234') ?? '')).toBe(true);
  });

  it('property: any list of valid endpoints reads back as exactly that set', () => {
    const ipv4 = fc.tuple(fc.nat(255), fc.nat(255), fc.nat(255), fc.nat(255)).map((parts) => parts.join('.'));
    const endpoint = fc.oneof(
      fc.tuple(ipv4, fc.integer({ min: 1, max: 65535 })).map(([ip, port]) => `${ip}:${port}`),
      fc.tuple(fc.ipV6(), fc.integer({ min: 1, max: 65535 })).map(([ip, port]) => `[${ip}]:${port}`),
    );
    fc.assert(
      fc.property(fc.array(endpoint, { maxLength: 20 }), fc.boolean(), (endpoints, asString) => {
        const hint = readSubsetHint(withHint(asString ? endpoints.join(',') : endpoints));
        if (hint === undefined) return false;
        const canonical = new Set(endpoints.map((e) => canonicalEndpoint(e)));
        expect(hint.ignored).toBe(0);
        expect(new Set(hint.endpoints)).toEqual(canonical);
        for (const e of canonical) expect(subsetIncludes(hint, e ?? '')).toBe(true);
        return true;
      }),
      { numRuns: 200 },
    );
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

describe('readSubsetHint reuse', () => {
  it('gives the right hint when values alternate and repeat', () => {
    const a = ['10.0.0.1:8000'];
    const b = ['10.0.0.2:8000'];
    const read = (v: unknown) => [...(readSubsetHint(withHint(v))?.endpoints ?? [])];
    expect(read(a)).toEqual(['10.0.0.1:8000']);
    expect(read([...a])).toEqual(['10.0.0.1:8000']);
    expect(read(b)).toEqual(['10.0.0.2:8000']);
    expect(read('10.0.0.1:8000')).toEqual(['10.0.0.1:8000']);
    expect(read(['10.0.0.1:8000', '10.0.0.2:8000'])).toEqual(['10.0.0.1:8000', '10.0.0.2:8000']);
    expect(read(a)).toEqual(['10.0.0.1:8000']);
    expect(readSubsetHint(withHint([12345]))).toMatchObject({ size: 0, ignored: 1 });
    expect(readSubsetHint(withHint([12345]))).toMatchObject({ size: 0, ignored: 1 });
  });
});
