import { Rng, type Sequence } from '@spillway/engine';
import type { EppSet } from './epps.js';
import type { SimEvent } from './events.js';
import type { KvChannel } from './kv-events.js';
import type { Measurements } from './measure.js';
import type { Network } from './network.js';
import type { EventQueue } from './queue.js';
import type { Flight, ReplicaSet, SimEngineRequest } from './replicas.js';
import type { Route } from './routers.js';
import type { ResolvedScenario } from './resolve.js';
import type { Trip } from './trip.js';
import { ArrivalStream, prefixGroupsOf } from './workload.js';

/** Attempts per request: the route's retry policy (`num_retries: 2`). */
const MAX_ATTEMPTS = 3;
/** A refused connection inside a zone still costs a little. */
const REFUSED_MS = 0.2;

/**
 * One gateway per zone: its arrivals (the same sequence for every strategy of a seed), the EPPs it
 * asks (each hop between zones half their round trip: an EPP in another zone costs the whole round
 * trip), and the walk down the returned list as Envoy's override_host does it — a dead replica
 * refuses the connection, a full queue answers 503, and the gateway tries the next entry, then its
 * own fallback policy (a random ready replica) up to three attempts in all. A finished request's
 * figures go to every range holding its arrival time; its TTFT runs from its arrival at the
 * gateway to the first token's return there.
 */
export class Gateways {
  private readonly streams: ArrivalStream[];
  private readonly rng: Rng;
  /** Requests flow control holds at an EPP, by the route they wait on. */
  private readonly held = new Map<Route, Trip>();

  constructor(
    private readonly s: ResolvedScenario,
    seed: number,
    private readonly wiring: {
      readonly queue: EventQueue<SimEvent>;
      readonly replicas: ReplicaSet;
      readonly epps: EppSet;
      readonly kv: KvChannel;
      readonly measure: Measurements;
      readonly network: Network;
    },
  ) {
    this.rng = new Rng((seed * 16_807 + 13) >>> 0);
    const groups = prefixGroupsOf(s.workload, seed);
    this.streams = s.zones.map(
      (_, i) =>
        new ArrivalStream({
          workload: s.workload,
          groups,
          schedule: s.rates[i] ?? { startsMs: [0], rates: [0] },
          gateway: i,
          gateways: s.zones.length,
          seed,
          endMs: s.durationMs,
        }),
    );
  }

  start(): void {
    this.streams.forEach((st, i) => this.wiring.queue.push(st.peekAt(), { kind: 'arrival', gateway: i }));
  }

  arrive(e: SimEvent<'arrival'>, now: number): void {
    const gateway = e.gateway;
    const stream = this.streams[gateway];
    const request = stream?.next();
    if (!stream || !request) return;
    this.wiring.queue.push(stream.peekAt(), { kind: 'arrival', gateway });
    this.wiring.measure.count(request.arrivalAt, (range) => {
      range.arrivals++;
      (range.arrivalsByZone[gateway] as number)++;
      (range.tenantArrivals[request.tenant] as number)++;
    });
    const trip: Trip = { request, gateway, chain: this.wiring.epps.chain(gateway), stage: 0, route: undefined, tried: [] };
    this.ask(trip, now, now);
  }

  /** The gateway sends the request to its trip's current EPP at `sendAt`. */
  private ask(trip: Trip, sendAt: number, now: number): void {
    const epp = trip.chain[trip.stage];
    if (!epp) return;
    const at = sendAt + this.wiring.network.oneWay(trip.gateway, epp.zoneIndex);
    if (at <= now) this.decide({ kind: 'decide', trip }, now);
    else this.wiring.queue.push(at, { kind: 'decide', trip });
  }

  /** The request reaches an EPP, which answers: a list, a rejection, or (failover) "saturated, ask the next". */
  decide(e: SimEvent<'decide'>, now: number): void {
    const { trip } = e;
    const epp = trip.chain[trip.stage];
    if (!epp) return;
    this.wiring.kv.beforePick(now);
    const mayDefer = trip.stage < trip.chain.length - 1;
    const route = epp.router.route(trip.request, { gatewayZone: trip.gateway, mayDefer }, now);
    if (route.status === 'held') {
      // Flow control holds it: the stream stays open until the EPP answers (answerHeld).
      this.held.set(route, trip);
      return;
    }
    this.answered(trip, route, now + this.wiring.network.oneWay(epp.zoneIndex, trip.gateway), now);
  }

  /** A held request's EPP answers it at `now`: with a list, or a rejection (expired, evicted). */
  answerHeld(held: Route, outcome: Route, now: number): void {
    const trip = this.held.get(held);
    if (!trip) return;
    this.held.delete(held);
    const epp = trip.chain[trip.stage];
    this.answered(trip, outcome, now + this.wiring.network.oneWay(epp?.zoneIndex ?? trip.gateway, trip.gateway), now);
  }

