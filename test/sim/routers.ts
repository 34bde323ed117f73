import { Rng } from '@spillway/engine';
import type { Endpoint, Fleet } from '@spillway/fleet';
import { Scheduler, type Decision, type SchedulerConfigInput } from '@spillway/scheduler';
import type { ReplicaInfo, ZoneSpec } from './topology.js';
import type { SimRequest } from './workload.js';

/**
 * Routing strategies. Each zone gateway has its own router state (its own EPP, fleet view and
 * in-flight accounting), as in production. A route is an ordered list of replicas the gateway walks
 * like Envoy's override_host.
 */
export type StrategyKind = 'random' | 'round-robin' | 'least-queue' | 'reference' | 'zone-local' | 'spillway';

export interface StrategySpec {
  /** Label in reports (a tuned variant may reuse a kind under another name). */
  readonly name: string;
  readonly kind: StrategyKind;
  /** Scheduler config for the scheduler-based kinds (merged over the kind's own settings). */
  readonly scheduler?: SchedulerConfigInput;
}

export const STRATEGIES: readonly StrategySpec[] = [
  { name: 'random', kind: 'random' },
  { name: 'round-robin', kind: 'round-robin' },
  { name: 'least-queue', kind: 'least-queue' },
  { name: 'reference', kind: 'reference' },
  { name: 'zone-local', kind: 'zone-local' },
  { name: 'spillway', kind: 'spillway' },
];

/** The zone label the reference strategy's fleets see for every replica: one flat pool. */
export const GLOBAL_ZONE = 'global';

export const POOL = 'sim';
export const MODEL = 'llama-3-8b';

export interface Route {
  readonly status: 'routed' | 429 | 503;
  readonly gateway: number;
  /** Replica indices, primary first. */
  readonly list: readonly number[];
  /** Router-private state for served/release (a Decision, a charged endpoint, ...). */
  token: unknown;
}

export interface Router {
  route(request: SimRequest, gateway: number, now: number): Route;
  /** The gateway served the request at `replica` (primary or not). */
  served(route: Route, replica: number, now: number): void;
  /** The request ended, however. */
  release(route: Route): void;
}

/** What a router may look at: the topology, its gateway's view of ready endpoints, its EPP's fleet. */
export interface RouterContext {
  readonly zones: readonly ZoneSpec[];
  readonly replicas: readonly ReplicaInfo[];
  /** One fleet per gateway (its EPP's view), fed by the simulation's event delivery. */
  readonly fleets: readonly Fleet[];
  /** Replicas the gateways believe ready (Kubernetes endpoints), all zones. */
  readyReplicas(): readonly number[];
  /** Addresses of the ready replicas of a zone: the gateway's zone-local subset hint. */
  localSubset(zone: number): readonly string[];
  readonly seed: number;
}

export function createRouter(spec: StrategySpec, ctx: RouterContext): Router {
  switch (spec.kind) {
    case 'random':
      return new RandomRouter(ctx);
    case 'round-robin':
      return new RoundRobinRouter(ctx);
    case 'least-queue':
      return new LeastQueueRouter(ctx);
    default:
      return new SchedulerRouter(spec, ctx);
  }
}

const LIST_LENGTH = 3;

class RandomRouter implements Router {
  private readonly rng: Rng;
  constructor(private readonly ctx: RouterContext) {
    this.rng = new Rng(ctx.seed ^ 0x7a11);
  }

  route(_request: SimRequest, gateway: number): Route {
    const ready = this.ctx.readyReplicas();
    if (ready.length === 0) return { status: 503, gateway, list: [], token: undefined };
    const n = Math.min(LIST_LENGTH, ready.length);
    const list: number[] = [];
    while (list.length < n) {
      const r = ready[this.rng.int(ready.length)] as number;
      if (!list.includes(r)) list.push(r);
    }
    return { status: 'routed', gateway, list, token: undefined };
  }

  served(): void {}
  release(): void {}
}

class RoundRobinRouter implements Router {
  private readonly next: number[];
  constructor(private readonly ctx: RouterContext) {
    // Each gateway starts at its own offset, as independent proxies do.
    this.next = ctx.zones.map((_, i) => Math.floor((i * ctx.replicas.length) / ctx.zones.length));
  }

  route(_request: SimRequest, gateway: number): Route {
    const ready = this.ctx.readyReplicas();
    if (ready.length === 0) return { status: 503, gateway, list: [], token: undefined };
    const start = (this.next[gateway] as number) % ready.length;
    this.next[gateway] = start + 1;
    const list: number[] = [];
    for (let i = 0; i < Math.min(LIST_LENGTH, ready.length); i++) list.push(ready[(start + i) % ready.length] as number);
    return { status: 'routed', gateway, list, token: undefined };
  }

  served(): void {}
  release(): void {}
}

interface Charge {
  endpoint: Endpoint;
  at: number;
}

/**
 * Zone-unaware least-queue: lowest waiting + running of the latest sample plus the requests this
 * gateway sent since that sample (the fleet's unsampled picks), over every ready replica.
 */
