import type { KvBatch, KvSnapshotEvent } from '@spillway/events';
import { Scheduler, type Decision, type SharedState } from '@spillway/scheduler';
import { fleetStale, MODEL, POOL, type EppRouter, type Route, type RouteAsk, type RouterContext } from './routers.js';
import type { SimRequest } from './workload.js';

/**
 * The production scheduler behind one EPP:
 * - `spillway`: locality mode with the gateway's zone-local subset;
 * - `zone-local`: strict mode with the same subset, so nothing ever leaves the zone;
 * the mode itself comes from the strategy's config (schedulerConfigFor).
 *
 * A request's life as the EPP sees it behind the gateway: picked (route), started when a replica
 * accepts it (`served`: a streamed response's headers leave then, before the first token), and,
 * only when the response body streams through the EPP (`seesCompletion`), completed at its last
 * token. Behind the shipped Envoy config it never sees the end of a started request: the
 * scheduler's charge ends when the replica's samples account for it or at its bound.
 */
export class SchedulerRouter implements EppRouter {
  protected readonly scheduler: Scheduler;
  private readonly byAddress = new Map<string, number>();

  constructor(
    protected readonly ctx: RouterContext,
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

  route(request: SimRequest, ask: RouteAsk, now: number): Route {
    const d = this.pickOnly(request, ask, now);
    if (d.status !== 'routed') return { status: d.status, list: [], router: this, token: d };
    return this.routed(d, now);
  }

  /** The scheduler's pick for a request from this EPP's gateway, not committed. */
  protected pickOnly(request: SimRequest, ask: RouteAsk, now: number): Decision {
    const subset = this.ctx.localSubset(ask.gatewayZone);
    const promptTokenIds = this.tokenized ? request.tokenIds : undefined;
    // A LoRA request asks for its adapter by name: the model the scheduler's LoRA affinity looks for.
    const model = request.lora ?? MODEL;
    return this.scheduler.pick({ model, prompt: request.prompt, subset, priority: request.priority, promptTokenIds }, now);
  }

  /** A routed decision sent: committed, as the gateway's list of replicas. */
  protected routed(d: Decision, now: number): Route {
    this.scheduler.commit(d, now);
    const list = d.entries.map((e) => this.byAddress.get(e.address) as number);
    return { status: 'routed', list, router: this, token: d };
  }

  served(route: Route, replica: number, now: number): void {
    const address = this.ctx.replicas[replica]?.address;
    if (address !== undefined) this.scheduler.reportServed(route.token as Decision, address, now);
    this.scheduler.start(route.token as Decision, now);
  }

  release(route: Route, now: number): void {
    // A started request's end reaches the EPP only with its response body.
    if (route.started === true && !this.ctx.seesCompletion) return;
    this.scheduler.release(route.token as Decision, now);
  }

  isStale(replica: number, now: number): boolean {
    return fleetStale(this.ctx, replica, now);
  }
}

/** `spillway`, plus the precise block index: token ids per request, KV events from every replica. */
export class PreciseRouter extends SchedulerRouter {
  constructor(ctx: RouterContext) {
    super(ctx, true);
  }

  applyKvBatch(batch: KvBatch, now: number): void {
    this.scheduler.applyKvBatch(batch, now);
  }

  applyKvSnapshot(event: KvSnapshotEvent, now: number): void {
    this.scheduler.applyKvSnapshot(event, now);
  }
}