  /** The EPP's answer reaches the gateway at `answeredAt`: ask the next EPP, count a rejection, or send. */
  private answered(trip: Trip, route: Route, answeredAt: number, now: number): void {
    if (route.status === 'defer') {
      trip.stage++;
      this.ask(trip, answeredAt, now);
      return;
    }
    if (route.status !== 'routed') {
      this.wiring.measure.count(trip.request.arrivalAt, (t) => (route.status === 429 ? t.rejected429++ : t.rejected503++));
      return;
    }
    trip.route = route;
    this.send(trip, answeredAt, now);
  }

  /** The gateway sends the request to its next replica at `sendAt` (or gives up: 503). */
  private send(trip: Trip, sendAt: number, now: number): void {
    const replica = this.nextTarget(trip);
    if (replica === undefined) {
      trip.route?.router.release(trip.route, now);
      this.wiring.measure.count(trip.request.arrivalAt, (t) => t.rejected503++);
      return;
    }
    trip.tried.push(replica);
    const at = sendAt + this.wiring.network.oneWay(trip.gateway, this.wiring.replicas.get(replica).info.zoneIndex);
    if (at <= now) this.dispatch({ kind: 'dispatch', trip, replica }, now);
    else this.wiring.queue.push(at, { kind: 'dispatch', trip, replica });
  }

  /**
   * The list's next entry, then the gateway's fallback policy: a random ready replica not tried yet,
   * of the pool, of the answering EPP's pool, or of the gateway's zone (as the deployment's clusters are).
   */
  private nextTarget(trip: Trip): number | undefined {
    const list = trip.route?.list ?? [];
    const n = trip.tried.length;
    if (n < list.length) return list[n];
    if (n >= MAX_ATTEMPTS) return undefined;
    const { replicas, epps } = this.wiring;
    const fallback = epps.deployment.fallback;
    const scope = fallback === 'scope' ? new Set(trip.chain[trip.stage]?.scope ?? []) : undefined;
    const ready = replicas.readyReplicas().filter((r) => {
      if (trip.tried.includes(r)) return false;
      if (scope) return scope.has(r);
      return fallback === 'pool' || replicas.get(r).info.zoneIndex === trip.gateway;
    });
    return ready.length === 0 ? undefined : ready[this.rng.int(ready.length)];
  }

  /** The request reaches a replica: served, or refused (dead, queue full) and the gateway moves on. */
  dispatch(e: SimEvent<'dispatch'>, now: number): void {
    const { trip, replica } = e;
    const route = trip.route;
    const r = this.wiring.replicas.get(replica);
    const back = this.wiring.network.oneWay(r.info.zoneIndex, trip.gateway);
    const request = trip.request;
    const flight: Flight = { trip, replica, attempt: trip.tried.length - 1, backMs: back };
    const seq = r.engine?.submit(
      {
        promptTokens: request.promptTokens,
        outputTokens: request.outputTokens,
        blockHashes: request.blockHashes,
        ...(request.lora !== undefined ? { lora: request.lora } : {}),
        flight,
      },
      now,
    );
    if (!route || !r.engine || !seq || seq.state === 'rejected') {
      this.send(trip, now + Math.max(back, REFUSED_MS), now);
      return;
    }
    r.active.add(flight);
    route.started = true;
    route.router.served(route, replica, now);
    if (this.wiring.epps.deployment.signals === 'orca') this.report(trip, replica, r.engine.kvUsage, now + back);
  }

  /** An in-band ORCA report (vLLM's KV-cache use, in the response headers) on its way back to the gateway's balancer. */
  private report(trip: Trip, replica: number, utilization: number, at: number): void {
    const epp = trip.chain[trip.stage];
    if (!epp) return;
    this.wiring.queue.push(at, { kind: 'load-report', epp: epp.index, replica, utilization });
  }

  /** A request's last token: its figures, and its EPP told (which sees it only when the body streams through it). */
  finish(seq: Sequence<SimEngineRequest>, at: number): void {
    const flight = seq.request.flight;
    const r = this.wiring.replicas.get(flight.replica);
    r.active.delete(flight);
    const route = flight.trip.route;
    route?.router.release(route, at);
    const request = flight.trip.request;
    // Both as the client at the gateway sees them: from its arrival there to the token's return.
    const ttft = seq.firstTokenAt - request.arrivalAt + flight.backMs;
    const e2e = at - request.arrivalAt + flight.backMs;
    const gateway = request.gateway;
    const zone = r.info.zoneIndex;
    const good = ttft <= this.s.ttftObjectiveMs;
    this.wiring.measure.count(request.arrivalAt, (t) => {
      t.served++;
      t.servedTtft(ttft, request.priority, request.tenant, good);
      t.e2e.push(e2e);
      if (flight.attempt > 0) t.fallback++;
      (t.servedByZone[zone] as number)++;
      (t.servedByGateway[gateway] as number)++;
      if (zone !== gateway) {
        t.crossZone++;
        (t.crossZoneByGateway[gateway] as number)++;
      }
      t.prefixHitTokens += seq.cachedTokens;
      t.promptTokens += request.promptTokens;
    });
  }
}
