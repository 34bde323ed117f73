// The development gateway as an xDS client (--xds): its model servers from spillway-xds's EDS and
// its subset hint with the gateway's zone from its ECDS, over real gRPC, with spillway-xds
// following a real nats-server; then a scripted ADS server for what spillway-xds never sends (bad
// resources: NACKed, the last good one kept) and for a server that goes away (the gateway
// reconnects with the versions it holds).
import { Server, ServerCredentials, type ServerDuplexStream } from '@grpc/grpc-js';
import { GATEWAY_ZONE_KEY, SUBSET_KEY, SUBSET_NAMESPACE } from '@spillway/protocol';
import { eventually, freePort, startNatsServer, TestPublisher, type NatsServerHandle, type PodSpec } from '@spillway/testkit';
import { loadXdsConfig, startXds, type RunningXds } from '@spillway/xds';
import {
  AggregatedDiscoveryServiceService,
  ClusterLoadAssignment,
  HealthStatus,
  SetMetadataConfig,
  TYPE_URLS,
  TypedExtensionConfig,
  type DiscoveryRequest,
  type DiscoveryResponse,
} from '@spillway/xds-protocol';
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parseGatewayArgs } from '../src/flags.js';
import { completion, fakeEpp, gateway, post, sim } from './fixtures.js';

describe('with spillway-xds: endpoints by EDS, subset and zone by ECDS', () => {
  let nats: NatsServerHandle;
  let publisher: TestPublisher;
  let xds: RunningXds;
  const pods: PodSpec[] = [];

  beforeAll(async () => {
    nats = await startNatsServer({ forcePrivate: true });
    const config = loadXdsConfig(
      [
        '--pool',
        'llama',
        '--nats',
        nats.url,
        '--host',
        '127.0.0.1',
        '--port',
        '0',
        '--health-port',
        '0',
        '--metrics-port',
        '0',
        '--push-delay-ms',
        '20',
      ],
      {},
    );
    if (config === undefined) throw new Error('unexpected --help');
    xds = await startXds(config, { logger: pino({ level: 'silent' }) });
    publisher = await TestPublisher.connect(nats.url);
  });

  afterAll(async () => {
    await publisher?.close();
    await xds?.close();
    await nats?.stop();
  });

  /** Three real model servers: two in zone-a, one in zone-b (both region r1), published as a collector would. */
  async function servers(): Promise<{ a0: string; a1: string; b0: string }> {
    const [a0, a1, b0] = [await sim(), await sim(), await sim()];
    pods.splice(
      0,
      pods.length,
      ...[
        { pod: 'a-0', zone: 'zone-a', region: 'r1', address: a0.address },
        { pod: 'a-1', zone: 'zone-a', region: 'r1', address: a1.address },
        { pod: 'b-0', zone: 'zone-b', region: 'r1', address: b0.address },
      ],
    );
    await publisher.pods(pods);
    await xds.ready;
    return { a0: a0.address, a1: a1.address, b0: b0.address };
  }

  async function nodes(): Promise<{ id: string; zone: string; types: Record<string, { acked?: string }> }[]> {
    const body = (await (await fetch(`http://127.0.0.1:${xds.metricsPort}/debug/nodes`)).json()) as {
      nodes: { id: string; zone: string; types: Record<string, { acked?: string }> }[];
    };
    return body.nodes;
  }

  it('serves requests to the model servers EDS lists, with the subset and zone ECDS configures', async () => {
    const { a0, a1, b0 } = await servers();
    const epp = await fakeEpp(() => ({ destination: a0 }));
    const gw = await gateway({ epp: epp.address, endpoints: [], zone: 'zone-a', xds: { server: `127.0.0.1:${xds.port}`, region: 'r1' } });
    // The start waited for the first EDS and ECDS answers.
    expect(
      gw
        .stats()
        .endpoints.map((e) => [e.address, e.zone])
        .sort(),
    ).toEqual(
      [
        [a0, 'zone-a'],
        [a1, 'zone-a'],
        [b0, 'zone-b'],
      ].sort(),
    );
    expect(gw.stats().xds).toMatchObject({ connected: true, nacks: 0, eds: { endpoints: 3 } });
    const res = await post(`${gw.url}/v1/completions`, completion());
    expect(res.status).toBe(200);
    await res.text();
    expect(res.headers.get('x-spillway-served-endpoint')).toBe(a0);
    expect(epp.streams[0]?.messages[0]?.metadataContext?.filterMetadata[SUBSET_NAMESPACE]).toEqual({
      [SUBSET_KEY]: [a0, a1].sort(),
      [GATEWAY_ZONE_KEY]: 'zone-a',
    });
    // spillway-xds lists the gateway as a node of zone-a that ACKed what it was sent.
    const gatewayNode = (await nodes()).find((n) => n.id === gw.options.xds?.nodeId);
    expect(gatewayNode?.zone).toBe('zone-a');
    expect(gatewayNode?.types['eds']?.acked).toBe(gw.stats().xds?.eds.version);
    expect(gatewayNode?.types['ecds']?.acked).toBe(gw.stats().xds?.ecds.version);
  });

  it('follows readiness: a pod turning unready leaves its endpoints and subset, and the fallback follows EDS priorities', async () => {
    const { a0, a1, b0 } = await servers();
    // An EPP whose list names nobody the cluster knows: the fallback round robin picks every time.
    const epp = await fakeEpp(() => ({ destination: '10.255.255.1:9' }));
    const gw = await gateway({ epp: epp.address, endpoints: [], zone: 'zone-a', xds: { server: `127.0.0.1:${xds.port}`, region: 'r1' } });
    const served = async (n: number): Promise<Set<string>> => {
      const out = new Set<string>();
      for (let i = 0; i < n; i++) {
        const res = await post(`${gw.url}/v1/completions`, completion());
        expect(res.status).toBe(200);
        await res.text();
        out.add(res.headers.get('x-spillway-served-endpoint') ?? '');
      }
      return out;
    };
    // zone-a is priority 0 for a zone-a gateway: the fallback stays there.
    expect(await served(6)).toEqual(new Set([a0, a1]));

    await publisher.pods(pods.map((p) => (p.address === a1 ? { ...p, ready: false } : p)));
    await eventually(() => expect(gw.subsetHint()).toEqual([a0]));
    expect(
      gw
        .stats()
        .endpoints.map((e) => e.address)
        .sort(),
    ).toEqual([a0, b0].sort());
    expect(await served(3)).toEqual(new Set([a0]));

    // zone-a has no ready pod: zone-b is the nearest priority left.
    await publisher.pods(pods.map((p) => (p.zone === 'zone-a' ? { ...p, ready: false } : p)));
    await eventually(() => expect(gw.stats().endpoints.map((e) => e.address)).toEqual([b0]));
    expect(gw.subsetHint()).toEqual([]);
    expect(await served(3)).toEqual(new Set([b0]));
    expect(gw.stats().xds?.nacks).toBe(0);
  });
});

