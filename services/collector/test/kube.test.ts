import { eventually } from '@spillway/testkit';
import { pino } from 'pino';
import { afterEach, describe, expect, it } from 'vitest';
import { startCollector, type RunningCollector } from '../src/app.js';
import { parseCollectorArgs } from '../src/config.js';
import { endpointsFromSlices, endpointSliceSchema } from '../src/kube-slices.js';
import { startKubeSource } from '../src/kube-source.js';
import type { EndpointSpec } from '../src/endpoint.js';
import { endpointSlice, startFakeKube, type FakeKube } from './helpers/fake-kube.js';
import { MemorySink } from './helpers/memory-sink.js';

const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  while (cleanups.length) await cleanups.pop()?.();
});

async function kubeCollector(kube: FakeKube, extra: string[] = []): Promise<{ running: RunningCollector; sink: MemorySink }> {
  const parsed = parseCollectorArgs(
    [
      '--pool',
      'llama',
      '--zone',
      'zone-a',
      '--kube-namespace',
      'llm',
      '--kube-selector',
      'kubernetes.io/service-name=llama',
      '--kubeconfig',
      kube.kubeconfig,
      '--probe-interval-ms',
      '0',
      '--sample-interval-ms',
      '1000',
      '--scrape-timeout-ms',
      '100',
      '--metrics-port',
      '0',
      '--log-level',
      'silent',
      ...extra,
    ],
    {},
  );
  if (parsed.help) throw new Error('help');
  const sink = new MemorySink();
  const running = await startCollector(parsed.config, { sink, logger: pino({ level: 'silent' }) });
  cleanups.push(() => running.stop());
  return { running, sink };
}

