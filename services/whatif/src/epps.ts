import { Rng } from '@spillway/engine';
import type { StateBatch } from '@spillway/events';
import { Fleet } from '@spillway/fleet';
import type { SimEvent } from './events.js';
import type { KvChannel } from './kv-events.js';
import type { Network } from './network.js';
import { failoverLevels, placePickers } from './placement.js';
import type { EventQueue } from './queue.js';
import type { ReplicaSet } from './replicas.js';
import type { ResolvedScenario } from './resolve.js';
import { createRouter } from './router-factory.js';
import type { EppRouter, Route } from './routers.js';
import { PEER_TIMEOUT_MS, REMOTE_ENTRY_TTL_MS, SharingChannel } from './sharing.js';
import type { SignalBus } from './signals.js';
import { DEPLOYMENTS, schedulerConfigFor, seesCompletion, sharesState, type Deployment, type StrategySpec } from './strategies.js';

export interface Epp {
  readonly index: number;
  /** The zone it runs in. */
  readonly zoneIndex: number;
  /** The replicas it picks among. */
  readonly scope: readonly number[];
  /** Its id on the shared-state channel: a new one per process (restart). */
  id: string;
  /** Its view fed by the collectors' events (the NATS path; stays empty on the others). */
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
  /** A message reached an EPP: what it was, the zones it crossed, when it left and when it arrived. */
  onMessage?(info: MessageInfo): void;
}

export interface MessageInfo {
  readonly kind: 'metrics' | 'readiness' | 'kv' | 'state';
  readonly fromZone: number;
  readonly toZone: number;
  readonly sentAt: number;
  readonly at: number;
}

/**
 * The run's pickers, deployed as the strategy is (`DEPLOYMENTS`): in each gateway, per zone
 * (`epps.perZone` for the Spillway kinds), one for the pool (in `epps.referenceZone`) or one per
 * region. Each gateway asks its chain of EPPs: its own, then — for the failover deployments — the
 * other zones' (regions') in Envoy priority order, and its own again when every pool is saturated.
 * With sharing (the Spillway kinds' default) every EPP folds the others' picks, prefix placements
 * and penalties into its own state after the channel's delay (sharing.ts). An EPP restart gives it
 * empty state: a fleet rebuilt from the stream (NATS path) and a new router, warm-started from its
 * peers when shared.
 */
