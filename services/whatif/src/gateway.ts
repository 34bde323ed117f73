import type { Sequence } from '@spillway/engine';
import type { EppSet } from './epps.js';
import type { SimEvent } from './events.js';
import type { KvChannel } from './kv-events.js';
import type { Measurements } from './measure.js';
import type { EventQueue } from './queue.js';
import type { Flight, ReplicaSet, SimEngineRequest } from './replicas.js';
import type { ResolvedScenario } from './resolve.js';
import { ArrivalStream, prefixGroupsOf } from './workload.js';

/**
 * One gateway per zone: its arrivals (the same sequence for every strategy of a seed), the EPP it
 * asks, and the walk down the returned list as Envoy's override_host does it; and what happens
 * when a request ends (its figures go to every range holding its arrival time).
 */
export class Gateways {
  private readonly streams: ArrivalStream[];

  constructor(
    private readonly s: ResolvedScenario,
    seed: number,
    private readonly wiring: {
      readonly queue: EventQueue<SimEvent>;
      readonly replicas: ReplicaSet;
      readonly epps: EppSet;
      readonly kv: KvChannel;
      readonly measure: Measurements;
    },
  ) {
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
    const { queue, replicas, measure } = this.wiring;
    const stream = this.streams[gateway];
    const request = stream?.next();
    if (!stream || !request) return;
    queue.push(stream.peekAt(), { kind: 'arrival', gateway });
    measure.count(request.arrivalAt, (range) => {
      range.arrivals++;
      (range.arrivalsByZone[gateway] as number)++;
    });

    this.wiring.kv.beforePick(now);
    const route = this.wiring.epps.pick(gateway).router.route(request, gateway, now);
    if (route.status !== 'routed') {
      measure.count(request.arrivalAt, (t) => (route.status === 429 ? t.rejected429++ : t.rejected503++));
      return;
    }
    // The gateway walks the list: a dead replica refuses the connection, a full queue answers 503;
    // either costs a round trip to that replica and moves on to the next entry.
    let extraMs = 0;
    for (let i = 0; i < route.list.length; i++) {
      const replica = route.list[i] as number;
      const r = replicas.get(replica);
      const rtt = this.s.rttMs[gateway]?.[r.info.zoneIndex] ?? 0;
      if (!r.engine) {
        extraMs += Math.max(rtt, 0.2);
        continue;
      }
      const flight: Flight = { request, route, replica, attempt: i, networkMs: extraMs + rtt };
      const seq = r.engine.submit(
        {
          promptTokens: request.promptTokens,
          outputTokens: request.outputTokens,
          blockHashes: request.blockHashes,
          networkDelayMs: flight.networkMs,
          flight,
        },
        now,
      );
      if (seq.state === 'rejected') {
        extraMs += Math.max(rtt, 0.2);
        continue;
      }
      r.active.add(flight);
      measure.backlog++;
      route.router.served(route, replica, now);
      return;
    }
    route.router.release(route, now);
    measure.count(request.arrivalAt, (t) => t.rejected503++);
  }

  /** A request's last token: its figures, and its EPP's in-flight accounting released. */
  finish(seq: Sequence<SimEngineRequest>, at: number): void {
    const flight = seq.request.flight;
    const r = this.wiring.replicas.get(flight.replica);
    r.active.delete(flight);
    this.wiring.measure.backlog--;
    flight.route.router.release(flight.route, at);
    const request = flight.request;
    const ttft = seq.ttftMs;
    const e2e = at - request.arrivalAt + flight.networkMs;
    const gateway = request.gateway;
    const zone = r.info.zoneIndex;
    this.wiring.measure.count(request.arrivalAt, (t) => {
      t.served++;
      t.ttft.push(ttft);
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
