// What the gateway takes from EDS and ECDS, and how set_metadata writes it (pure rules, each after
// the Envoy source named in services/gateway/src/xds-resources.ts and set-metadata.ts).
import { ClusterLoadAssignment, HealthStatus, TYPE_URLS } from '@spillway/xds-protocol';
import { describe, expect, it } from 'vitest';
import { applySetMetadata } from '../src/set-metadata.js';
import { endpointsOf } from '../src/xds-resources.js';

function lb(address: string, port: number, healthStatus = HealthStatus.HEALTHY) {
  return {
    healthStatus,
    hostIdentifier: {
      $case: 'endpoint' as const,
      value: {
        address: {
          address: { $case: 'socketAddress' as const, value: { address, portSpecifier: { $case: 'portValue' as const, value: port } } },
        },
      },
    },
  };
}

function claOf(localities: { zone: string; priority: number; endpoints: ReturnType<typeof lb>[] }[]) {
  const cla = ClusterLoadAssignment.fromPartial({
    clusterName: 'model-servers',
    endpoints: localities.map((l) => ({
      locality: { zone: l.zone, region: 'r1', subZone: '' },
      priority: l.priority,
      lbEndpoints: l.endpoints,
    })),
  });
  return [{ typeUrl: TYPE_URLS.eds, value: ClusterLoadAssignment.encode(cla).finish() }];
}

describe('EDS', () => {
  it('lists each endpoint once with its zone, priority and health; IPv6 bracketed', () => {
    const checked = endpointsOf(
      claOf([
        { zone: 'zone-b', priority: 1, endpoints: [lb('10.0.0.1', 8000), lb('fd00::2', 8000, HealthStatus.DRAINING)] },
        { zone: 'zone-a', priority: 0, endpoints: [lb('10.0.0.1', 8000), lb('10.0.0.3', 8000, HealthStatus.UNKNOWN)] },
      ]),
      'model-servers',
    );
    expect(checked).toEqual({
      ok: true,
      value: [
        { address: '10.0.0.1:8000', zone: 'zone-a', region: 'r1', priority: 0, healthy: true },
        { address: '10.0.0.3:8000', zone: 'zone-a', region: 'r1', priority: 0, healthy: true },
        { address: '[fd00::2]:8000', zone: 'zone-b', region: 'r1', priority: 1, healthy: false },
      ],
    });
  });

  it('keeps what it has for a response without the resource, refuses two, a port out of range or garbage', () => {
    expect(endpointsOf([], 'model-servers')).toEqual({ ok: true, value: undefined });
    const one = claOf([{ zone: 'zone-a', priority: 0, endpoints: [lb('10.0.0.1', 8000)] }]);
    expect(endpointsOf([...one, ...one], 'model-servers')).toMatchObject({ ok: false, error: 'Unexpected EDS resource length: 2' });
    expect(endpointsOf(claOf([{ zone: 'zone-a', priority: 0, endpoints: [lb('10.0.0.1', 70000)] }]), 'model-servers')).toMatchObject({
      ok: false,
      error: expect.stringMatching(/malformed IP address/),
    });
    expect(endpointsOf([{ typeUrl: TYPE_URLS.eds, value: new Uint8Array([0xff, 0xff]) }], 'model-servers')).toMatchObject({ ok: false });
    expect(endpointsOf([{ typeUrl: TYPE_URLS.ecds, value: new Uint8Array() }], 'model-servers')).toMatchObject({ ok: false });
  });
});

describe('set_metadata', () => {
  it('writes a namespace that is not there; leaves one that is, unless allowed to merge (lists append, structs merge, scalars replace)', () => {
    const namespaces = new Map<string, Record<string, unknown>>();
    applySetMetadata(namespaces, [
      { metadataNamespace: 'ns', allowOverwrite: false, value: { list: ['a'], n: 1, s: { x: 1 } } },
      { metadataNamespace: 'ns', allowOverwrite: false, value: { n: 2 } },
    ]);
    expect(namespaces.get('ns')).toEqual({ list: ['a'], n: 1, s: { x: 1 } });
    applySetMetadata(namespaces, [{ metadataNamespace: 'ns', allowOverwrite: true, value: { list: ['b'], n: 2, s: { y: 2 }, k: 'new' } }]);
    expect(namespaces.get('ns')).toEqual({ list: ['a', 'b'], n: 2, s: { x: 1, y: 2 }, k: 'new' });
    applySetMetadata(namespaces, [{ metadataNamespace: 'ns', allowOverwrite: true, value: { list: 'now a string' } }]);
    expect(namespaces.get('ns')?.['list']).toBe('now a string');
  });

  it('copies the value, so a request cannot change the config; ignores typed entries', () => {
    const value = { list: ['a'] };
    const namespaces = new Map<string, Record<string, unknown>>();
    applySetMetadata(namespaces, [
      { metadataNamespace: 'ns', allowOverwrite: false, value },
      { metadataNamespace: 'typed', allowOverwrite: false, value: undefined },
    ]);
    (namespaces.get('ns')?.['list'] as string[]).push('b');
    expect(value.list).toEqual(['a']);
    expect(namespaces.has('typed')).toBe(false);
  });
});