export class EppSet {
  readonly all: Epp[] = [];
  readonly deployment: Deployment;
  /** The EPPs a gateway spreads its picks over (its own zone's or pool's). */
  private readonly gatewayEpps: Epp[][];
  /** Failover: each gateway's other pools, in priority order (same region first). */
  private readonly failoverLevels: Epp[][][];
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
      readonly network: Network;
      readonly observer: RunObserver;
      /** A held request's EPP answers it (flow control). */
      readonly answerHeld: (held: Route, outcome: Route, now: number) => void;
    },
  ) {
    this.deployment = DEPLOYMENTS[strategy.kind];
    this.spreadRng = new Rng((seed * 69_069 + 3) >>> 0);
    if (this.deployment.signals === 'nats' && sharesState(strategy, s.epps.sharing)) this.sharing = this.sharingChannel();
    this.gatewayEpps = placePickers(
      {
        zones: s.zones,
        replicas: wiring.replicas.all.map((r) => r.info),
        deployment: this.deployment,
        // Spillway's EPPs scale out per zone; a scraping EPP is active-passive: one per place.
        perZone: this.deployment.signals === 'nats' ? s.epps.perZone : 1,
        referenceZone: s.epps.referenceZone,
      },
      (zone, scope) => this.add(zone, scope),
    );
    this.failoverLevels = failoverLevels(this.gatewayEpps, s.zones);
    this.gatewayNext = s.zones.map(() => 0);
  }

  /** The KV channel an EPP's replay reads the oracle's caches from. */
  attachKv(kv: KvChannel): void {
    this.kv = kv;
  }

  /** EPPs fed by the collectors' events. */
  get natsEpps(): readonly Epp[] {
    return this.deployment.signals === 'nats' ? this.all : [];
  }

  /**
   * The EPPs a gateway asks for one request, in order: its own (spread over its zone's EPPs), then
   * for the failover deployments one EPP of each other priority level (drawn at random within the
   * level) and its own again, which answers whatever the load.
   */
  chain(gateway: number): readonly Epp[] {
    const own = this.pick(gateway);
    const levels = this.failoverLevels[gateway];
    if (!this.deployment.failover || !levels || levels.length === 0) return [own];
    const out = [own];
    for (const level of levels) {
      const order = level.slice();
      for (let i = order.length - 1; i > 0; i--) {
        const j = this.spreadRng.int(i + 1);
        [order[i], order[j]] = [order[j] as Epp, order[i] as Epp];
      }
      out.push(...order);
    }
    out.push(own);
    return out;
  }

  /** The EPPs located in a zone restart (all of them, or the zone's `index`-th). */
  restartFault(zone: number, index: number | undefined, now: number): void {
    if (this.deployment.placement === 'gateway') return;
    const local = this.all.filter((e) => e.zoneIndex === zone);
    local.forEach((epp, i) => {
      if (index === undefined || index === i) this.restart(epp, now);
    });
  }

  /** NATS is back: EPPs that restarted during the outage replay now. */
  natsUp(now: number): void {
    for (const epp of this.all) if (epp.awaitingReplay) this.replay(epp, now);
    this.wiring.observer.onNatsUp?.({ at: now, fleets: this.all.map((e) => e.fleet) });
  }

  private pick(gateway: number): Epp {
    const list = this.gatewayEpps[gateway];
    if (!list || list.length === 0) throw new Error(`no EPP for gateway #${gateway}`);
    if (list.length === 1) return list[0] as Epp;
    if (this.s.epps.spread === 'random') return list[this.spreadRng.int(list.length)] as Epp;
    const i = (this.gatewayNext[gateway] as number) % list.length;
    this.gatewayNext[gateway] = i + 1;
    return list[i] as Epp;
  }

  private add(zoneIndex: number, scope: readonly number[]): Epp {
    const index = this.all.length;
    const fleet = new Fleet({ staleAfterMs: this.s.signals.staleAfterMs });
    const id = `epp-${index}-0`;
    const partial = { index, zoneIndex, scope, id, fleet, restarts: 0, awaitingReplay: false };
    const epp: Epp = { ...partial, router: this.newRouter(partial) };
    this.all.push(epp);
    return epp;
  }

  private sharingChannel(): SharingChannel {
    const { queue, network, signals } = this.wiring;
    const schedule = (at: number, what: 'flush' | 'deliver', peer: number, batch?: StateBatch): void => {
      if (what === 'flush') queue.push(at, { kind: 'share-flush', peer });
      else if (batch) queue.push(at, { kind: 'share-deliver', peer, batch });
    };
    const rng = new Rng((this.seed * 7_919 + 11) >>> 0);
    // A batch between two EPPs crosses their zones' network: half the round trip plus the channel's own delay.
    const zoneOf = (peer: number): number => this.all[peer]?.zoneIndex ?? 0;
    return new SharingChannel({
      batchMs: this.s.epps.batchMs,
      delay: (from, to) => network.delay(zoneOf(from), zoneOf(to), this.s.signals.sharingDelayMs, rng),
      lossRate: this.s.signals.lossRate,
      rng,
      schedule,
      up: () => signals.natsUp,
    });
  }

  /**
   * An EPP restarts: a new fleet rebuilt from the last event per subject (the stream's replay,
   * staleness measured from each event's stream timestamp) and a new router with empty in-flight
   * accounting, prefix index and penalties — filled from its peers' snapshots when the EPPs share
   * state (warm start). A scraping EPP starts empty and learns the pods at its next scrapes.
   * Requests it routed before are released to the old state, which is gone with them.
   */
  private restart(epp: Epp, now: number): void {
    const before = epp.fleet;
    epp.restarts++;
    epp.id = `epp-${epp.index}-${epp.restarts}`;
    // Streams it held go with the process: the gateway answers them as it answers a lost EPP.
    epp.router.close?.(now);
    epp.fleet = new Fleet({ staleAfterMs: this.s.signals.staleAfterMs });
    epp.router = this.newRouter(epp);
    if (this.deployment.signals === 'nats') {
      if (this.wiring.signals.natsUp) this.replay(epp, now);
      else epp.awaitingReplay = true;
    }
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

  private newRouter(epp: Omit<Epp, 'router'>): EppRouter {
    const zone = this.s.zones[epp.zoneIndex];
    if (!zone) throw new Error(`no zone #${epp.zoneIndex}`);
    const sharing = this.sharing;
    const outbox =
      sharing === undefined
        ? undefined
        : epp.restarts === 0
          ? sharing.join(epp.index, zone.zone, epp.id)
          : sharing.restart(epp.index, epp.id);
    const replicas = this.wiring.replicas;
    const router = createRouter(this.strategy.kind, {
      replicas: replicas.all.map((r) => r.info),
      scope: epp.scope,
      isReady: (r) => replicas.get(r).gatewayReady,
      readyReplicas: () => replicas.readyReplicas(),
      localSubset: (z) => replicas.localSubset(z),
      zoneIndex: epp.zoneIndex,
      regionOf: (z) => this.s.zones[z]?.region ?? '',
      zone: zone.zone,
      region: zone.region,
      network: this.wiring.network,
      engines: this.s.engines,
      servesLora: this.s.workload.lora !== undefined,
      seed: (this.seed * 13 + epp.index * 101 + epp.restarts * 7919 + 1) >>> 0,
      fleet: epp.fleet,
      config: schedulerConfigFor(this.strategy, { zones: this.s.zones, rttMs: this.s.rttMs }),
      shared: outbox === undefined ? undefined : { outbox, peerTimeoutMs: PEER_TIMEOUT_MS, remoteEntryTtlMs: REMOTE_ENTRY_TTL_MS },
      seesCompletion: seesCompletion(this.strategy, this.s.epps.responseBody),
      flow: {
        answer: (held, outcome, now) => this.wiring.answerHeld(held, outcome, now),
        wakeAt: (at) => this.wiring.queue.push(at, { kind: 'flow-wake', epp: epp.index }),
      },
    });
    sharing?.attach(epp.index, router.shared);
    return router;
  }
}
