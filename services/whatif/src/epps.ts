import { Rng } from '@spillway/engine';
import type { StateBatch } from '@spillway/events';
import { Fleet } from '@spillway/fleet';
import type { SimEvent } from './events.js';
import type { KvChannel } from './kv-events.js';
import type { EventQueue } from './queue.js';
import type { ReplicaSet } from './replicas.js';
import type { ResolvedScenario } from './resolve.js';
import { createRouter, GLOBAL_ZONE, type EppRouter } from './routers.js';
import { PEER_TIMEOUT_MS, REMOTE_ENTRY_TTL_MS, SharingChannel } from './sharing.js';
import type { SignalBus } from './signals.js';
import { schedulerConfigFor, sharesState, type StrategySpec } from './strategies.js';

export interface Epp {
  readonly index: number;
  readonly zoneIndex: number;
  /** Its id on the shared-state channel: a new one per process (restart). */
  id: string;
  fleet: Fleet;
  router: EppRouter;
  restarts: number;
  /** Restarted while NATS was down: replays when it returns. */
  awaitingReplay: boolean;
}

/** Test and tooling hooks into a run; none of them can change it. */
export interface RunObserver {
  /** An EPP restarted at `at`: its fleet before, and the new one right after the replay (empty while NATS is down). */
  onEppRestart?(info: { readonly at: number; readonly zone: string; readonly before: Fleet; readonly after: Fleet }): void;
  /** NATS came back at `at`; the EPPs' fleets right after any delayed replay. */
  onNatsUp?(info: { readonly at: number; readonly fleets: readonly Fleet[] }): void;
}

/**
 * The run's EPPs: each a production `Fleet` and a router, per zone (`epps.perZone` of them) or,
 * for the reference, one pool-wide picker every gateway asks. With sharing (the default for
 * Spillway's strategies), every EPP of the pool folds the others' picks, prefix placements and
 * penalties into its own state after the channel's delay (sharing.ts). An EPP restart rebuilds
 * its fleet from the stream and starts a new router, warm-started from its peers when shared.
 */
export class EppSet {
  /** Every EPP, by index (filled by the constructor; the signal paths hold this array). */
  readonly all: Epp[];
  /** EPPs each gateway spreads its picks over. */
  private readonly gatewayEpps: Epp[][];
  private readonly gatewayNext: number[];
  private readonly spreadRng: Rng;
  /** The state channel between the EPPs, when this strategy's EPPs share state. */
  readonly sharing: SharingChannel | undefined;
  private kv: KvChannel | undefined;

  constructor(
    private readonly s: ResolvedScenario,
    private readonly strategy: StrategySpec,
    private readonly seed: number,
    private readonly wiring: {
      readonly queue: EventQueue<SimEvent>;
      readonly replicas: ReplicaSet;
      readonly signals: SignalBus;
      readonly global: boolean;
      readonly observer: RunObserver;
      /** The array to fill (shared with the signal paths). */
      readonly all: Epp[];
    },
  ) {
    this.spreadRng = new Rng((seed * 69_069 + 3) >>> 0);
    this.all = wiring.all;
    if (!wiring.global && sharesState(strategy, s.epps.sharing)) {
      const queue = wiring.queue;
      const schedule = (at: number, what: 'flush' | 'deliver', peer: number, batch?: StateBatch): void => {
        if (what === 'flush') queue.push(at, { kind: 'share-flush', peer });
        else if (batch) queue.push(at, { kind: 'share-deliver', peer, batch });
      };
      this.sharing = new SharingChannel({
        batchMs: s.epps.batchMs,
        delayMs: s.signals.sharingDelayMs,
        lossRate: s.signals.lossRate,
        rng: new Rng((seed * 7_919 + 11) >>> 0),
        schedule,
        up: () => wiring.signals.natsUp,
      });
    }
    if (wiring.global) {
      const epp = this.newEpp(0, 0);
      this.all.push(epp);
      this.gatewayEpps = s.zones.map(() => [epp]);
    } else {
      this.gatewayEpps = s.zones.map((_, zi) =>
        Array.from({ length: s.epps.perZone }, () => {
          const epp = this.newEpp(this.all.length, zi);
          this.all.push(epp);
          return epp;
        }),
      );
    }
    this.gatewayNext = s.zones.map(() => 0);
  }

  /** The KV channel an EPP's replay reads the oracle's caches from. */
  attachKv(kv: KvChannel): void {
    this.kv = kv;
  }

