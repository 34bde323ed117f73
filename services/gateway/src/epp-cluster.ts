// The EPP "cluster" as the shipped Envoy config defines it (infra/envoy: cluster spillway_epp, a
// STRICT_DNS cluster whose per-zone name resolves to each of that zone's EPPs): its hosts are the
// --epp addresses, one locality and one priority, each with its own gRPC health checks and its own
// connection; a new ext_proc stream goes to the next host by round robin over the healthy ones, or
// over all of them when fewer than the panic threshold are healthy (Envoy's RoundRobinLoadBalancer,
// source/extensions/load_balancing_policies/round_robin/round_robin_lb.h, unweighted; the panic
// rule of LoadBalancerBase in source/extensions/load_balancing_policies/common/load_balancer_impl.cc).
// Failing over across priorities (other zones' EPPs) is not modelled here.
import type { Client } from '@grpc/grpc-js';
import type { Logger } from 'pino';
import { createEppClient } from './epp-client.js';
import { EppHealth, type EppHealthOptions } from './epp-health.js';
import type { EppTlsOptions } from './options.js';
import { RoundRobin } from './override-host.js';

interface EppHost {
  readonly address: string;
  /** The ext_proc channel: one HTTP/2 connection shared by all streams, as Envoy's connection pool keeps one. */
  readonly client: Client;
  readonly health: EppHealth;
}

/** One EPP host as the gateway's stats show it. */
export interface EppHostState {
  readonly address: string;
  readonly healthy: boolean;
}

export class EppCluster {
  readonly #hosts: Map<string, EppHost>;
  readonly #balancer: RoundRobin;

  constructor(addresses: readonly string[], tls: EppTlsOptions | undefined, health: EppHealthOptions, logger: Logger) {
    this.#hosts = new Map(
      addresses.map((address) => [
        address,
        {
          address,
          client: createEppClient(address, tls),
          health: new EppHealth(address, tls, health, addresses.length > 1 ? logger.child({ epp: address }) : logger),
        },
      ]),
    );
    // Round robin starts at a random host, as Envoy's does, so gateways do not move in step.
    this.#balancer = new RoundRobin(
      addresses,
      (address) => this.#hosts.get(address)?.health.healthy === true,
      Math.floor(Math.random() * addresses.length),
      health.panicThreshold,
    );
  }

  /** The host a new ext_proc stream goes to; undefined is Envoy's "no healthy upstream". */
  pick(): Client | undefined {
    const address = this.#balancer.pick();
    return address === undefined ? undefined : this.#hosts.get(address)?.client;
  }

  /** Whether any host passes its health checks. */
  get healthy(): boolean {
    for (const host of this.#hosts.values()) if (host.health.healthy) return true;
    return false;
  }

  hosts(): EppHostState[] {
    return [...this.#hosts.values()].map((host) => ({ address: host.address, healthy: host.health.healthy }));
  }

  /** A first health check of every host (so a gateway started next to a dead EPP knows soon), then checks go on. */
  async start(): Promise<void> {
    await Promise.all([...this.#hosts.values()].map((host) => host.health.start()));
  }

  async stop(): Promise<void> {
    await Promise.all([...this.#hosts.values()].map((host) => host.health.stop()));
    for (const host of this.#hosts.values()) host.client.close();
  }
}
