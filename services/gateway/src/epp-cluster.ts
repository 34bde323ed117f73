// The EPP "cluster" as the shipped Envoy config defines it (infra/envoy: cluster spillway_epp, a
// STRICT_DNS cluster listing this zone's EPP Service at priority 0 and the other zones' at lower
// priorities, by distance): its hosts are the --epp addresses (priority 0) and the --epp-fallback
// groups (priorities 1, 2, ...), each with its own gRPC health checks and its own connection. A new
// ext_proc stream goes to a priority by Envoy's priority load (a level takes over what the levels
// before it cannot carry, with the overprovisioning factor 1.4 and the panic threshold), then to
// the next host of that level by round robin (priority-lb.ts, which names Envoy's functions). So a
// zone whose EPPs all fail their checks (restarting, draining) has its new streams answered by
// another zone's EPPs, which pick for this gateway's zone from the metadata it sends.
import type { Client } from '@grpc/grpc-js';
import type { Logger } from 'pino';
import { createEppClient } from './epp-client.js';
import { EppHealth, type EppHealthOptions } from './epp-health.js';
import type { EppTlsOptions } from './options.js';
import { PriorityRoundRobin } from './priority-lb.js';

interface EppHost {
  readonly address: string;
  readonly priority: number;
  /** The ext_proc channel: one HTTP/2 connection shared by all streams, as Envoy's connection pool keeps one. */
  readonly client: Client;
  readonly health: EppHealth;
  /** ext_proc streams started on this host. */
  streams: number;
}

/** One EPP host as the gateway's stats show it. */
export interface EppHostState {
  readonly address: string;
  readonly priority: number;
  readonly healthy: boolean;
  readonly streams: number;
}

export class EppCluster {
  readonly #hosts: Map<string, EppHost>;
  readonly #balancer: PriorityRoundRobin;

  /** `priorities[p]`: the hosts of priority p (0 first); an address appears once. */
  constructor(priorities: readonly (readonly string[])[], tls: EppTlsOptions | undefined, health: EppHealthOptions, logger: Logger) {
    const count = priorities.reduce((sum, hosts) => sum + hosts.length, 0);
    this.#hosts = new Map(
      priorities.flatMap((hosts, priority) =>
        hosts.map((address): [string, EppHost] => [
          address,
          {
            address,
            priority,
            client: createEppClient(address, tls),
            health: new EppHealth(address, tls, health, count > 1 ? logger.child({ epp: address, priority }) : logger),
            streams: 0,
          },
        ]),
      ),
    );
    this.#balancer = new PriorityRoundRobin(priorities, (address) => this.#hosts.get(address)?.health.healthy === true, {
      panicThreshold: health.panicThreshold,
    });
  }

  /** The host a new ext_proc stream goes to; undefined is Envoy's "no healthy upstream". */
  pick(): Client | undefined {
    const address = this.#balancer.pick();
    const host = address === undefined ? undefined : this.#hosts.get(address);
    if (host === undefined) return undefined;
    host.streams++;
    return host.client;
  }

  /** Whether any host passes its health checks. */
  get healthy(): boolean {
    for (const host of this.#hosts.values()) if (host.health.healthy) return true;
    return false;
  }

  hosts(): EppHostState[] {
    return [...this.#hosts.values()].map((host) => ({
      address: host.address,
      priority: host.priority,
      healthy: host.health.healthy,
      streams: host.streams,
    }));
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