  /** The EPP a gateway asks next. */
  pick(gateway: number): Epp {
    const list = this.gatewayEpps[gateway];
    if (!list || list.length === 0) throw new Error(`no EPP for gateway #${gateway}`);
    if (list.length === 1) return list[0] as Epp;
    if (this.s.epps.spread === 'random') return list[this.spreadRng.int(list.length)] as Epp;
    const i = (this.gatewayNext[gateway] as number) % list.length;
    this.gatewayNext[gateway] = i + 1;
    return list[i] as Epp;
  }

  /** The EPPs of a restart fault: the zone's, or one of them. */
  restartFault(zone: number, index: number | undefined, now: number): void {
    if (this.wiring.global) return;
    const list = this.gatewayEpps[zone] ?? [];
    for (const epp of this.all) {
      if (epp.zoneIndex !== zone) continue;
      if (index !== undefined && list[index] !== epp) continue;
      this.restart(epp, now);
    }
  }

  /** NATS is back: EPPs that restarted during the outage replay now. */
  natsUp(now: number): void {
    for (const epp of this.all) if (epp.awaitingReplay) this.replay(epp, now);
    this.wiring.observer.onNatsUp?.({ at: now, fleets: this.all.map((e) => e.fleet) });
  }

  /**
   * An EPP restarts: a new fleet rebuilt from the last event per subject (the stream's replay,
   * staleness measured from each event's stream timestamp) and a new scheduler with empty
   * in-flight accounting, prefix index and penalties — filled from its peers' snapshots when the
   * EPPs share state (warm start). Requests it routed before are released to the old state, which
   * is gone with them.
   */
  private restart(epp: Epp, now: number): void {
    const before = epp.fleet;
    epp.restarts++;
    epp.id = `epp-${epp.index}-${epp.restarts}`;
    epp.fleet = new Fleet({ staleAfterMs: this.s.signals.staleAfterMs });
    epp.router = this.newRouter(epp.index, epp.zoneIndex, epp.fleet, epp.restarts, epp.id);
    if (this.wiring.signals.natsUp) this.replay(epp, now);
    else epp.awaitingReplay = true;
    const zone = this.s.zones[epp.zoneIndex]?.zone ?? '';
    this.wiring.observer.onEppRestart?.({ at: now, zone, before, after: epp.fleet });
  }

  private replay(epp: Epp, now: number): void {
    epp.awaitingReplay = false;
    for (const { event, storedAt } of this.wiring.signals.stream.values()) {
      if (event.kind === 'kv') epp.router.applyKvSnapshot?.(event, Math.min(storedAt, now));
      else epp.fleet.apply(event, Math.min(storedAt, now));
    }
    this.kv?.replayOracle(epp.router, now);
    // Then, as the EPP does before it reports ready, it asks its peers for their state.
    this.sharing?.warmStart(epp.index, now);
  }

  private newEpp(index: number, zoneIndex: number): Epp {
    const fleet = new Fleet({ staleAfterMs: this.s.signals.staleAfterMs });
    const id = `epp-${index}-0`;
    return { index, zoneIndex, id, fleet, router: this.newRouter(index, zoneIndex, fleet, 0, id), restarts: 0, awaitingReplay: false };
  }

  private newRouter(index: number, zoneIndex: number, fleet: Fleet, restarts: number, id: string): EppRouter {
    const zone = this.s.zones[zoneIndex];
    if (!zone) throw new Error(`no zone #${zoneIndex}`);
    const sharing = this.sharing;
    const outbox = sharing === undefined ? undefined : restarts === 0 ? sharing.join(index, zone.zone, id) : sharing.restart(index, id);
    const replicas = this.wiring.replicas;
    const global = this.wiring.global;
    const router = createRouter(this.strategy.kind, {
      replicas: replicas.all.map((r) => r.info),
      fleet,
      readyReplicas: () => replicas.readyReplicas(),
      localSubset: (z) => replicas.localSubset(z),
      zone: global ? GLOBAL_ZONE : zone.zone,
      region: global ? GLOBAL_ZONE : zone.region,
      seed: (this.seed * 13 + index * 101 + restarts * 7919 + 1) >>> 0,
      config: schedulerConfigFor(this.strategy, { zones: this.s.zones, rttMs: this.s.rttMs }),
      shared: outbox === undefined ? undefined : { outbox, peerTimeoutMs: PEER_TIMEOUT_MS, remoteEntryTtlMs: REMOTE_ENTRY_TTL_MS },
    });
    sharing?.attach(index, router.shared);
    return router;
  }
}
