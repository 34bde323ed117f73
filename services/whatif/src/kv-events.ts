import { Rng, type Sequence } from '@spillway/engine';
import type { KvBatch, KvSnapshotEvent } from '@spillway/events';
import type { SimEvent } from './events.js';
import type { KvRelay } from './kv-relay.js';
import type { Network } from './network.js';
import type { RunObserver } from './epps.js';
import type { EventQueue } from './queue.js';
import type { ReplicaSet, ReplicaState, SimEngineRequest } from './replicas.js';
import type { ResolvedScenario } from './resolve.js';
import type { EppRouter } from './routers.js';
import { POOL } from './routers.js';
import type { SignalBus } from './signals.js';

/** KV events: relayed in batches with delay and loss, or (oracle) applied to every EPP the instant they happen. */
export type KvMode = 'off' | 'relay' | 'oracle';
/** Tokens per block of the workload's block hashes and content keys. */
export const KV_BLOCK_SIZE = 16;

/** What the KV path needs of an EPP: the router whose block index it feeds. */
export interface KvSink {
  readonly index: number;
  readonly zoneIndex: number;
  readonly router: EppRouter;
}

/**
 * The precise strategies' KV events, as each replica's collector relays them: prompt blocks the
 * engine stores and evicts become content keys (KvRelay); a batch leaves every `kvBatchMs` and a
 * snapshot of the pod's block set every `kvSnapshotEveryS` (stored in the stream, so a restarted
 * EPP replays it); each reaches every EPP after half the round trip between their zones plus the
 * path's jitter (`kvDelayMs`), in order per replica, unless lost.
 * The oracle instead applies every event to every EPP the instant it happens.
 */
export class KvChannel {
  private readonly rng: Rng;

  constructor(
    private readonly s: ResolvedScenario,
    seed: number,
    readonly mode: KvMode,
    private readonly wiring: {
      readonly queue: EventQueue<SimEvent>;
      readonly replicas: ReplicaSet;
      readonly network: Network;
      readonly epps: readonly KvSink[];
      readonly signals: SignalBus;
      readonly observer: RunObserver;
    },
  ) {
    this.rng = new Rng((seed * 48_271 + 5) >>> 0);
  }

  /** The relays' schedules (relay mode only). */
  start(): void {
    if (this.mode !== 'relay') return;
    const { replicas, queue } = this.wiring;
    for (const r of replicas.all) {
      const phase = (r.info.index + 0.5) / replicas.all.length;
      queue.push(phase * this.s.signals.kvBatchMs, { kind: 'kv-flush', replica: r.info.index });
      queue.push(phase * this.s.signals.kvSnapshotEveryS * 1000, { kind: 'kv-snapshot', replica: r.info.index });
    }
  }

  /** The engine stored prompt blocks `[from, to)` of a request: the relay records them (the oracle applies them at once). */
  stored(r: ReplicaState, seq: Sequence<SimEngineRequest>, range: { from: number; to: number }, at: number): void {
    const relay = r.kv;
    const request = seq.request.flight.trip.request;
    if (relay === undefined || request.blockHashes === undefined || request.contentKeys === undefined) return;
    relay.stored(request.blockHashes, request.contentKeys, range.from, range.to, at);
    if (this.mode === 'oracle') this.applyNow(r, at);
  }

  /** Oracle: before a pick, every EPP learns every replica's pending events. */
  beforePick(now: number): void {
    if (this.mode === 'oracle') for (const r of this.wiring.replicas.all) this.applyNow(r, now);
  }

  /** The collector relays the batch built since the last flush: lost with NATS or the collector down, else per EPP after a delay (in order), or lost at kvLossRate. */
  flush(e: SimEvent<'kv-flush'>, now: number): void {
    const r = this.wiring.replicas.get(e.replica);
    const s = this.s.signals;
    if (now + s.kvBatchMs < this.s.durationMs) this.wiring.queue.push(now + s.kvBatchMs, { kind: 'kv-flush', replica: e.replica });
    const relay = r.kv;
    const taken = relay?.take(now);
    if (relay === undefined || taken === undefined || !this.wiring.signals.canPublish(r.info.zoneIndex)) return;
    this.send(r, relay, this.batch(r, taken, now), now);
  }

