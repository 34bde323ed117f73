import { describe, expect, it } from 'vitest';
import { parseAddressPattern, parseEndpointAddress } from '@spillway/events';

describe('endpoint addresses', () => {
  it('parses IPv4 and bracketed IPv6 with canonical keys', () => {
    expect(parseEndpointAddress('10.0.1.5:8000')).toEqual({ ip: '10.0.1.5', port: 8000, key: '10.0.1.5:8000' });
    expect(parseEndpointAddress('[FD00:0:0::5]:8000')).toEqual({ ip: 'fd00::5', port: 8000, key: '[fd00::5]:8000' });
  });

  it.each([
    '10.0.1.5',
    '10.0.1.5:',
    '10.0.1.5:0',
    '10.0.1.5:65536',
    '10.0.1.5:80x',
    ':80',
    'host:80',
    '[fd00::5]',
    '[fd00::5]80',
    'fd00::5:80',
    '[10.0.0.1]:80',
    '[fe80::1%eth0]:80',
    ' 10.0.1.5:80',
    '10.0.1.5:+80',
  ])('rejects %j', (text) => {
    expect(parseEndpointAddress(text)).toBeUndefined();
  });

  it('reads subset entries: exact endpoints and bare IPs', () => {
    expect(parseAddressPattern(' 10.0.0.1:8000 ')).toMatchObject({ ip: '10.0.0.1', port: 8000 });
    expect(parseAddressPattern('10.0.0.1')).toEqual({ ip: '10.0.0.1', port: undefined, key: '10.0.0.1' });
    expect(parseAddressPattern('fd00::1')).toEqual({ ip: 'fd00::1', port: undefined, key: 'fd00::1' });
    expect(parseAddressPattern('[fd00::1]')).toEqual({ ip: 'fd00::1', port: undefined, key: 'fd00::1' });
    expect(parseAddressPattern('nonsense')).toBeUndefined();
    expect(parseAddressPattern('')).toBeUndefined();
  });
});
