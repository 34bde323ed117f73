import { Rng } from '@spillway/engine';
import type { Endpoint, Fleet } from '@spillway/fleet';
import type { KvBatch, KvSnapshotEvent } from '@spillway/events';
import { Scheduler, type Decision, type SchedulerConfigInput, type SharedState, type SharedStateOptions } from '@spillway/scheduler';
import type { StrategyKind } from './strategies.js';
import type { ReplicaInfo } from './topology.js';
import type { SimRequest } from './workload.js';

/**
 * The routing logic of one EPP under each strategy. A route is an ordered list of replicas the
 * gateway walks like Envoy's override_host; it remembers the router that made it, so a request
 * picked before an EPP restart is released to the state that counted it.
 */
export const POOL = 'sim';
export const MODEL = 'llama-3-8b';
/** The zone label the reference strategy's fleet sees for every replica: one flat pool. */
export const GLOBAL_ZONE = 'global';

export const LIST_LENGTH = 3;

export interface Route {
  readonly status: 'routed' | 429 | 503;
  /** Replica indices, primary first. */
  readonly list: readonly number[];
  readonly router: EppRouter;
  /** Router-private state for served/release (a Decision, a charged endpoint, ...). */
  token: unknown;
}

export interface EppRouter {
  route(request: SimRequest, gatewayZone: number, now: number): Route;
  /** The gateway served the request at `replica` (primary or not). */
  served(route: Route, replica: number, now: number): void;
  /** The request ended at `now`, however. Idempotent. */
  release(route: Route, now: number): void;
  /** The state this EPP shares with the pool's other EPPs (Spillway's scheduler only). */
  readonly shared?: SharedState | undefined;
  /** KV events for the precise block index (the precise kinds only). */
  applyKvBatch?(batch: KvBatch, now: number): void;
  applyKvSnapshot?(event: KvSnapshotEvent, now: number): void;
}

/** What one EPP's router may look at. */
export interface RouterContext {
  readonly replicas: readonly ReplicaInfo[];
  /** This EPP's view of the pool, fed by the simulation's event delivery. */
  readonly fleet: Fleet;
  /** Replicas the gateways believe ready (Kubernetes endpoints), all zones. */
  readyReplicas(): readonly number[];
  /** Addresses of the ready replicas of a zone: the gateway's zone-local subset hint. */
  localSubset(zone: number): readonly string[];
  /** The EPP's own zone and region (GLOBAL_ZONE for the reference strategy). */
  readonly zone: string;
  readonly region: string;
  readonly seed: number;
  /** Scheduler config for the scheduler-based kinds (from schedulerConfigFor). */
  readonly config: SchedulerConfigInput;
  /** The shared-state channel of the scheduler-based kinds (its outbox), when the EPPs share state. */
  readonly shared?: SharedStateOptions | undefined;
}

export function createRouter(kind: StrategyKind, ctx: RouterContext): EppRouter {
  switch (kind) {
    case 'random':
      return new RandomRouter(ctx);
    case 'round-robin':
      return new RoundRobinRouter(ctx);
    case 'least-queue':
      return new LeastQueueRouter(ctx);
    case 'reference':
      return new ReferenceRouter(ctx);
    case 'spillway-precise':
    case 'oracle':
      return new PreciseRouter(ctx);
    default:
      return new SchedulerRouter(ctx, kind === 'zone-local' || kind === 'spillway');
  }
}

const unavailable = (router: EppRouter): Route => ({ status: 503, list: [], router, token: undefined });

class RandomRouter implements EppRouter {
  private readonly rng: Rng;
  constructor(private readonly ctx: RouterContext) {
    this.rng = new Rng(ctx.seed ^ 0x7a11);
  }

  route(): Route {
    const ready = this.ctx.readyReplicas();
    if (ready.length === 0) return unavailable(this);
    const n = Math.min(LIST_LENGTH, ready.length);
    const list: number[] = [];
    while (list.length < n) {
      const r = ready[this.rng.int(ready.length)] as number;
      if (!list.includes(r)) list.push(r);
    }
    return { status: 'routed', list, router: this, token: undefined };
  }

  served(): void {}
  release(): void {}
}

class RoundRobinRouter implements EppRouter {
  private next: number;
  constructor(private readonly ctx: RouterContext) {
    // Each EPP starts at its own offset, as independent proxies do.
    this.next = new Rng(ctx.seed ^ 0x0bb1).int(Math.max(1, ctx.replicas.length));
  }