/** A scripted ADS server: records each stream's requests; the test decides what to send. */
class ScriptedAds {
  readonly streams: { requests: DiscoveryRequest[]; call: ServerDuplexStream<DiscoveryRequest, DiscoveryResponse> }[] = [];
  #server: Server | undefined;
  #nonce = 0;

  constructor(readonly port: number) {}

  async start(): Promise<void> {
    const server = new Server();
    server.addService(AggregatedDiscoveryServiceService, {
      streamAggregatedResources: (call: ServerDuplexStream<DiscoveryRequest, DiscoveryResponse>) => {
        const stream = { requests: [] as DiscoveryRequest[], call };
        this.streams.push(stream);
        call.on('data', (request: DiscoveryRequest) => stream.requests.push(request));
        call.on('error', () => undefined);
      },
    });
    await new Promise<void>((resolve, reject) =>
      server.bindAsync(`127.0.0.1:${this.port}`, ServerCredentials.createInsecure(), (error) => (error ? reject(error) : resolve())),
    );
    this.#server = server;
  }

  get last(): { requests: DiscoveryRequest[]; call: ServerDuplexStream<DiscoveryRequest, DiscoveryResponse> } {
    return this.streams.at(-1) as (typeof this.streams)[number];
  }

  send(typeUrl: string, version: string, resources: { typeUrl: string; value: Uint8Array }[]): string {
    const nonce = String(++this.#nonce);
    this.last.call.write({ versionInfo: version, resources, canary: false, typeUrl, nonce, controlPlane: undefined });
    return nonce;
  }

  /** The stream's request that answers `nonce`. */
  async answerTo(nonce: string): Promise<DiscoveryRequest> {
    let found: DiscoveryRequest | undefined;
    await eventually(() => {
      found = this.last.requests.find((r) => r.responseNonce === nonce);
      expect(found).toBeDefined();
    });
    return found as DiscoveryRequest;
  }

  async stop(): Promise<void> {
    const server = this.#server;
    this.#server = undefined;
    if (server === undefined) return;
    server.forceShutdown();
  }
}

function eds(clusterName: string, endpoints: { address: string; port: number; zone: string; priority: number }[]) {
  const cla = ClusterLoadAssignment.fromPartial({
    clusterName,
    endpoints: endpoints.map((e) => ({
      locality: { zone: e.zone, region: 'r1', subZone: '' },
      priority: e.priority,
      lbEndpoints: [
        {
          healthStatus: HealthStatus.HEALTHY,
          hostIdentifier: {
            $case: 'endpoint',
            value: {
              address: {
                address: { $case: 'socketAddress', value: { address: e.address, portSpecifier: { $case: 'portValue', value: e.port } } },
              },
            },
          },
        },
      ],
    })),
  });
  return { typeUrl: TYPE_URLS.eds, value: ClusterLoadAssignment.encode(cla).finish() };
}

function ecds(name: string, subset: string[], typeUrl = 'type.googleapis.com/envoy.extensions.filters.http.set_metadata.v3.Config') {
  const config = SetMetadataConfig.encode({
    metadata: [
      { metadataNamespace: SUBSET_NAMESPACE, allowOverwrite: false, value: { [SUBSET_KEY]: subset, [GATEWAY_ZONE_KEY]: 'zone-a' } },
    ],
  }).finish();
  return { typeUrl: TYPE_URLS.ecds, value: TypedExtensionConfig.encode({ name, typedConfig: { typeUrl, value: config } }).finish() };
}

describe('against a scripted ADS server: ACK, NACK, reconnect', () => {
  it('ACKs what it takes, NACKs what it cannot use (keeping the last good), and reconnects with the versions it holds', async () => {
    const upstream = await sim();
    const port = Number(upstream.address.split(':')[1]);
    const ads = new ScriptedAds(await freePort());
    await ads.start();
    try {
      const epp = await fakeEpp(() => ({ destination: upstream.address }));
      const started = gateway({
        epp: epp.address,
        endpoints: [],
        zone: 'zone-a',
        xds: { server: `127.0.0.1:${ads.port}`, region: 'r1', nodeId: 'gw-1', initialFetchTimeoutMs: 10_000 },
      });
      // The first requests: the node (on the first only), EDS model-servers, ECDS spillway-subset-hint.
      await eventually(() => expect(ads.streams[0]?.requests.length).toBe(2));
      const [first, second] = ads.streams[0]?.requests ?? [];
      expect(first).toMatchObject({
        typeUrl: TYPE_URLS.eds,
        resourceNames: ['model-servers'],
        versionInfo: '',
        node: { id: 'gw-1', locality: { zone: 'zone-a', region: 'r1' } },
      });
      expect(second).toMatchObject({ typeUrl: TYPE_URLS.ecds, resourceNames: ['spillway-subset-hint'], node: undefined });

      const edsOk = ads.send(TYPE_URLS.eds, 'e1', [eds('model-servers', [{ address: '127.0.0.1', port, zone: 'zone-a', priority: 0 }])]);
      const ecdsOk = ads.send(TYPE_URLS.ecds, 'c1', [ecds('spillway-subset-hint', [upstream.address])]);
      expect(await ads.answerTo(edsOk)).toMatchObject({ versionInfo: 'e1', errorDetail: undefined });
      expect(await ads.answerTo(ecdsOk)).toMatchObject({ versionInfo: 'c1', errorDetail: undefined });
      const gw = await started;
      expect(gw.stats().endpoints.map((e) => e.address)).toEqual([upstream.address]);
      expect(gw.subsetHint()).toEqual([upstream.address]);

      // Each bad response is NACKed with Envoy's reason and the last accepted version.
      const bad: [string, string, { typeUrl: string; value: Uint8Array }[], RegExp][] = [
        [
          TYPE_URLS.eds,
          'e2',
          [eds('other-cluster', [{ address: '127.0.0.1', port, zone: 'zone-a', priority: 0 }])],
          /Unexpected EDS cluster \(expecting model-servers\): other-cluster/,
        ],
        [
          TYPE_URLS.eds,
          'e3',
          [eds('model-servers', [{ address: 'model-server.local', port, zone: 'zone-a', priority: 0 }])],
          /malformed IP address: model-server.local/,
        ],
        [
          TYPE_URLS.ecds,
          'c2',
          [ecds('spillway-subset-hint', [], 'type.googleapis.com/envoy.extensions.filters.http.router.v3.Router')],
          /filter config has type URL .*Router but expect .*set_metadata/,
        ],
        [TYPE_URLS.ecds, 'c3', [ecds('another-filter', [])], /Unexpected resource name in ExtensionConfigDS response: another-filter/],
        [TYPE_URLS.ecds, 'c4', [], /Unexpected number of resources in ExtensionConfigDS response: 0/],
      ];
      for (const [typeUrl, version, resources, reason] of bad) {
        const answer = await ads.answerTo(ads.send(typeUrl, version, resources));
        expect(answer.versionInfo).toBe(typeUrl === TYPE_URLS.eds ? 'e1' : 'c1');
        expect(answer.errorDetail?.message).toMatch(reason);
      }
      expect(gw.stats().xds).toMatchObject({ nacks: bad.length, eds: { version: 'e1', endpoints: 1 }, ecds: { version: 'c1' } });
      expect(gw.stats().endpoints.map((e) => e.address)).toEqual([upstream.address]);
      expect(gw.subsetHint()).toEqual([upstream.address]);
      const res = await post(`${gw.url}/v1/completions`, completion());
      expect(res.status).toBe(200);
      await res.text();

      // The server goes away and comes back: a new stream, whose first requests carry the versions held.
      await ads.stop();
      await eventually(() => expect(gw.stats().xds?.connected).toBe(false));
      const again = new ScriptedAds(ads.port);
      await again.start();
      try {
        await eventually(() => expect(again.streams[0]?.requests.length).toBe(2), 10_000);
        expect(again.streams[0]?.requests.map((r) => [r.typeUrl, r.versionInfo])).toEqual([
          [TYPE_URLS.eds, 'e1'],
          [TYPE_URLS.ecds, 'c1'],
        ]);
        // Meanwhile it kept what it had.
        expect(gw.stats().endpoints.map((e) => e.address)).toEqual([upstream.address]);
      } finally {
        await again.stop();
      }
    } finally {
      await ads.stop();
    }
  });
});

describe('--xds flags', () => {
  it('takes --xds with --zone (and --region, --node-id), not with --endpoints', () => {
    const parsed = parseGatewayArgs(['--epp', '127.0.0.1:9002', '--xds', '127.0.0.1:18000', '--zone', 'zone-a', '--region', 'r1'], {});
    expect(parsed.help === false && parsed.options.xds).toEqual({
      server: '127.0.0.1:18000',
      region: 'r1',
      nodeId: undefined,
      clusterName: 'model-servers',
    });
    expect(() => parseGatewayArgs(['--epp', '127.0.0.1:9002', '--xds', '127.0.0.1:18000'], {})).toThrow(/--zone: required with --xds/);
    expect(() =>
      parseGatewayArgs(['--epp', '127.0.0.1:9002', '--xds', '127.0.0.1:18000', '--zone', 'z', '--endpoints', 'e.yaml'], {}),
    ).toThrow(/--endpoints: not with --xds/);
    expect(() => parseGatewayArgs(['--epp', '127.0.0.1:9002', '--xds', 'nonsense', '--zone', 'z'], {})).toThrow(/--xds: must be HOST:PORT/);
    expect(() => parseGatewayArgs(['--epp', '127.0.0.1:9002'], {})).toThrow(/--endpoints: required \(or give --xds or --passthrough\)/);
  });
});
