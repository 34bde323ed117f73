import { Rng, type EngineStats } from '@spillway/engine';
import type { KvSnapshotEvent, MetricsEvent, ReadinessEvent, ServiceRates } from '@spillway/events';
import type { Fleet } from '@spillway/fleet';
import type { SimEvent } from './events.js';
import type { EventQueue } from './queue.js';
import type { ReplicaSet, ReplicaState } from './replicas.js';
import type { ResolvedScenario } from './resolve.js';
import type { Network } from './network.js';
import { POOL } from './routers.js';

/** An event as the stream keeps it: the last per (pod, kind), with its stream time. */
export interface Stored {
  readonly event: MetricsEvent | ReadinessEvent | KvSnapshotEvent;
  readonly storedAt: number;
}

/** What the signal path needs of an EPP: where it runs and where events land. */
export interface EventSink {
  readonly index: number;
  readonly zoneIndex: number;
  readonly fleet: Fleet;
}

/**
 * The collectors and NATS (the signal path of Spillway's EPPs and of the per-zone baselines fed by
 * the same events): every replica's metrics every `sampleEveryMs` and its readiness at start, on
 * changes and every re-publish period, each stored as the stream keeps it (the last per subject)
 * and delivered to every such EPP after half the round trip between the pod's zone and the EPP's
 * plus the path's own jitter (`delayMs`). Collectors and NATS can be down: nothing leaves then,
 * and what is in flight when NATS goes down is lost with it.
 */
export class SignalBus {
  /** The stream: last event per (pod, kind), as JetStream keeps it (max_msgs_per_subject 1). */
  readonly stream = new Map<string, Stored>();
  natsUp = true;
  readonly collectorUp: boolean[];
  private readonly jitter: Rng;
  private readonly lossRng: Rng;

  constructor(
    private readonly s: ResolvedScenario,
    seed: number,
    private readonly wiring: {
      readonly queue: EventQueue<SimEvent>;
      readonly replicas: ReplicaSet;
      readonly network: Network;
      /** The EPPs fed by these events (filled once they exist). */
      readonly epps: readonly EventSink[];
      /** An event was applied to an EPP's fleet (window counts, the observer). */
      onDelivered(
        now: number,
        message: {
          readonly kind: 'metrics' | 'readiness';
          readonly observedAt: number;
          readonly fromZone: number;
          readonly toZone: number;
        },
      ): void;
    },
  ) {
    this.jitter = new Rng((seed * 2_654_435_761) >>> 0);
    this.lossRng = new Rng((seed * 40_503 + 7) >>> 0);
    this.collectorUp = s.zones.map(() => true);
  }

  /**
   * t = 0: every EPP has the readiness of every replica and one idle sample (a replayed stream);
   * the schedules start. Nothing to do when no picker is fed by these events.
   */
  start(): void {
    if (this.wiring.epps.length === 0) return;
    const s = this.s;
    const { replicas, queue } = this.wiring;
    const interval = s.signals.sampleEveryMs;
    const republish = s.signals.readinessEveryS * 1000;
    for (const r of replicas.all) {
      this.publishReadiness(r, 0, false);
      this.publishMetrics(r, 0, false);
      const phase = (r.info.index + 0.5) / replicas.all.length;
      queue.push(phase * interval, { kind: 'sample', replica: r.info.index });
      queue.push(phase * republish, { kind: 'readiness', replica: r.info.index });
    }
  }

  /** Can a collector of this zone publish now? */
  canPublish(zoneIndex: number): boolean {
    return this.natsUp && this.collectorUp[zoneIndex] === true;
  }

  sample(e: SimEvent<'sample'>, now: number): void {
    const r = this.wiring.replicas.get(e.replica);
    const every = this.s.signals.sampleEveryMs;
    if (now + every < this.s.durationMs) this.wiring.queue.push(now + every, { kind: 'sample', replica: e.replica });
    if (r.engine) this.publishMetrics(r, now, true);
  }

  republish(e: SimEvent<'readiness'>, now: number): void {
    const r = this.wiring.replicas.get(e.replica);
    const every = this.s.signals.readinessEveryS * 1000;
    if (now + every < this.s.durationMs) this.wiring.queue.push(now + every, { kind: 'readiness', replica: e.replica });
    this.publishReadiness(r, now, true);
  }

