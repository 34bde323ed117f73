import { Rng, type EngineConfig } from '@spillway/engine';
import type { KvBatch, KvSnapshotEvent } from '@spillway/events';
import { Charge, type Endpoint, type Fleet } from '@spillway/fleet';
import type { SchedulerConfigInput, SharedState, SharedStateOptions } from '@spillway/scheduler';
import type { Network } from './network.js';
import type { ReplicaInfo } from './topology.js';
import type { SimRequest } from './workload.js';

/**
 * The routing logic of one picker (an EPP, or a gateway's own load balancer) under each strategy.
 * A route is an ordered list of replicas the gateway walks like Envoy's override_host; it
 * remembers the router that made it, so a request picked before an EPP restart is released to the
 * state that counted it. The strategies' own modules: Spillway's scheduler (spillway-router.ts),
 * the reference EPP (the Gateway API Inference Extension's EPP, now in llm-d) and its deployments (reference-router.ts), Envoy's load-aware locality policy
 * (envoy-router.ts); the simple baselines are here.
 */
export const POOL = 'sim';
export const MODEL = 'llama-3-8b';

export const LIST_LENGTH = 3;

/**
 * `held`: flow control holds the request at the EPP; the router answers it later through its
 * context's `flow.answer` (routed, or 429/503 when it expires or is evicted).
 * `defer`: this pool is saturated and the gateway has other pools to fail over to (the zonal and
 * regional reference deployments); the gateway asks the next one.
 */
export type RouteStatus = 'routed' | 'defer' | 'held' | 429 | 503;

export interface Route {
  readonly status: RouteStatus;
  /** Replica indices, primary first. */
  readonly list: readonly number[];
  readonly router: EppRouter;
  /** Router-private state for served/release (a Decision, a charged endpoint, ...). */
  token: unknown;
  /** The response began: a replica accepted it, and a streamed response's headers leave then (as vLLM's and spillway-sim's do). */
  started?: boolean;
}

/** What the gateway tells a picker beside the request. */
export interface RouteAsk {
  readonly gatewayZone: number;
  /** Another pool remains to fail over to: a saturated pool may answer `defer`. */
  readonly mayDefer: boolean;
}

/** A replica's load as a scrape of its `/metrics` reads it. */
export interface ScrapeSample {
  readonly waiting: number;
  readonly running: number;
  readonly kvUsage: number;
  /** `vllm:lora_requests_info`, when the server serves adapters. */
  readonly lora?: { readonly running: readonly string[]; readonly waiting: readonly string[]; readonly max: number } | undefined;
  /** When the pod rendered it. */
  readonly readAt: number;
}

export interface EppRouter {
  route(request: SimRequest, ask: RouteAsk, now: number): Route;
  /**
   * The gateway served the request at `replica` (primary or not): the replica accepted it, so its
   * response began (its headers, before the first token). The gateway sets `route.started` first.
   */
  served(route: Route, replica: number, now: number): void;
  /**
   * The request ended at `now`, however (its last token, a failure, no replica took it). A picker
   * behind Envoy's shipped config does not see the end of a started request: it may ignore it
   * (RouterContext.seesCompletion). Idempotent.
   */
  release(route: Route, now: number): void;
  /** This picker's view of the replica's load is older than `limitMs`, or absent (the fault windows' probe). */
  isStale(replica: number, now: number, limitMs: number): boolean;
  /** The state this EPP shares with the pool's other EPPs (Spillway's scheduler only). */
  readonly shared?: SharedState | undefined;
  /** KV events for the precise block index (the precise kinds only). */
  applyKvBatch?(batch: KvBatch, now: number): void;
  applyKvSnapshot?(event: KvSnapshotEvent, now: number): void;
  /** A scrape of `replica` came back (the scrape path). */
  applyScrape?(replica: number, sample: ScrapeSample, now: number): void;
  /** A response from `replica` carried this ORCA utilisation (the ORCA path). */
  applyLoadReport?(replica: number, utilization: number, now: number): void;
  /** Something that may show room reached this EPP (a sample, a peer's batch): held requests may go. */
  onRoom?(now: number): void;
  /** The wake-up this router asked for (`flow.wakeAt`) is due. */
  wake?(now: number): void;
  /** The EPP is gone (a restart): requests it holds are answered (503). */
  close?(now: number): void;
  /** Periodic work every `tickEveryMs` (a load balancer's weight update). */
  readonly tickEveryMs?: number;
  tick?(now: number): void;
}