  /** The collector publishes the pod's block set into the stream (last per subject), and every EPP receives it. */
  snapshot(e: SimEvent<'kv-snapshot'>, now: number): void {
    const r = this.wiring.replicas.get(e.replica);
    const every = this.s.signals.kvSnapshotEveryS * 1000;
    if (now + every < this.s.durationMs) this.wiring.queue.push(now + every, { kind: 'kv-snapshot', replica: e.replica });
    const relay = r.kv;
    if (relay === undefined || !r.engine || !this.wiring.signals.canPublish(r.info.zoneIndex)) return;
    const event = this.snapshotOf(r, relay, now);
    this.wiring.signals.stream.set(`${r.info.pod}/kv`, { event, storedAt: now });
    this.send(r, relay, event, now);
  }

  /** A zone's collector stops (relay mode: the oracle knows every cache whatever the collectors do). */
  collectorDown(zone: number): void {
    if (this.mode !== 'relay') return;
    for (const r of this.wiring.replicas.all) if (r.info.zoneIndex === zone) r.kv?.collectorDown();
  }

  /** A new collector starts in the zone: each of its relays starts empty and recovers per the servers' replay socket (KvRelay.collectorUp). */
  collectorUp(zone: number, now: number): void {
    if (this.mode !== 'relay') return;
    for (const r of this.wiring.replicas.all) if (r.info.zoneIndex === zone) r.kv?.collectorUp(now);
  }

  deliver(e: SimEvent<'kv-deliver'>, now: number): void {
    if (!this.wiring.signals.natsUp) return;
    const epp = this.wiring.epps[e.epp];
    const router = epp?.router;
    const message = e.message;
    if (epp && this.wiring.observer.onMessage) {
      const fromZone = this.s.zones.findIndex((z) => z.zone === message.zone);
      this.wiring.observer.onMessage({ kind: 'kv', fromZone, toZone: epp.zoneIndex, sentAt: message.observedAt, at: now });
    }
    if ('kind' in message) router?.applyKvSnapshot?.(message, now);
    else router?.applyKvBatch?.(message, now);
  }

  /** The oracle knows every cache exactly, across restarts too: a fresh snapshot of every replica for a restarted EPP. */
  replayOracle(router: EppRouter, now: number): void {
    if (this.mode !== 'oracle') return;
    for (const r of this.wiring.replicas.all) if (r.kv) router.applyKvSnapshot?.(this.snapshotOf(r, r.kv, now), now);
  }

  private snapshotOf(r: ReplicaState, relay: KvRelay, now: number): KvSnapshotEvent {
    return {
      v: 1,
      kind: 'kv',
      pool: POOL,
      zone: r.info.zone,
      pod: r.info.pod,
      observedAt: now,
      blockSize: KV_BLOCK_SIZE,
      seq: relay.seq,
      keys: relay.snapshotKeys(),
      known: relay.snapshotKnown(),
    };
  }

  private batch(r: ReplicaState, taken: { seq: number; events: KvBatch['events'] }, now: number): KvBatch {
    const relay = r.kv as KvRelay;
    return {
      v: 1,
      pool: POOL,
      zone: r.info.zone,
      pod: r.info.pod,
      seq: taken.seq,
      observedAt: now,
      blockSize: KV_BLOCK_SIZE,
      events: taken.events,
      known: relay.known(),
    };
  }

  /** Oracle: every EPP learns the replica's events the instant they happen (no batching, delay or loss). */
  private applyNow(r: ReplicaState, now: number): void {
    const taken = r.kv?.take(now);
    if (taken === undefined) return;
    const batch = this.batch(r, taken, now);
    for (const epp of this.wiring.epps) epp.router.applyKvBatch?.(batch, now);
  }

  private send(r: ReplicaState, relay: KvRelay, message: KvBatch | KvSnapshotEvent, now: number): void {
    const { kvDelayMs, kvLossRate } = this.s.signals;
    for (const epp of this.wiring.epps) {
      if (kvLossRate > 0 && this.rng.next() < kvLossRate) continue;
      const delay = this.wiring.network.delay(r.info.zoneIndex, epp.zoneIndex, kvDelayMs, this.rng);
      const at = Math.max(now + delay, relay.deliveredAt[epp.index] ?? 0);
      relay.deliveredAt[epp.index] = at;
      this.wiring.queue.push(at, { kind: 'kv-deliver', epp: epp.index, message });
    }
  }
}
