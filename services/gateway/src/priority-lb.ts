// Host selection over priorities, as Envoy's round-robin load balancer does it for a cluster whose
// hosts come in priority levels (the shipped config's EPP cluster: this zone's EPPs at priority 0,
// the other zones' below; with --xds also the model-server cluster's fallback policy, whose EDS
// localities have priorities by distance). Rule by rule, from envoyproxy/envoy
// source/extensions/load_balancing_policies/common/load_balancer_impl.cc (LoadBalancerBase and
// ZoneAwareLoadBalancerBase) and round_robin/round_robin_lb.h (RoundRobinLoadBalancer). Pure: the
// health and the random numbers are handed in. No degraded hosts (health checks here say healthy
// or not), equal weights, no locality-weighted or zone-aware routing inside a priority.

/** The cluster's default overprovisioning factor (ClusterLoadAssignment.Policy.overprovisioning_factor), in percent. */
export const DEFAULT_OVERPROVISIONING_FACTOR = 140;
/** Default healthy_panic_threshold of an Envoy cluster (percent). */
export const DEFAULT_PANIC_THRESHOLD = 50;

/** One priority level: how many hosts it has, and how many of them are healthy. */
export interface LevelHealth {
  readonly hosts: number;
  readonly healthy: number;
}

/** What the load balancer derives from the levels' health. */
export interface PriorityLoads {
  /** Percent of new picks per priority (sums to 100). */
  readonly load: readonly number[];
  /** Per priority: in panic, so its picks go to all its hosts, healthy or not. */
  readonly panic: readonly boolean[];
}

/**
 * Each priority's share of the picks and its panic state.
 *
 * - A level's health is healthy ÷ hosts × the overprovisioning factor, in whole percent, capped at
 *   100 (`recalculatePerPriorityState`): with 1.4, a level of which 72 % or more are healthy is
 *   still fully available. The normalized total availability is the sum, capped at 100
 *   (`calculateNormalizedTotalAvailability`).
 * - Load goes to the levels in priority order, each taking up to its health scaled by the total
 *   availability, until 100 is handed out; what rounding leaves goes to the first level with any
 *   health (`distributeLoad`). So priority 0 takes everything while it is available, and a level
 *   takes over what the ones before it cannot carry.
 * - Panic (`recalculatePerPriorityPanic`, `isHostSetInPanic`): never while the total availability
 *   is 100; otherwise a level whose healthy share is below the panic threshold is in panic. When
 *   every level is (total panic, `recalculateLoadInTotalPanic`), the load follows the host counts,
 *   whatever their health. With the threshold at 0 and nothing healthy, priority 0 gets the load
 *   and, not in panic, has no host to give: a pick fails ("no healthy upstream").
 */
export function priorityLoads(
  levels: readonly LevelHealth[],
  panicThreshold = DEFAULT_PANIC_THRESHOLD,
  overprovisioningFactor = DEFAULT_OVERPROVISIONING_FACTOR,
): PriorityLoads {
  const n = levels.length;
  const health = levels.map((l) => (l.hosts > 0 ? Math.min(100, Math.floor((overprovisioningFactor * l.healthy) / l.hosts)) : 0));
  const total = Math.min(
    100,
    health.reduce((sum, h) => sum + h, 0),
  );
  const load = new Array<number>(n).fill(0);
  const threshold = Math.min(100, panicThreshold);
  if (total === 0 && threshold === 0) {
    if (n > 0) load[0] = 100;
    return { load, panic: new Array<boolean>(n).fill(false) };
  }
  if (total > 0) {
    let remaining = 100;
    let firstAvailable = -1;
    for (let i = 0; i < n; i++) {
      if (firstAvailable < 0 && (health[i] as number) > 0) firstAvailable = i;
      load[i] = Math.min(remaining, Math.floor(((health[i] as number) * 100) / total));
      remaining -= load[i] as number;
    }
    if (remaining > 0 && firstAvailable >= 0) load[firstAvailable] = (load[firstAvailable] as number) + remaining;
  }
  const panic = levels.map((l) => total !== 100 && (l.hosts === 0 ? 0 : (100 * l.healthy) / l.hosts) < threshold);
  if (n > 0 && panic.every(Boolean)) loadInTotalPanic(levels, load);
  return { load, panic };
}

function loadInTotalPanic(levels: readonly LevelHealth[], load: number[]): void {
  const hosts = levels.reduce((sum, l) => sum + l.hosts, 0);
  load.fill(0);
  if (hosts === 0) {
    load[0] = 100;
    return;
  }
  let remaining = 100;
  let firstNonEmpty = -1;
  levels.forEach((l, i) => {
    if (firstNonEmpty < 0 && l.hosts > 0) firstNonEmpty = i;
    load[i] = Math.floor((100 * l.hosts) / hosts);
    remaining -= load[i] as number;
  });
  load[firstNonEmpty] = (load[firstNonEmpty] as number) + remaining;
}

/** The priority a pick goes to: `hash % 100 + 1` against the cumulative loads (`choosePriority`). */
export function choosePriority(load: readonly number[], hash: number): number {
  const point = (hash % 100) + 1;
  let cumulative = 0;
  for (let i = 0; i < load.length; i++) {
    cumulative += load[i] as number;
    if (point <= cumulative) return i;
  }
  return 0;
}

/**
 * Round robin over hosts in priority levels (RoundRobinLoadBalancer on LoadBalancerBase): each pick
 * chooses a priority by the loads above with a fresh random number (`hostSourceToUse`), then takes
 * the next host of that level — of its healthy hosts, or of all of them when the level is in panic
 * — each source with its own round-robin position, all starting at one random offset, as Envoy's
 * `rr_indexes_` start at its seed. Shared by all picks, like Envoy's per-worker load balancer.
 */
export class PriorityRoundRobin {
  readonly #levels: readonly (readonly string[])[];
  readonly #isHealthy: (host: string) => boolean;
  readonly #panicThreshold: number;
  readonly #random: () => number;
  readonly #seed: number;
  readonly #positions = new Map<string, number>();

  constructor(
    levels: readonly (readonly string[])[],
    isHealthy: (host: string) => boolean,
    options: { readonly panicThreshold?: number | undefined; readonly random?: (() => number) | undefined } = {},
  ) {
    this.#levels = levels;
    this.#isHealthy = isHealthy;
    this.#panicThreshold = options.panicThreshold ?? DEFAULT_PANIC_THRESHOLD;
    this.#random = options.random ?? Math.random;
    this.#seed = Math.floor(this.#random() * 2 ** 31);
  }

  /** The hosts by priority. */
  get levels(): readonly (readonly string[])[] {
    return this.#levels;
  }

  /** The next host, or undefined when there is none to give ("no healthy upstream"). */
  pick(): string | undefined {
    if (this.#levels.length === 0) return undefined;
    const healthy = this.#levels.map((hosts) => hosts.filter(this.#isHealthy));
    const { load, panic } = priorityLoads(
      this.#levels.map((hosts, i) => ({ hosts: hosts.length, healthy: (healthy[i] as string[]).length })),
      this.#panicThreshold,
    );
    const priority = choosePriority(load, Math.floor(this.#random() * 2 ** 32));
    const inPanic = panic[priority] === true;
    const pool = inPanic ? (this.#levels[priority] as readonly string[]) : (healthy[priority] as string[]);
    if (pool.length === 0) return undefined;
    const source = `${priority}/${inPanic ? 'all' : 'healthy'}`;
    const position = this.#positions.get(source) ?? this.#seed;
    this.#positions.set(source, (position + 1) % Number.MAX_SAFE_INTEGER);
    return pool[position % pool.length];
  }
}
