import { Rng } from '@spillway/engine';
import { unavailable, type EppRouter, type Route, type RouterContext } from './routers.js';

/**
 * Envoy's `load_aware_locality` load-balancing policy in one gateway, with least-request picking
 * the endpoint inside the chosen locality — no EPP. Modelled rule by rule on Envoy's
 * `source/extensions/load_balancing_policies/load_aware_locality/load_aware_locality_lb.cc`
 * (`computeLocalityRoutingWeights`, `selectLocality`) and its architecture doc
 * (`load_aware_locality.rst`), with their defaults:
 * - utilisation per host: the last ORCA report it returned in-band on a response to this gateway
 *   (vLLM's `endpoint-load-metrics` header carries `kv_cache_usage_perc`, the one named metric in
 *   [0, 1], so that is what `metric_names_for_computing_utilization` names); a report of 0, or one
 *   older than `weight_expiration_period` (3 min), is no data;
 * - every `weight_update_period` (1 s), per locality: the mean utilisation of its healthy hosts
 *   with data, EWMA-smoothed (alpha = 1 − exp(−1 s / 5 s); the first sample raw; no data keeps the
 *   previous value); weight = healthy hosts × max(0, 1 − utilisation);
 * - local preference: all traffic local while the local utilisation is at most the host-weighted
 *   remote mean + 0.1 (`utilization_variance_threshold`);
 * - probe: remotes get at least 3 % of the weight (`remote_probe_fraction`), taken from local and
 *   spread by healthy host count;
 * - all overloaded (total weight 0): weights = healthy host counts;
 * - a locality drawn at random by weight; in it, least request over two random healthy hosts by
 *   this gateway's own active requests (Envoy's LEAST_REQUEST default, choice_count 2).
 * Not modelled: out-of-band ORCA streams (in-band only, the default), degraded and panic weight
 * sets, priorities beyond one level.
 */
export const LOAD_AWARE = {
  weightUpdatePeriodMs: 1000,
  smoothingTimeConstantMs: 5000,
  utilizationVarianceThreshold: 0.1,
  remoteProbeFraction: 0.03,
  weightExpirationMs: 180_000,
} as const;

interface Report {
  utilization: number;
  at: number;
}

export class EnvoyLoadAwareRouter implements EppRouter {
  readonly tickEveryMs = LOAD_AWARE.weightUpdatePeriodMs;
  private readonly rng: Rng;
  /** Localities: index 0 is the gateway's own zone, then the other zones in order. */
  private readonly zones: number[];
  private readonly reports: (Report | undefined)[] = [];
  private readonly active: number[] = [];
  private smoothed: number[] | undefined;
  private weights: number[];
  private readonly alpha = 1 - Math.exp(-LOAD_AWARE.weightUpdatePeriodMs / LOAD_AWARE.smoothingTimeConstantMs);

  constructor(private readonly ctx: RouterContext) {
    this.rng = new Rng(ctx.seed ^ 0x3e70);
    const zones = [...new Set(ctx.replicas.map((r) => r.zoneIndex))].filter((z) => z !== ctx.zoneIndex);
    this.zones = [ctx.zoneIndex, ...zones];
    // Before any report every locality has full headroom; local preference then sends all local.
    this.weights = this.zones.map((_, i) => (i === 0 ? 1 : 0));
    this.tick(0);
  }

  route(): Route {
    const locality = this.chooseLocality();
    const host = this.leastRequest(this.zones[locality] as number) ?? this.anyHealthy();
    if (host === undefined) return unavailable(this);
    return { status: 'routed', list: [host], router: this, token: undefined };
  }

  /** The gateway sent the request to `replica`: one more active request there, until release. */
  served(route: Route, replica: number): void {
    route.token = replica;
    this.active[replica] = (this.active[replica] ?? 0) + 1;
  }

  release(route: Route): void {
    if (typeof route.token !== 'number') return;
    const replica = route.token;
    route.token = undefined;
    this.active[replica] = Math.max(0, (this.active[replica] ?? 0) - 1);
  }

  applyLoadReport(replica: number, utilization: number, now: number): void {
    this.reports[replica] = { utilization, at: now };
  }

  isStale(replica: number, now: number, limitMs: number): boolean {
    const r = this.reports[replica];
    return r === undefined || now - r.at > limitMs;
  }

