import type { EppSet } from './epps.js';
import type { SimEvent } from './events.js';
import type { KvChannel } from './kv-events.js';
import type { Measurements } from './measure.js';
import type { EventQueue } from './queue.js';
import type { ReplicaSet } from './replicas.js';
import type { ResolvedFault, ResolvedScenario } from './resolve.js';
import type { SignalBus } from './signals.js';

/**
 * The scenario's faults, applied at their times: replicas die (their requests abort; probes notice
 * `detectMs` later) and come back with empty caches; a zone's collector or NATS stops and
 * restarts (collectors then re-publish what they hold; a restarted collector's KV relays start
 * empty and say that they may not know every block, kv-relay.ts); EPPs restart.
 */
export class Faults {
  constructor(
    private readonly s: ResolvedScenario,
    private readonly wiring: {
      readonly queue: EventQueue<SimEvent>;
      readonly replicas: ReplicaSet;
      readonly signals: SignalBus;
      readonly epps: EppSet;
      readonly measure: Measurements;
      readonly kv: KvChannel;
    },
  ) {}

  start(): void {
    for (const fault of this.s.faults) this.wiring.queue.push(fault.atMs, { kind: 'fault', fault });
  }

  apply(f: ResolvedFault, now: number): void {
    const { replicas, signals, epps, kv } = this.wiring;
    switch (f.kind) {
      case 'replica-down':
        for (const i of f.replicas) this.kill(i, now);
        break;
      case 'replica-up':
        for (const i of f.replicas) this.revive(i, now);
        break;
      case 'collector-down':
        signals.collectorUp[f.zone] = false;
        kv.collectorDown(f.zone);
        break;
      case 'collector-up':
        signals.collectorUp[f.zone] = true;
        // A starting collector publishes every pod's readiness and a first sample at once, and
        // follows the servers' KV events from nothing (with what their replay sockets hold), saying
        // in each batch that its view is partial unless the replay reached back to the servers' start.
        for (const r of replicas.all) if (r.info.zoneIndex === f.zone) signals.publishCurrent(r, now);
        kv.collectorUp(f.zone, now);
        break;
      case 'nats-down':
        signals.natsUp = false;
        break;
      case 'nats-up':
        signals.natsUp = true;
        // EPPs that restarted during the outage replay now; collectors re-publish what they hold.
        epps.natsUp(now);
        for (const r of replicas.all) if (signals.collectorUp[r.info.zoneIndex]) signals.publishCurrent(r, now);
        break;
      case 'epp-restart':
        epps.restartFault(f.zone, f.index, now);
        break;
    }
  }

  /** Probes notice a dead replica (unless it came back meanwhile): gateways drop it, its readiness turns false. */
  detect(e: SimEvent<'detect'>, now: number): void {
    const r = this.wiring.replicas.get(e.replica);
    if (r.engine || r.generation !== e.generation) return;
    this.wiring.replicas.setGatewayReady(r, false);
    r.published = false;
    this.wiring.signals.publishReadiness(r, now, true);
  }

  private kill(index: number, now: number): void {
    const r = this.wiring.replicas.get(index);
    if (!r.engine) return;
    const measure = this.wiring.measure;
    // Requests on a dead replica fail mid-stream: the client sees an error (counted as aborted).
    for (const flight of this.wiring.replicas.kill(r)) {
      const route = flight.trip.route;
      route?.router.release(route, now);
      measure.count(flight.trip.request.arrivalAt, (t) => t.aborted++);
    }
    this.wiring.queue.push(now + this.s.signals.detectMs, { kind: 'detect', replica: index, generation: r.generation });
  }

  private revive(index: number, now: number): void {
    const r = this.wiring.replicas.get(index);
    if (r.engine) return;
    this.wiring.replicas.revive(r, now);
    this.wiring.signals.publishCurrent(r, now);
  }
}
