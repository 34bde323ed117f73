import { FlowQueue, type FlowControlConfig, type Held } from '@spillway/scheduler';
import type { HeldRequests, Route, RouteAsk, RouterContext } from './routers.js';
import { SchedulerRouter } from './spillway-router.js';
import type { SimRequest } from './workload.js';

/** A request held at the EPP: what the gateway asked, and the route it was told to wait on. */
interface Waiting {
  readonly request: SimRequest;
  readonly ask: RouteAsk;
  readonly route: Route;
}

/**
 * `spillway-fc`: `spillway` with flow control, as the EPP runs it (services/epp/src/request/
 * flow-control.ts): the same pure queue (`FlowQueue`) and the scheduler's hold rule, in virtual
 * time. A request the pick says to hold (Decision.hold), or that arrives while others are held,
 * waits in the queue; every event that may show room — a sample reaching this EPP, a completion
 * it sees (only with the response body streamed through it), a peer's shared-state batch — runs a dispatch pass: the next request in queue order is
 * picked afresh, and goes when the pick no longer says hold. `maxHoldMs` answers 429 (sheddable)
 * or 503; a full queue refuses the newest request of the lowest band (docs/flow-control.md).
 */
export class FlowControlRouter extends SchedulerRouter {
  private readonly queue: FlowQueue<Waiting>;
  private readonly flow: HeldRequests;
  private dispatching = false;
  /** The wake-up asked for, so each expiry is asked once. */
  private wakeAtMs = Number.POSITIVE_INFINITY;
  private readonly expired: Held<Waiting>[] = [];

  constructor(ctx: RouterContext) {
    super(ctx);
    if (!ctx.flow) throw new Error('spillway-fc needs the gateway\u2019s way back for held requests');
    this.flow = ctx.flow;
    this.queue = new FlowQueue(limitsOf(this.scheduler.config.flowControl));
  }

  override route(request: SimRequest, ask: RouteAsk, now: number): Route {
    // Requests already held go first: the newcomer waits behind them unless they have gone.
    this.dispatch(now);
    if (this.queue.size === 0) {
      const d = this.pickOnly(request, ask, now);
      if (d.status !== 'routed') return { status: d.status, list: [], router: this, token: d };
      if (!d.hold) return this.routed(d, now);
    }
    const route: Route = { status: 'held', list: [], router: this, token: undefined };
    const offered = this.queue.offer(
      { value: { request, ask, route }, priority: request.priority, flow: request.fairnessId, bytes: request.prompt.length },
      now,
    );
    for (const evicted of offered.evicted) this.reject(evicted.value, now);
    if (!offered.held) return { status: request.priority < 0 ? 429 : 503, list: [], router: this, token: undefined };
    this.scheduleWake();
    return route;
  }

  override release(route: Route, now: number): void {
    super.release(route, now);
    // Only an end the EPP sees shows room: behind the shipped Envoy config a started request's end
    // never reaches it (its charge ends by samples, which run a pass when they arrive).
    if (route.started === true && !this.ctx.seesCompletion) return;
    this.dispatch(now);
  }

  onRoom(now: number): void {
    this.dispatch(now);
  }

  wake(now: number): void {
    this.wakeAtMs = Number.POSITIVE_INFINITY;
    for (const held of this.queue.expire(now, this.expired)) this.reject(held.value, now);
    this.expired.length = 0;
    this.dispatch(now);
    this.scheduleWake();
  }

  close(now: number): void {
    for (const held of this.queue.drain()) this.flow.answer(held.value.route, this.rejection(503), now);
  }

  /** Dispatches held requests in queue order while the pick finds room for the next one. */
  private dispatch(now: number): void {
    if (this.dispatching || this.queue.size === 0) return;
    this.dispatching = true;
    try {
      for (let next = this.queue.peek(); next !== undefined; next = this.queue.peek()) {
        const d = this.pickOnly(next.value.request, next.value.ask, now);
        if (d.status === 'routed' && d.hold) break;
        this.queue.take();
        const outcome = d.status === 'routed' ? this.routed(d, now) : { status: d.status, list: [], router: this, token: d };
        this.flow.answer(next.value.route, outcome, now);
      }
    } finally {
      this.dispatching = false;
    }
  }

  private reject(waiting: Waiting, now: number): void {
    this.flow.answer(waiting.route, this.rejection(waiting.request.priority < 0 ? 429 : 503), now);
  }

  private rejection(status: 429 | 503): Route {
    return { status, list: [], router: this, token: undefined };
  }

  private scheduleWake(): void {
    const at = this.queue.nextExpiryAt();
    if (at === undefined || at >= this.wakeAtMs) return;
    this.wakeAtMs = at;
    this.flow.wakeAt(at);
  }
}

function limitsOf(config: FlowControlConfig): { maxRequests: number; maxBytes: number; maxHoldMs: number } {
  return { maxRequests: config.maxHeldRequests, maxBytes: config.maxHeldBytes, maxHoldMs: config.maxHoldMs };
}
