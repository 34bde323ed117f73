/**
 * A minimal state-of-the-world ADS client, as Envoy behaves on the wire (envoyproxy/envoy:
 * source/extensions/config_subscription/grpc/grpc_mux_impl.cc): the first request of each type
 * carries the node and the names, every response is answered with its nonce — an ACK carrying its
 * version, or a NACK carrying the last accepted version and an error_detail. It keeps the last
 * response of each type and counts them; the tests and the benchmark stand in for gateways with it,
 * and the development gateway takes its endpoints and subset through it (one client per stream).
 */
import { credentials, type ClientDuplexStream, type ServiceError } from '@grpc/grpc-js';
import { AggregatedDiscoveryServiceClient } from './gen/envoy/service/discovery/v3/ads.js';
import type { DiscoveryRequest, DiscoveryResponse } from './gen/envoy/service/discovery/v3/discovery.js';

export interface AdsClientOptions {
  node: { id: string; zone: string; region?: string; cluster?: string };
  subscriptions: readonly { typeUrl: string; names: readonly string[] }[];
  /** Returns an error message to NACK the response, undefined to ACK it. */
  reject?: (response: DiscoveryResponse) => string | undefined;
  /** Called for every response, before it is answered. */
  onResponse?: (response: DiscoveryResponse) => void;
  /** Own connection per client (as separate Envoys have), rather than grpc-js's shared one. Default true. */
  ownConnection?: boolean;
  /**
   * The versions this node already holds, by type URL: a new stream's first requests carry them,
   * as Envoy's do after a reconnect (GrpcMuxImpl keeps each type's last accepted version_info).
   */
  initialVersions?: ReadonlyMap<string, string>;
}

export interface AdsClientEnd {
  code: number;
  details: string;
}

export class AdsClient {
  private readonly client: InstanceType<typeof AggregatedDiscoveryServiceClient>;
  private readonly stream: ClientDuplexStream<DiscoveryRequest, DiscoveryResponse>;
  private readonly latestByType = new Map<string, DiscoveryResponse>();
  private readonly counts = new Map<string, number>();
  private readonly accepted = new Map<string, string>();
  /** Resolves when the server ends the stream (status and message); never rejects. */
  readonly ended: Promise<AdsClientEnd>;

  constructor(address: string, options: AdsClientOptions) {
    this.client = new AggregatedDiscoveryServiceClient(
      address,
      credentials.createInsecure(),
      options.ownConnection === false ? {} : { 'grpc.use_local_subchannel_pool': 1 },
    );
    this.stream = this.client.streamAggregatedResources();
    this.ended = new Promise((resolve) => {
      this.stream.on('error', (error: ServiceError) => resolve({ code: error.code, details: error.details }));
      this.stream.on('end', () => resolve({ code: 0, details: '' }));
    });
    const names = new Map(options.subscriptions.map((s) => [s.typeUrl, [...s.names]]));
    this.stream.on('data', (response: DiscoveryResponse) => {
      this.latestByType.set(response.typeUrl, response);
      this.counts.set(response.typeUrl, (this.counts.get(response.typeUrl) ?? 0) + 1);
      options.onResponse?.(response);
      const error = options.reject?.(response);
      if (error === undefined) this.accepted.set(response.typeUrl, response.versionInfo);
      this.write({
        versionInfo: this.accepted.get(response.typeUrl) ?? '',
        node: undefined,
        resourceNames: names.get(response.typeUrl) ?? [],
        typeUrl: response.typeUrl,
        responseNonce: response.nonce,
        errorDetail: error === undefined ? undefined : { code: 3, message: error, details: [] },
      });
    });
    const node = {
      id: options.node.id,
      cluster: options.node.cluster ?? 'spillway-gateway',
      locality: { region: options.node.region ?? '', zone: options.node.zone, subZone: '' },
      userAgentName: 'spillway-ads-client',
      userAgentVersionType: undefined,
    };
    for (const [typeUrl, version] of options.initialVersions ?? []) this.accepted.set(typeUrl, version);
    options.subscriptions.forEach((s, i) =>
      this.write({
        versionInfo: this.accepted.get(s.typeUrl) ?? '',
        // Like Envoy with set_node_on_first_message_only: the node on the stream's first request only.
        node: i === 0 ? node : undefined,
        resourceNames: [...s.names],
        typeUrl: s.typeUrl,
        responseNonce: '',
        errorDetail: undefined,
      }),
    );
  }

  latest(typeUrl: string): DiscoveryResponse | undefined {
    return this.latestByType.get(typeUrl);
  }

  /** Responses received of a type. */
  count(typeUrl: string): number {
    return this.counts.get(typeUrl) ?? 0;
  }

  /** The last version this client accepted (ACKed) of a type. */
  acceptedVersion(typeUrl: string): string | undefined {
    return this.accepted.get(typeUrl);
  }

  close(): void {
    this.stream.cancel();
    this.client.close();
  }

  private write(request: DiscoveryRequest): void {
    if (this.stream.writable) this.stream.write(request);
  }
}