/** What one picker may look at. */
export interface RouterContext {
  readonly replicas: readonly ReplicaInfo[];
  /** The replicas it picks among (its pool), ascending. */
  readonly scope: readonly number[];
  /** Kubernetes' view of a replica's readiness (the gateways' endpoints, the reference's pod informer). */
  isReady(replica: number): boolean;
  /** Replicas the gateways believe ready, all zones. */
  readyReplicas(): readonly number[];
  /** Addresses of the ready replicas of a zone: the gateway's zone-local subset hint. */
  localSubset(zone: number): readonly string[];
  /** Where the picker runs. */
  readonly zoneIndex: number;
  /** The region of a zone (by index). */
  regionOf(zone: number): string;
  readonly zone: string;
  readonly region: string;
  readonly network: Network;
  /** Each zone's engine config (cache sizes, as the servers' metrics report them). */
  readonly engines: readonly EngineConfig[];
  /** The servers serve LoRA adapters (an operator then enables the pickers' LoRA affinity). */
  readonly servesLora: boolean;
  readonly seed: number;
  /** The EPP's view fed by the collectors' events (the NATS path; empty on the others). */
  readonly fleet: Fleet;
  /** Scheduler config for the scheduler-based kinds (from schedulerConfigFor). */
  readonly config: SchedulerConfigInput;
  /** The shared-state channel of the scheduler-based kinds (its outbox), when the EPPs share state. */
  readonly shared?: SharedStateOptions | undefined;
  /**
   * The EPP sees a request's completion (its response body streams through it: `full-duplex`);
   * false behind the shipped Envoy config, where it sees only the start (scenario `epps.responseBody`).
   */
  readonly seesCompletion: boolean;
  /** Flow control's way back to the gateway (the kinds that hold requests). */
  readonly flow?: HeldRequests | undefined;
}

/** How an EPP that holds requests answers them later, and asks to be woken for their expiry. */
export interface HeldRequests {
  /** The request `held` stands for is answered at `now`: `outcome` is routed (its list) or a rejection. */
  answer(held: Route, outcome: Route, now: number): void;
  /** Call the router's `wake` at `at`. */
  wakeAt(at: number): void;
}

export const unavailable = (router: EppRouter): Route => ({ status: 503, list: [], router, token: undefined });

/** A fleet-fed picker's staleness: the fleet's own rule. */
export function fleetStale(ctx: RouterContext, replica: number, now: number): boolean {
  const info = ctx.replicas[replica];
  const endpoint = info ? ctx.fleet.get(POOL, info.zone, info.pod) : undefined;
  return !endpoint || !ctx.fleet.isFresh(endpoint, now);
}

export class RandomRouter implements EppRouter {
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
  isStale(): boolean {
    return false;
  }
}

export class RoundRobinRouter implements EppRouter {
  private next: number;
  constructor(private readonly ctx: RouterContext) {
    // Each gateway starts at its own offset, as independent proxies do.
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
  isStale(): boolean {
    return false;
  }
}

/**
 * Zone-unaware least-queue: lowest waiting + running of the latest sample plus the requests this
 * EPP sent since that sample (the fleet's unsampled picks), over every ready replica.
 */
export class LeastQueueRouter implements EppRouter {
  private readonly rng: Rng;
  constructor(private readonly ctx: RouterContext) {
    this.rng = new Rng(ctx.seed ^ 0x1ea5);
  }

  private endpoint(replica: number): Endpoint | undefined {
    const info = this.ctx.replicas[replica];
    return info ? this.ctx.fleet.get(POOL, info.zone, info.pod) : undefined;
  }

  private load(replica: number): number {
    const e = this.endpoint(replica);
    const m = e?.metrics;
    if (!e || !m) return Number.POSITIVE_INFINITY;
    return m.waitingRequests + m.runningRequests + e.unsampledPicks;
  }

  route(_request: SimRequest, _ask: RouteAsk, now: number): Route {
    const ready = this.ctx.readyReplicas();
    if (ready.length === 0) return unavailable(this);
    // Random tie keys so equal loads spread; a handful of replicas, so a full sort is fine.
    const keyed = ready.map((r) => ({ r, load: this.load(r), tie: this.rng.next() }));
    keyed.sort((a, b) => a.load - b.load || a.tie - b.tie);
    const list = keyed.slice(0, LIST_LENGTH).map((k) => k.r);
    const endpoint = this.endpoint(list[0] as number);
    let token: Charge | undefined;
    if (endpoint) {
      token = new Charge();
      this.ctx.fleet.charge(token, endpoint, now);
    }
    return { status: 'routed', list, router: this, token };
  }

  served(route: Route, replica: number, now: number): void {
    const charge = route.token as Charge | undefined;
    const endpoint = this.endpoint(replica);
    if (!charge || !endpoint || charge.chargedTo === undefined || charge.chargedTo === endpoint) return;
    this.ctx.fleet.releaseCharge(charge);
    this.ctx.fleet.charge(charge, endpoint, now);
  }

  release(route: Route): void {
    const charge = route.token as Charge | undefined;
    if (!charge) return;
    this.ctx.fleet.releaseCharge(charge);
    route.token = undefined;
  }

  isStale(replica: number, now: number): boolean {
    return fleetStale(this.ctx, replica, now);
  }
}