  /** The main thread's timer: per-locality utilisation, smoothing and routing weights. */
  tick(now: number): void {
    const n = this.zones.length;
    const hosts = new Array<number>(n).fill(0);
    const raw = new Array<number>(n).fill(0);
    const valid = new Array<number>(n).fill(0);
    for (const r of this.ctx.replicas) {
      if (!this.ctx.isReady(r.index)) continue;
      const i = this.zones.indexOf(r.zoneIndex);
      hosts[i] = (hosts[i] as number) + 1;
      const report = this.reports[r.index];
      if (!report || report.utilization <= 0 || now - report.at > LOAD_AWARE.weightExpirationMs) continue;
      raw[i] = (raw[i] as number) + report.utilization;
      valid[i] = (valid[i] as number) + 1;
    }
    for (let i = 0; i < n; i++) if ((valid[i] as number) > 0) raw[i] = (raw[i] as number) / (valid[i] as number);
    const anyData = valid.some((v) => v > 0);
    if (!this.smoothed) {
      if (anyData) this.smoothed = raw.slice();
    } else if (anyData) {
      for (let i = 0; i < n; i++) {
        if ((valid[i] as number) > 0) this.smoothed[i] = this.alpha * (raw[i] as number) + (1 - this.alpha) * (this.smoothed[i] as number);
      }
    }
    this.weights = weightsOf(this.smoothed ?? raw, hosts);
  }

  private chooseLocality(): number {
    const total = this.weights.reduce((a, b) => a + b, 0);
    if (total <= 0) return 0;
    let target = this.rng.next() * total;
    for (let i = 0; i < this.weights.length; i++) {
      target -= this.weights[i] as number;
      if (target < 0) return i;
    }
    return this.weights.length - 1;
  }

  /** Least request, two random choices among the locality's healthy hosts (fewer active wins; the first on a tie). */
  private leastRequest(zone: number): number | undefined {
    const healthy = this.ctx.readyReplicas().filter((r) => this.ctx.replicas[r]?.zoneIndex === zone);
    if (healthy.length === 0) return undefined;
    const a = healthy[this.rng.int(healthy.length)] as number;
    const b = healthy[this.rng.int(healthy.length)] as number;
    return (this.active[b] ?? 0) < (this.active[a] ?? 0) ? b : a;
  }

  private anyHealthy(): number | undefined {
    const ready = this.ctx.readyReplicas();
    return ready.length === 0 ? undefined : ready[this.rng.int(ready.length)];
  }
}

/**
 * Routing weights from per-locality utilisation and healthy host counts (locality 0 local):
 * headroom weights, local preference, the probe floor, the all-overloaded fallback.
 */
export function weightsOf(utilization: readonly number[], hosts: readonly number[]): number[] {
  const n = hosts.length;
  const weights = hosts.map((h, i) => h * Math.max(0, 1 - (utilization[i] ?? 0)));
  const totalHosts = hosts.reduce((a, b) => a + b, 0);
  let remoteHosts = 0;
  let remoteUtil = 0;
  for (let i = 1; i < n; i++) {
    remoteHosts += hosts[i] as number;
    remoteUtil += (utilization[i] ?? 0) * (hosts[i] as number);
  }
  const allLocal = (): void => {
    weights.fill(0);
    weights[0] = 1;
  };
  if (totalHosts > 0 && (weights[0] as number) > 0) {
    const target = remoteHosts > 0 ? remoteUtil / remoteHosts : 0;
    if ((utilization[0] ?? 0) <= target + LOAD_AWARE.utilizationVarianceThreshold) allLocal();
  } else if (totalHosts === 0) {
    allLocal();
  }
  const total = weights.reduce((a, b) => a + b, 0);
  if (total > 0 && n > 1 && remoteHosts > 0) {
    const remote = total - (weights[0] as number);
    const floor = total * LOAD_AWARE.remoteProbeFraction;
    if (remote < floor) {
      const deficit = floor - remote;
      weights[0] = Math.max(0, (weights[0] as number) - deficit);
      for (let i = 1; i < n; i++) weights[i] = (weights[i] as number) + (deficit * (hosts[i] as number)) / remoteHosts;
    }
  }
  if (weights.reduce((a, b) => a + b, 0) === 0 && totalHosts > 0) return hosts.slice();
  return weights;
}