  deliver(e: SimEvent<'deliver'>, now: number): void {
    // Messages inside NATS when it goes down are lost with it.
    if (!this.natsUp) return;
    const epp = this.wiring.epps[e.epp];
    if (!epp) return;
    epp.fleet.apply(e.message, now);
    const fromZone = this.s.zones.findIndex((z) => z.zone === e.message.zone);
    this.wiring.onDelivered(now, { kind: e.message.kind, observedAt: e.message.observedAt, fromZone, toZone: epp.zoneIndex });
  }

  /** A starting collector (or NATS coming back) publishes the pod's readiness and a sample at once. */
  publishCurrent(r: ReplicaState, now: number): void {
    this.publishReadiness(r, now, true);
    if (r.engine) this.publishMetrics(r, now, true);
  }

  publishMetrics(r: ReplicaState, now: number, delayed: boolean): void {
    const engine = r.engine;
    if (!engine) return;
    const event: MetricsEvent = {
      v: 1,
      kind: 'metrics',
      pool: POOL,
      zone: r.info.zone,
      pod: r.info.pod,
      observedAt: now,
      waitingRequests: engine.waitingCount,
      runningRequests: engine.runningCount,
      kvCacheUsage: engine.kvUsage,
      cache: { blockSize: engine.config.blockSize, numBlocks: engine.config.numBlocks },
    };
    // vLLM's lora_requests_info, when the server serves adapters.
    if (engine.config.maxLoras > 0 && this.s.workload.lora) event.lora = engine.loraInfo();
    const rates = this.ratesOf(r, engine.stats(), now);
    if (rates !== undefined) event.rates = rates;
    this.publish(r, event, now, delayed);
  }

  publishReadiness(r: ReplicaState, now: number, delayed: boolean): void {
    const event: ReadinessEvent = {
      v: 1,
      kind: 'readiness',
      pool: POOL,
      zone: r.info.zone,
      region: r.info.region,
      pod: r.info.pod,
      address: r.info.address,
      ready: r.published,
      observedAt: now,
    };
    this.publish(r, event, now, delayed);
  }

  /** What the zone's collector computes from the server's counters (2 s sliding window). */
  private ratesOf(r: ReplicaState, st: EngineStats, now: number): ServiceRates | undefined {
    return r.rates.update(now, {
      promptTokens: st.promptTokens,
      generationTokens: st.generationTokens,
      requests: st.finished,
      ttft: { sumMs: st.ttftSumMs, count: st.ttftCount },
      queue: { sumMs: st.queueSumMs, count: st.queueCount },
      // vLLM's inter_token_latency_seconds, which the collector reads as the window's inter-token time.
      itl: { sumMs: st.itlSumMs, count: st.itlCount },
      // vLLM's request_prefill_time_seconds, as the simulator exposes it and the collector reads it.
      prefill: { sumMs: st.prefillSumMs, count: st.prefillCount },
      prefixHits: st.prefixHitTokens,
      prefixQueries: st.prefixQueryTokens,
    }).rates;
  }

  /**
   * A collector publishes: nothing leaves while its zone's collector or NATS is down. What leaves
   * is stored (last per subject) and delivered to every EPP after its own delay; metric samples
   * may be lost on the way (`lossRate`), readiness is acknowledged and never lost.
   */
  private publish(r: ReplicaState, event: MetricsEvent | ReadinessEvent, now: number, delayed: boolean): void {
    if (!this.canPublish(r.info.zoneIndex)) return;
    this.stream.set(`${r.info.pod}/${event.kind}`, { event, storedAt: now });
    const { delayMs, lossRate } = this.s.signals;
    for (const epp of this.wiring.epps) {
      if (!delayed) {
        epp.fleet.apply(event, now);
        continue;
      }
      if (event.kind === 'metrics' && lossRate > 0 && this.lossRng.next() < lossRate) continue;
      const delay = this.wiring.network.delay(r.info.zoneIndex, epp.zoneIndex, delayMs, this.jitter);
      this.wiring.queue.push(now + delay, { kind: 'deliver', epp: epp.index, message: event });
    }
  }
}
