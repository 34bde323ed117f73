// The gateway's own view of endpoint health, which decides its subset hint: active HTTP checks
// (Envoy's health_checks) plus passive ejection after failed requests (Envoy's outlier_detection).
// It never blocks forwarding: like override_host, the walk tries whatever the EPP returned.
import { Agent, request } from 'undici';
import type { Logger } from 'pino';
import type { EndpointTable, KnownEndpoint } from './endpoints.js';

/** Where the health view finds the cluster's hosts now (they change with EDS). */
export interface HostSource {
  readonly table: EndpointTable;
}

export interface HealthOptions {
  /** 0 disables active checks: endpoints are healthy unless ejected. */
  readonly intervalMs: number;
  readonly timeoutMs: number;
  readonly path: string;
  readonly unhealthyThreshold: number;
  /** Consecutive failed requests that eject an endpoint; 0 disables outlier detection. */
  readonly outlierFailures: number;
  readonly outlierEjectionMs: number;
}

interface State {
  checkFailures: number;
  activeHealthy: boolean;
  requestFailures: number;
  ejectedUntil: number;
}

export interface EndpointHealth {
  readonly address: string;
  readonly zone: string | undefined;
  readonly local: boolean;
  readonly healthy: boolean;
  readonly activeHealthy: boolean;
  readonly ejected: boolean;
}

export class HealthView {
  readonly #hosts: HostSource;
  readonly #options: HealthOptions;
  readonly #logger: Logger;
  readonly #now: () => number;
  readonly #states = new Map<string, State>();
  // Checks get their own connections, as Envoy's do, so a check never waits behind traffic.
  readonly #agent = new Agent({ keepAliveTimeout: 10_000 });
  #timer: NodeJS.Timeout | undefined;
  #stopped = false;
  #round: Promise<void> | undefined;

  constructor(hosts: HostSource, options: HealthOptions, logger: Logger, now: () => number = Date.now) {
    this.#hosts = hosts;
    this.#options = options;
    this.#logger = logger;
    this.#now = now;
  }

  /**
   * A host's state, made on first sight: optimistic (like a freshly configured static cluster),
   * until its first check says otherwise.
   */
  #stateOf(address: string): State | undefined {
    let state = this.#states.get(address);
    if (state === undefined && this.#hosts.table.lookup(address) !== undefined) {
      state = { checkFailures: 0, activeHealthy: true, requestFailures: 0, ejectedUntil: 0 };
      this.#states.set(address, state);
    }
    return state;
  }

  /** Runs the first round of checks (so the first hint reflects them), then keeps checking. */
  async start(): Promise<void> {
    if (this.#options.intervalMs <= 0) return;
    await this.#checkAll();
    this.#schedule();
  }

  async stop(): Promise<void> {
    this.#stopped = true;
    clearTimeout(this.#timer);
    await this.#round;
    await this.#agent.close();
  }

  isHealthy(address: string): boolean {
    const state = this.#stateOf(address);
    return state !== undefined && state.activeHealthy && state.ejectedUntil <= this.#now();
  }

  /** Healthy endpoints of the gateway's zone, in configuration order: the subset hint. */
  healthyLocal(): string[] {
    return this.#hosts.table.all.filter((e) => e.local && e.sourceHealthy && this.isHealthy(e.address)).map((e) => e.address);
  }

  /** A request to the endpoint got a response that was not a 5xx. */
  reportSuccess(address: string): void {
    const state = this.#stateOf(address);
    if (state !== undefined) state.requestFailures = 0;
  }

  /** A request to the endpoint failed (connect failure, reset, timeout or 5xx). */
  reportFailure(address: string): void {
    const state = this.#stateOf(address);
    if (state === undefined || this.#options.outlierFailures <= 0) return;
    state.requestFailures++;
    if (state.requestFailures >= this.#options.outlierFailures) {
      state.requestFailures = 0;
      state.ejectedUntil = this.#now() + this.#options.outlierEjectionMs;
      this.#logger.warn({ endpoint: address, ejectionMs: this.#options.outlierEjectionMs }, 'endpoint ejected after failed requests');
    }
  }

  snapshot(): EndpointHealth[] {
    const now = this.#now();
    return this.#hosts.table.all.map((e) => {
      const state = this.#stateOf(e.address);
      const ejected = state !== undefined && state.ejectedUntil > now;
      const activeHealthy = state?.activeHealthy ?? false;
      return {
        address: e.address,
        zone: e.zone,
        local: e.local,
        healthy: e.sourceHealthy && activeHealthy && !ejected,
        activeHealthy,
        ejected,
      };
    });
  }

  #schedule(): void {
    if (this.#stopped) return;
    this.#timer = setTimeout(() => {
      void this.#checkAll().finally(() => this.#schedule());
    }, this.#options.intervalMs);
    this.#timer.unref();
  }

  #checkAll(): Promise<void> {
    const table = this.#hosts.table;
    // Hosts that left the cluster (EDS) leave the view.
    for (const address of [...this.#states.keys()]) if (table.lookup(address) === undefined) this.#states.delete(address);
    this.#round = Promise.all(table.all.map((e) => this.#check(e))).then(() => undefined);
    return this.#round;
  }

  async #check(endpoint: KnownEndpoint): Promise<void> {
    const ok = await this.#probe(endpoint.address);
    if (this.#stopped) return;
    const state = this.#stateOf(endpoint.address);
    if (state === undefined) return;
    if (ok) {
      state.checkFailures = 0;
      if (!state.activeHealthy) this.#logger.info({ endpoint: endpoint.address }, 'endpoint healthy again');
      state.activeHealthy = true;
      return;
    }
    state.checkFailures++;
    if (state.activeHealthy && state.checkFailures >= this.#options.unhealthyThreshold) {
      state.activeHealthy = false;
      this.#logger.warn({ endpoint: endpoint.address, failures: state.checkFailures }, 'endpoint failed its health checks');
    }
  }

  async #probe(address: string): Promise<boolean> {
    try {
      const response = await request(`http://${address}${this.#options.path}`, {
        dispatcher: this.#agent,
        signal: AbortSignal.timeout(this.#options.timeoutMs),
      });
      await response.body.dump();
      return response.statusCode >= 200 && response.statusCode < 300;
    } catch {
      return false;
    }
  }
}
