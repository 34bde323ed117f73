// One EPP host's health as the shipped Envoy config checks it (infra/envoy: cluster spillway_epp):
// gRPC health checks on envoy.service.ext_proc.v3.ExternalProcessor every 2 s, 1 s timeout,
// unhealthy after 2 failures, healthy after 1 success. Whether a new ext_proc stream can start at
// all depends on it (epp-cluster.ts): with no usable host, Envoy's gRPC client fails the stream
// while it starts ("no healthy upstream"), before any request body has reached the filter.
import {
  makeGenericClientConstructor,
  Metadata,
  type CallOptions,
  type ChannelCredentials,
  type Client,
  type ClientOptions,
  type ServiceError,
} from '@grpc/grpc-js';
import { EXT_PROC_SERVICE_NAME, HealthService, ServingStatus, type HealthCheckRequest, type HealthCheckResponse } from '@spillway/protocol';
import type { Logger } from 'pino';
import { eppChannel } from './epp-client.js';
import type { EppTlsOptions } from './options.js';

export interface EppHealthOptions {
  /** 0 disables checks: the EPP counts as healthy. */
  readonly intervalMs: number;
  readonly timeoutMs: number;
  readonly unhealthyThreshold: number;
  readonly healthyThreshold: number;
  /** healthy_panic_threshold of the EPP cluster (percent). */
  readonly panicThreshold: number;
}

/** A grpc.health.v1 client made from @spillway/protocol's service definition (the pure package builds no client). */
interface HealthClient extends Client {
  check(
    request: HealthCheckRequest,
    metadata: Metadata,
    options: Partial<CallOptions>,
    callback: (error: ServiceError | null, response: HealthCheckResponse) => void,
  ): void;
}
const HealthClient = makeGenericClientConstructor(HealthService, 'grpc.health.v1.Health') as unknown as new (
  address: string,
  credentials: ChannelCredentials,
  options?: Partial<ClientOptions>,
) => HealthClient;

export class EppHealth {
  readonly #client: HealthClient;
  readonly #options: EppHealthOptions;
  readonly #logger: Logger;
  #healthy = true;
  #failures = 0;
  #successes = 0;
  #timer: NodeJS.Timeout | undefined;
  #stopped = false;
  #round: Promise<void> | undefined;

  constructor(address: string, tls: EppTlsOptions | undefined, options: EppHealthOptions, logger: Logger) {
    const channel = eppChannel(tls);
    // Its own connection, as Envoy's health checker has: grpc-js would otherwise share the ext_proc
    // channel's connection, and a failed check would put ext_proc calls into its reconnect back-off.
    this.#client = new HealthClient(address, channel.credentials, { ...channel.options, 'grpc.use_local_subchannel_pool': 1 });
    this.#options = options;
    this.#logger = logger;
  }

  get healthy(): boolean {
    return this.#healthy;
  }

  /** Runs a first check (so a gateway started next to a dead EPP knows soon), then keeps checking. */
  async start(): Promise<void> {
    if (this.#options.intervalMs <= 0) return;
    await this.#checkOnce();
    this.#schedule();
  }

  async stop(): Promise<void> {
    this.#stopped = true;
    clearTimeout(this.#timer);
    await this.#round;
    this.#client.close();
  }

  #schedule(): void {
    if (this.#stopped) return;
    this.#timer = setTimeout(() => {
      void this.#checkOnce().finally(() => this.#schedule());
    }, this.#options.intervalMs);
    this.#timer.unref();
  }

  #checkOnce(): Promise<void> {
    this.#round = this.#probe().then((ok) => this.#record(ok));
    return this.#round;
  }

  #probe(): Promise<boolean> {
    return new Promise((resolve) => {
      this.#client.check(
        { service: EXT_PROC_SERVICE_NAME },
        new Metadata(),
        { deadline: new Date(Date.now() + this.#options.timeoutMs) },
        (error, response) => resolve(error === null && response.status === ServingStatus.SERVING),
      );
    });
  }

  #record(ok: boolean): void {
    if (this.#stopped) return;
    if (ok) {
      this.#failures = 0;
      this.#successes++;
      if (!this.#healthy && this.#successes >= this.#options.healthyThreshold) {
        this.#healthy = true;
        this.#logger.info('endpoint picker healthy again');
      }
      return;
    }
    this.#successes = 0;
    this.#failures++;
    if (this.#healthy && this.#failures >= this.#options.unhealthyThreshold) {
      this.#healthy = false;
      this.#logger.warn({ failures: this.#failures }, 'endpoint picker failed its health checks');
    }
  }
}
