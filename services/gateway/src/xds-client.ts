// The development gateway as an xDS client, as the shipped Envoy bootstrap makes Envoy one
// (infra/envoy: dynamic_resources.ads_config, the model-server cluster `type: EDS`, the subset
// filter by `config_discovery`): one state-of-the-world ADS stream to spillway-xds, subscribed to
// EDS (the model servers) and ECDS (the subset filter's set_metadata config: the zone-local subset
// and the gateway's zone). Each response is checked (xds-resources.ts) and ACKed when good; a bad
// one is NACKed with the reason and the last good resource stays in force. A stream that ends is
// opened again after a jittered exponential back-off (500 ms base, 30 s at most, as Envoy's ADS
// stream: source/extensions/config_subscription/grpc/grpc_stream.h), carrying the versions held;
// through an outage the gateway keeps what it has.
import { AdsClient, TYPE_URLS, type DiscoveryResponse } from '@spillway/xds-protocol';
import type { Logger } from 'pino';
import { jitteredBackOffMs } from './retry-policy.js';
import type { SetMetadataEntry } from './set-metadata.js';
import { endpointsOf, setMetadataOf, type EdsEndpoint } from './xds-resources.js';

/** ADS stream retry back-off (grpc_stream.h RetryInitialDelayMs, RetryMaxDelayMs). */
const RETRY_BASE_MS = 500;
const RETRY_MAX_MS = 30_000;

export interface XdsClientOptions {
  /** spillway-xds's ADS address, `host:port`. */
  readonly server: string;
  readonly node: { readonly id: string; readonly zone: string; readonly region?: string | undefined };
  /** The EDS resource (the model-server cluster's service_name). */
  readonly clusterName: string;
  /** The ECDS resource: the subset filter's name. */
  readonly filterName: string;
  readonly logger: Logger;
  readonly random?: () => number;
}

/** What the xDS client has taken in, for the stats. */
export interface XdsState {
  readonly server: string;
  readonly connected: boolean;
  readonly eds: { readonly version: string | undefined; readonly endpoints: number };
  readonly ecds: { readonly version: string | undefined };
  readonly acks: number;
  readonly nacks: number;
  readonly streams: number;
  readonly lastNack: string | undefined;
}

export interface XdsListener {
  endpoints(endpoints: readonly EdsEndpoint[]): void;
  subsetFilter(entries: readonly SetMetadataEntry[]): void;
}

export class GatewayXdsClient {
  readonly #options: XdsClientOptions;
  readonly #listener: XdsListener;
  readonly #random: () => number;
  readonly #versions = new Map<string, string>();
  #client: AdsClient | undefined;
  #connected = false;
  #streams = 0;
  #failures = 0;
  #acks = 0;
  #nacks = 0;
  #lastNack: string | undefined;
  #endpointCount = 0;
  #timer: NodeJS.Timeout | undefined;
  #stopped = false;
  readonly #first = { eds: false, ecds: false };
  #firstWaiters: (() => void)[] = [];

  constructor(options: XdsClientOptions, listener: XdsListener) {
    this.#options = options;
    this.#listener = listener;
    this.#random = options.random ?? Math.random;
  }

  start(): void {
    this.#open();
  }

  /** Resolves once both EDS and ECDS were accepted once, or after `timeoutMs` (Envoy's initial_fetch_timeout); true if they were. */
  async initialFetch(timeoutMs: number): Promise<boolean> {
    if (this.#first.eds && this.#first.ecds) return true;
    let timer: NodeJS.Timeout | undefined;
    const fetched = await Promise.race([
      new Promise<boolean>((resolve) => this.#firstWaiters.push(() => resolve(true))),
      new Promise<boolean>((resolve) => (timer = setTimeout(() => resolve(false), timeoutMs))),
    ]);
    clearTimeout(timer);
    return fetched;
  }

  state(): XdsState {
    return {
      server: this.#options.server,
      connected: this.#connected,
      eds: { version: this.#versions.get(TYPE_URLS.eds), endpoints: this.#endpointCount },
      ecds: { version: this.#versions.get(TYPE_URLS.ecds) },
      acks: this.#acks,
      nacks: this.#nacks,
      streams: this.#streams,
      lastNack: this.#lastNack,
    };
  }

  stop(): void {
    this.#stopped = true;
    clearTimeout(this.#timer);
    this.#client?.close();
    this.#client = undefined;
  }

  #open(): void {
    if (this.#stopped) return;
    const { server, node, clusterName, filterName, logger } = this.#options;
    this.#streams++;
    const client = new AdsClient(server, {
      node: { id: node.id, zone: node.zone, region: node.region, cluster: 'spillway-gateway' },
      subscriptions: [
        { typeUrl: TYPE_URLS.eds, names: [clusterName] },
        { typeUrl: TYPE_URLS.ecds, names: [filterName] },
      ],
      initialVersions: this.#versions,
      reject: (response) => this.#judge(response),
    });
    this.#client = client;
    void client.ended.then((end) => {
      if (this.#client !== client) return;
      this.#connected = false;
      client.close();
      if (this.#stopped) return;
      this.#failures++;
      const delay = jitteredBackOffMs(this.#failures, RETRY_BASE_MS, RETRY_MAX_MS, this.#random);
      logger.warn({ server, code: end.code, details: end.details, retryInMs: delay }, 'xDS stream ended; reconnecting');
      this.#timer = setTimeout(() => this.#open(), delay);
      this.#timer.unref();
    });
  }

  /** Checks and applies one response; the error message NACKs it, undefined ACKs it. */
  #judge(response: DiscoveryResponse): string | undefined {
    this.#connected = true;
    this.#failures = 0;
    let error: string | undefined;
    try {
      error = this.#apply(response);
    } catch (thrown) {
      // Whatever the cluster or the filter could not take is a bad config, never a crash.
      error = (thrown as Error).message;
    }
    if (error === undefined) {
      this.#acks++;
      this.#versions.set(response.typeUrl, response.versionInfo);
    } else {
      this.#nacks++;
      this.#lastNack = error;
      this.#options.logger.warn(
        { type: response.typeUrl, version: response.versionInfo, error },
        'xDS response rejected (NACK); keeping the last good one',
      );
    }
    return error;
  }

  #apply(response: DiscoveryResponse): string | undefined {
    const { clusterName, filterName, logger } = this.#options;
    if (response.typeUrl === TYPE_URLS.eds) {
      const checked = endpointsOf(response.resources, clusterName);
      if (!checked.ok) return checked.error;
      if (checked.value !== undefined) {
        this.#endpointCount = checked.value.length;
        this.#listener.endpoints(checked.value);
        logger.info({ version: response.versionInfo, endpoints: checked.value.length }, 'model servers from EDS');
      }
      this.#firstFetched('eds');
      return undefined;
    }
    if (response.typeUrl === TYPE_URLS.ecds) {
      const checked = setMetadataOf(response.resources, filterName);
      if (!checked.ok) return checked.error;
      this.#listener.subsetFilter(checked.value);
      logger.info({ version: response.versionInfo }, 'subset filter config from ECDS');
      this.#firstFetched('ecds');
      return undefined;
    }
    return `unexpected type URL ${response.typeUrl}: subscribed to EDS and ECDS only`;
  }

  #firstFetched(kind: 'eds' | 'ecds'): void {
    this.#first[kind] = true;
    if (!this.#first.eds || !this.#first.ecds) return;
    for (const wake of this.#firstWaiters.splice(0)) wake();
  }
}