describe('Kubernetes EndpointSlice source (fake API server, real list/watch shapes)', () => {
  it('follows list then watch: readiness from conditions, zone from the endpoint, tombstones on removal', async () => {
    const kube = await startFakeKube('llm');
    cleanups.push(() => kube.close());
    kube.items = [
      endpointSlice('llama-abc', '90', [
        { ip: '127.0.0.2', pod: 'vllm-0', zone: 'zone-a' },
        { ip: '127.0.0.3', pod: 'vllm-1', zone: 'zone-a', ready: false },
        { ip: '127.0.0.4', pod: 'vllm-2', zone: 'zone-b' },
      ]),
    ];
    const { sink } = await kubeCollector(kube);
    await eventually(() => {
      expect(sink.lastReadiness('vllm-0')).toMatchObject({ pool: 'llama', zone: 'zone-a', address: '127.0.0.2:8000', ready: true });
      expect(sink.lastReadiness('vllm-1')).toMatchObject({ address: '127.0.0.3:8000', ready: false });
      expect(kube.watchers()).toBe(1);
    });
    // Another zone's endpoint is that zone's collector's to publish.
    expect(sink.lastReadiness('vllm-2')).toBeUndefined();
    const list = kube.requests.find((r) => r.searchParams.get('watch') !== 'true');
    const watch = kube.requests.find((r) => r.searchParams.get('watch') === 'true');
    expect(list?.searchParams.get('labelSelector')).toBe('kubernetes.io/service-name=llama');
    expect(watch?.searchParams.get('labelSelector')).toBe('kubernetes.io/service-name=llama');
    expect(watch?.searchParams.get('resourceVersion')).toBe('100');

    // vllm-0 starts terminating (still serving): no new requests. vllm-1 becomes ready.
    kube.send({
      type: 'MODIFIED',
      object: endpointSlice('llama-abc', '101', [
        { ip: '127.0.0.2', pod: 'vllm-0', zone: 'zone-a', ready: false, serving: true, terminating: true },
        { ip: '127.0.0.3', pod: 'vllm-1', zone: 'zone-a', ready: true },
      ]),
    });
    await eventually(() => {
      expect(sink.lastReadiness('vllm-0')).toMatchObject({ ready: false });
      expect(sink.lastReadiness('vllm-1')).toMatchObject({ ready: true });
    });

    // Garbage on the stream is skipped; a new slice adds a pod (no zone: the collector's).
    kube.sendRaw('{"type":"ADDED","object":');
    kube.send({ type: 'ADDED', object: endpointSlice('llama-def', '102', [{ ip: '127.0.0.5', pod: 'vllm-3' }]) });
    await eventually(() => expect(sink.lastReadiness('vllm-3')).toMatchObject({ zone: 'zone-a', address: '127.0.0.5:8000', ready: true }));

    // A pod leaving its slice, and a deleted slice: tombstones.
    kube.send({ type: 'MODIFIED', object: endpointSlice('llama-abc', '103', [{ ip: '127.0.0.3', pod: 'vllm-1', zone: 'zone-a' }]) });
    kube.send({ type: 'DELETED', object: endpointSlice('llama-def', '104', [{ ip: '127.0.0.5', pod: 'vllm-3' }]) });
    await eventually(() => {
      expect(sink.lastReadiness('vllm-0')).toMatchObject({ ready: false, deleted: true });
      expect(sink.lastReadiness('vllm-3')).toMatchObject({ ready: false, deleted: true });
    });
    expect(sink.lastReadiness('vllm-1')).toMatchObject({ ready: true });
    expect(sink.lastReadiness('vllm-1')?.deleted).toBeUndefined();

    // The API server ends the watch: the client watches again from the last resourceVersion.
    const before = kube.requests.length;
    kube.closeWatches();
    await eventually(() => {
      const again = kube.requests.slice(before).find((r) => r.searchParams.get('watch') === 'true');
      expect(again?.searchParams.get('resourceVersion')).toBe('104');
      expect(kube.watchers()).toBe(1);
    });
    kube.send({ type: 'ADDED', object: endpointSlice('llama-ghi', '105', [{ ip: '127.0.0.6', pod: 'vllm-4', zone: 'zone-a' }]) });
    await eventually(() => expect(sink.lastReadiness('vllm-4')).toMatchObject({ ready: true }));
  });

  it('--kube-all-zones publishes every zone; a named port is used; unusable slices are skipped', async () => {
    const kube = await startFakeKube('llm');
    cleanups.push(() => kube.close());
    const ports = [
      { name: 'metrics', port: 9100, protocol: 'TCP' },
      { name: 'http', port: 8000, protocol: 'TCP' },
    ];
    kube.items = [
      endpointSlice(
        'two-ports',
        '1',
        [
          { ip: '127.0.0.2', pod: 'a', zone: 'zone-a' },
          { ip: '127.0.0.3', pod: 'b', zone: 'zone-b' },
        ],
        ports,
      ),
      endpointSlice('fqdn', '2', [{ ip: 'model.example.com', pod: 'c' }], ports, 'FQDN'),
      endpointSlice('v6', '3', [{ ip: 'fd00::1', pod: 'd', zone: 'zone-c' }], ports, 'IPv6'),
    ];
    const { sink } = await kubeCollector(kube, ['--kube-all-zones', '--kube-port', 'http']);
    await eventually(() => {
      expect(sink.lastReadiness('a')).toMatchObject({ zone: 'zone-a', address: '127.0.0.2:8000' });
      expect(sink.lastReadiness('b')).toMatchObject({ zone: 'zone-b', address: '127.0.0.3:8000' });
      expect(sink.lastReadiness('d')).toMatchObject({ zone: 'zone-c', address: '[fd00::1]:8000' });
    });
    expect(sink.lastReadiness('c')).toBeUndefined();
  });

  it('an API server error is reported and the watch restarts', async () => {
    const kube = await startFakeKube('llm');
    cleanups.push(() => kube.close());
    kube.items = [endpointSlice('s', '7', [{ ip: '127.0.0.2', pod: 'p', zone: 'zone-a' }])];
    kube.failLists = 2;
    const errors: Error[] = [];
    let latest: EndpointSpec[] = [];
    const source = await startKubeSource(
      {
        namespace: 'llm',
        labelSelector: undefined,
        kubeconfig: kube.kubeconfig,
        zone: 'zone-a',
        region: undefined,
        portName: undefined,
        allZones: false,
        restartDelayMs: 20,
      },
      pino({ level: 'silent' }),
      (endpoints) => (latest = endpoints),
      (error) => errors.push(error),
    );
    cleanups.push(() => source.stop());
    await eventually(() => {
      expect(errors.length).toBe(2);
      expect(latest).toMatchObject([{ pod: 'p', address: '127.0.0.2:8000', sourceReady: true }]);
      expect(kube.watchers()).toBe(1);
    });
  });

  it('the slice mapping: multi-port slices need --kube-port, a pod in two slices is ready if either says so', () => {
    const parse = (s: unknown) => endpointSliceSchema.parse(s);
    const mapping = { zone: 'zone-a', region: undefined, portName: undefined, allZones: false };
    const twoPorts = parse(
      endpointSlice(
        'x',
        '1',
        [{ ip: '10.0.0.1', pod: 'p' }],
        [
          { name: 'a', port: 1, protocol: 'TCP' },
          { name: 'b', port: 2, protocol: 'TCP' },
        ],
      ),
    );
    const { endpoints, problems } = endpointsFromSlices([twoPorts], mapping);
    expect(endpoints).toEqual([]);
    expect(problems[0]?.message).toMatch(/exactly one port/);
    const old = parse(endpointSlice('s1', '1', [{ ip: '10.0.0.1', pod: 'p', ready: false }]));
    const moved = parse(endpointSlice('s2', '1', [{ ip: '10.0.0.1', pod: 'p', ready: true }]));
    expect(endpointsFromSlices([old, moved], mapping).endpoints).toMatchObject([{ pod: 'p', sourceReady: true }]);
    // `ready` absent means ready (the API's nil); no targetRef: named after the slice and address.
    const bare = parse({ metadata: { name: 's3' }, addressType: 'IPv4', ports: [{ port: 80 }], endpoints: [{ addresses: ['10.0.0.9'] }] });
    expect(endpointsFromSlices([bare], mapping).endpoints).toMatchObject([
      { pod: 's3-10.0.0.9:80', address: '10.0.0.9:80', sourceReady: true, zone: 'zone-a' },
    ]);
    expect(endpointSliceSchema.safeParse({ metadata: { name: 'x' }, addressType: 'IPv4', endpoints: [{ addresses: [] }] }).success).toBe(
      false,
    );
  });
});