  route(): Route {
    const ready = this.ctx.readyReplicas();
    if (ready.length === 0) return unavailable(this);
    const start = this.next % ready.length;
    this.next = start + 1;
    const list: number[] = [];
    for (let i = 0; i < Math.min(LIST_LENGTH, ready.length); i++) list.push(ready[(start + i) % ready.length] as number);
    return { status: 'routed', list, router: this, token: undefined };
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
 * EPP sent since that sample (the fleet's unsampled picks), over every ready replica.
 */
class LeastQueueRouter implements EppRouter {
  private readonly rng: Rng;
  constructor(private readonly ctx: RouterContext) {
    this.rng = new Rng(ctx.seed ^ 0x1ea5);
  }

  private endpoint(replica: number): Endpoint | undefined {
    const info = this.ctx.replicas[replica] as ReplicaInfo;
    return this.ctx.fleet.get(POOL, this.ctx.zone === GLOBAL_ZONE ? GLOBAL_ZONE : info.zone, info.pod);
  }

  private load(replica: number): number {
    const e = this.endpoint(replica);
    const m = e?.metrics;
    if (!e || !m) return Number.POSITIVE_INFINITY;
    return m.waitingRequests + m.runningRequests + e.unsampledPicks;
  }

  route(_request: SimRequest, _gatewayZone: number, now: number): Route {
    const ready = this.ctx.readyReplicas();
    if (ready.length === 0) return unavailable(this);
    // Random tie keys so equal loads spread; a handful of replicas, so a full sort is fine.
    const keyed = ready.map((r) => ({ r, load: this.load(r), tie: this.rng.next() }));
    keyed.sort((a, b) => a.load - b.load || a.tie - b.tie);
    const list = keyed.slice(0, LIST_LENGTH).map((k) => k.r);
    const endpoint = this.endpoint(list[0] as number);
    let token: Charge | undefined;
    if (endpoint) {
      this.ctx.fleet.recordPick(endpoint, now);
      token = { endpoint, at: now };
    }
    return { status: 'routed', list, router: this, token };
  }

  served(route: Route, replica: number, now: number): void {
    const charge = route.token as Charge | undefined;
    const endpoint = this.endpoint(replica);
    if (!charge || !endpoint || charge.endpoint === endpoint) return;
    this.ctx.fleet.releasePick(charge.endpoint, charge.at);
    this.ctx.fleet.recordPick(endpoint, now);
    route.token = { endpoint, at: now };
  }

  release(route: Route): void {
    const charge = route.token as Charge | undefined;
    if (!charge) return;
    this.ctx.fleet.releasePick(charge.endpoint, charge.at);
    route.token = undefined;
  }
}

/**
 * The production scheduler behind one EPP:
 * - `spillway`: locality mode with the gateway's zone-local subset;
 * - `zone-local`: strict mode with the same subset, so nothing ever leaves the zone;
 * the mode itself comes from the strategy's config (schedulerConfigFor).
 */
class SchedulerRouter implements EppRouter {
  protected readonly scheduler: Scheduler;
  private readonly byAddress = new Map<string, number>();

  constructor(
    protected readonly ctx: RouterContext,
    private readonly sendsSubset: boolean,
    /** Hand the scheduler the request's token ids (the EPP tokenizes: precise prefix routing). */
    private readonly tokenized = false,
  ) {
    this.scheduler = new Scheduler({
      fleet: ctx.fleet,
      pool: POOL,
      zone: ctx.zone,
      region: ctx.region,
      config: ctx.config,
      seed: ctx.seed,
      shared: ctx.shared,
    });
    for (const r of ctx.replicas) this.byAddress.set(r.address, r.index);
  }

  get shared(): SharedState {
    return this.scheduler.shared;
  }

  route(request: SimRequest, gatewayZone: number, now: number, priority = request.priority): Route {
    const subset = this.sendsSubset ? this.ctx.localSubset(gatewayZone) : undefined;
    const promptTokenIds = this.tokenized ? request.tokenIds : undefined;
    const d = this.scheduler.pick({ model: MODEL, prompt: request.prompt, subset, priority, promptTokenIds }, now);
    if (d.status !== 'routed') return { status: d.status, list: [], router: this, token: d };
    this.scheduler.commit(d, now);
    const list = d.entries.map((e) => this.byAddress.get(e.address) as number);
    return { status: 'routed', list, router: this, token: d };
  }

  served(route: Route, replica: number, now: number): void {
    this.scheduler.reportServed(route.token as Decision, (this.ctx.replicas[replica] as ReplicaInfo).address, now);
  }

  release(route: Route, now: number): void {
    this.scheduler.release(route.token as Decision, now);
  }
}

/** `spillway`, plus the precise block index: token ids per request, KV events from every replica. */
class PreciseRouter extends SchedulerRouter {
  constructor(ctx: RouterContext) {
    super(ctx, true, true);
  }

  applyKvBatch(batch: KvBatch, now: number): void {
    this.scheduler.applyKvBatch(batch, now);
  }

  applyKvSnapshot(event: KvSnapshotEvent, now: number): void {
    this.scheduler.applyKvSnapshot(event, now);
  }
}

/** The reference EPP's utilization detector defaults (queue 5, KV 0.8, metrics stale after 200 ms). */
const REFERENCE_QUEUE = 5;
const REFERENCE_KV = 0.8;
const REFERENCE_STALE_MS = 200;

/**
 * The reference EPP as deployed: one pool-wide picker (one scheduler, one fleet) for every gateway,
 * zone-unaware (its fleet sees every replica in one zone and no subset is sent). Sheddable requests
 * are admitted by the reference saturation rule — 429 when the average over candidates of
 * max(waiting / 5, KV / 0.8), stale metrics counting 1, reaches 1 — and then picked like the rest.
 */
class ReferenceRouter extends SchedulerRouter {
  constructor(ctx: RouterContext) {
    super(ctx, false);
  }

  override route(request: SimRequest, gatewayZone: number, now: number): Route {
    if (request.priority < 0 && this.saturation(now) >= 1) return { status: 429, list: [], router: this, token: undefined };
    return super.route(request, gatewayZone, now, 0);
  }

  override release(route: Route, now: number): void {
    if (route.token) super.release(route, now);
  }

  private saturation(now: number): number {
    const pool = this.ctx.fleet.pool(POOL);
    if (!pool) return 1;
    let sum = 0;
    let n = 0;
    for (const e of pool.readyInZone(GLOBAL_ZONE)) {
      const m = e.metrics;
      n++;
      if (!m || now - m.receivedAt > REFERENCE_STALE_MS) sum += 1;
      else sum += Math.max(m.waitingRequests / REFERENCE_QUEUE, m.kvCacheUsage / REFERENCE_KV);
    }
    return n === 0 ? 1 : sum / n;
  }
}

/** The decision behind a route, when a scheduler made it (for spill statistics). */
export function decisionOf(route: Route): Decision | undefined {
  const token = route.token as Partial<Decision> | undefined;
  return token && typeof token === 'object' && 'rule' in token ? (token as Decision) : undefined;
}