class LeastQueueRouter implements Router {
  private readonly rng: Rng;
  constructor(private readonly ctx: RouterContext) {
    this.rng = new Rng(ctx.seed ^ 0x1ea5);
  }

  private endpoint(gateway: number, replica: number): Endpoint | undefined {
    const info = this.ctx.replicas[replica] as ReplicaInfo;
    return this.ctx.fleets[gateway]?.get(POOL, info.zone, info.pod);
  }

  private load(gateway: number, replica: number): number {
    const e = this.endpoint(gateway, replica);
    const m = e?.metrics;
    if (!e || !m) return Number.POSITIVE_INFINITY;
    return m.waitingRequests + m.runningRequests + e.unsampledPicks;
  }

  route(_request: SimRequest, gateway: number, now: number): Route {
    const ready = this.ctx.readyReplicas();
    if (ready.length === 0) return { status: 503, gateway, list: [], token: undefined };
    // Random tie keys so equal loads spread; a handful of replicas, so a full sort is fine.
    const keyed = ready.map((r) => ({ r, load: this.load(gateway, r), tie: this.rng.next() }));
    keyed.sort((a, b) => a.load - b.load || a.tie - b.tie);
    const list = keyed.slice(0, LIST_LENGTH).map((k) => k.r);
    const endpoint = this.endpoint(gateway, list[0] as number);
    let token: Charge | undefined;
    if (endpoint) {
      this.ctx.fleets[gateway]?.recordPick(endpoint, now);
      token = { endpoint, at: now };
    }
    return { status: 'routed', gateway, list, token };
  }

  served(route: Route, replica: number, now: number): void {
    const charge = route.token as Charge | undefined;
    const endpoint = this.endpoint(route.gateway, replica);
    if (!charge || !endpoint || charge.endpoint === endpoint) return;
    const fleet = this.ctx.fleets[route.gateway] as Fleet;
    fleet.releasePick(charge.endpoint, charge.at);
    fleet.recordPick(endpoint, now);
    route.token = { endpoint, at: now };
  }

  release(route: Route): void {
    const charge = route.token as Charge | undefined;
    if (!charge) return;
    this.ctx.fleets[route.gateway]?.releasePick(charge.endpoint, charge.at);
    route.token = undefined;
  }
}

/**
 * The production scheduler, one per gateway (one EPP per zone):
 * - `spillway`: locality mode with the gateway's zone-local subset — the deployment Spillway is for;
 * - `zone-local`: strict mode with the same subset, so nothing ever leaves the zone;
 * - `reference`: the reference EPP's default scoring (queue 2, KV 2, prefix 3) with no zones: its
 *   fleet sees every replica in one zone (`global`) and no subset is sent, so all replicas are
 *   local candidates and the list is the best three by score.
 */
class SchedulerRouter implements Router {
  private readonly schedulers: Scheduler[];
  private readonly byAddress = new Map<string, number>();

  constructor(
    private readonly spec: StrategySpec,
    private readonly ctx: RouterContext,
  ) {
    const kind = spec.kind;
    const base: SchedulerConfigInput =
      kind === 'spillway' ? { subsetMode: 'locality' } : kind === 'zone-local' ? { subsetMode: 'strict', crossZoneFallbacks: 0 } : {};
    const config = { ...base, ...spec.scheduler };
    this.schedulers = ctx.zones.map(
      (z, i) =>
        new Scheduler({
          fleet: ctx.fleets[i] as Fleet,
          pool: POOL,
          zone: kind === 'reference' ? GLOBAL_ZONE : z.zone,
          region: kind === 'reference' ? GLOBAL_ZONE : z.region,
          config,
          seed: ctx.seed * 13 + i + 1,
        }),
    );
    for (const r of ctx.replicas) this.byAddress.set(r.address, r.index);
  }

  route(request: SimRequest, gateway: number, now: number): Route {
    const scheduler = this.schedulers[gateway] as Scheduler;
    const subset = this.spec.kind === 'reference' ? undefined : this.ctx.localSubset(gateway);
    const d = scheduler.pick({ model: MODEL, prompt: request.prompt, subset }, now);
    if (d.status !== 'routed') return { status: d.status, gateway, list: [], token: d };
    scheduler.commit(d, now);
    const list = d.entries.map((e) => this.byAddress.get(e.address) as number);
    return { status: 'routed', gateway, list, token: d };
  }

  served(route: Route, replica: number, now: number): void {
    const scheduler = this.schedulers[route.gateway] as Scheduler;
    scheduler.reportServed(route.token as Decision, (this.ctx.replicas[replica] as ReplicaInfo).address, now);
  }

  release(route: Route): void {
    (this.schedulers[route.gateway] as Scheduler).release(route.token as Decision);
  }

  /** The decision behind a route (for spill statistics). */
  static decision(route: Route): Decision | undefined {
    const token = route.token as Partial<Decision> | undefined;
    return token && typeof token === 'object' && 'rule' in token ? (token as Decision) : undefined;
  }
}

export const decisionOf = SchedulerRouter.decision;
