// The model-server cluster: its hosts (a static list from --endpoints, or EDS from spillway-xds,
// replaced whole on each update as Envoy's EDS cluster replaces its priority set) and the
// override_host policy's fallback round robin over them by priority (priority-lb.ts). A request
// keeps the table it started with; the next one sees the update.
import { EndpointTable } from './endpoints.js';
import type { EndpointConfig } from './options.js';
import { PriorityRoundRobin } from './priority-lb.js';

export class ModelServers {
  #table: EndpointTable;
  #fallback: PriorityRoundRobin;
  readonly #zone: string | undefined;
  readonly #isHealthy: (address: string) => boolean;
  #version = 0;

  /** `isHealthy`: the gateway's own view (active checks, outlier ejection); an endpoint its source calls unhealthy is unhealthy anyway. */
  constructor(endpoints: readonly EndpointConfig[], zone: string | undefined, isHealthy: (address: string) => boolean) {
    this.#zone = zone;
    this.#isHealthy = isHealthy;
    this.#table = new EndpointTable(endpoints, zone);
    this.#fallback = this.#balancer();
  }

  get table(): EndpointTable {
    return this.#table;
  }

  /** The fallback policy: round robin over the cluster's healthy hosts, priority by priority. */
  get fallback(): PriorityRoundRobin {
    return this.#fallback;
  }

  /** Updates applied so far (0: the hosts it started with). */
  get version(): number {
    return this.#version;
  }

  /** Replaces every host (an EDS update); throws a RangeError for an address that is not ip:port or listed twice. */
  replace(endpoints: readonly EndpointConfig[]): void {
    this.#table = new EndpointTable(endpoints, this.#zone);
    this.#fallback = this.#balancer();
    this.#version++;
  }

  #balancer(): PriorityRoundRobin {
    const table = this.#table;
    return new PriorityRoundRobin(
      table.priorities(),
      (address) => table.lookup(address)?.sourceHealthy === true && this.#isHealthy(address),
    );
  }
}
