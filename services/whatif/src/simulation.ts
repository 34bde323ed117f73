import { EppSet, type Epp, type RunObserver } from './epps.js';
import { dispatch, type Handlers, type SimEvent } from './events.js';
import { Faults } from './faults.js';
import { Gateways } from './gateway.js';
import { KvChannel, type KvMode } from './kv-events.js';
import { Measurements, type RunResult } from './measure.js';
import { Network } from './network.js';
import { EventQueue } from './queue.js';
import { ReplicaSet } from './replicas.js';
import type { ResolvedScenario } from './resolve.js';
import { Scraper } from './scraper.js';
import { HEARTBEAT_MS } from './sharing.js';
import { SignalBus } from './signals.js';
import { PRECISE_KINDS, type StrategySpec } from './strategies.js';

export type { RunObserver } from './epps.js';
export type { RunResult, WindowResult } from './measure.js';

/**
 * The routing simulation: a deterministic discrete-event run in virtual time (ms) of one gateway
 * per zone in front of `@spillway/engine` replicas, with the strategy's pickers deployed as it
 * would be (epps.ts) and each on its own signal path: the collectors' events over NATS
 * (signals.ts, kv-events.ts; Spillway's EPPs share state, sharing.ts), the picker's own scrapes
 * (scraper.ts), or ORCA reports in the responses (gateway.ts). Every message between zones takes
 * at least half their round trip (network.ts). Engines keep their own clocks; before each event
 * every engine is advanced to its time, so completions (and the pickers' releases) happen in order.
 *
 * The parts, each in its own module: replicas (replicas.ts), gateways (gateway.ts), faults
 * (faults.ts) and what is measured (measure.ts). Each event kind has one handler (events.ts).
 */
export function runStrategy(scenario: ResolvedScenario, strategy: StrategySpec, seed: number, observer: RunObserver = {}): RunResult {
  return new Simulation(scenario, strategy, seed, observer).run();
}

class Simulation {
  private readonly queue = new EventQueue<SimEvent>();
  private readonly replicas: ReplicaSet;
  private readonly signals: SignalBus;
  private readonly epps: EppSet;
  private readonly kv: KvChannel;
  private readonly scraper: Scraper;
  private readonly gateways: Gateways;
  private readonly faults: Faults;
  private readonly measure: Measurements;
  private readonly handlers: Handlers;

  constructor(
    private readonly s: ResolvedScenario,
    private readonly strategy: StrategySpec,
    private readonly seed: number,
    private readonly observer: RunObserver,
  ) {
    const kvMode: KvMode = PRECISE_KINDS.includes(strategy.kind) ? (strategy.kind === 'oracle' ? 'oracle' : 'relay') : 'off';
    const queue = this.queue;
    const network = new Network(s.rttMs);
    // Filled once the EPPs exist: the pickers each signal path feeds.
    const natsEpps: Epp[] = [];
    const scrapeEpps: Epp[] = [];
    const kvReplay = { mode: strategy.kvReplay ?? s.signals.kvReplay, tailMs: s.signals.kvReplayTailS * 1000 };
    this.replicas = new ReplicaSet(s, seed, kvMode !== 'off' ? kvReplay : undefined, {
      onFinish: (seq, at) => this.gateways.finish(seq, at),
      onBlocksStored: (r, seq, range, at) => this.kv.stored(r, seq, range, at),
    });
    const replicas = this.replicas;
    this.signals = new SignalBus(s, seed, {
      queue,
      replicas,
      network,
      epps: natsEpps,
      onDelivered: (now, m) => {
        this.measure.delivered(now);
        observer.onMessage?.({ kind: m.kind, fromZone: m.fromZone, toZone: m.toZone, sentAt: m.observedAt, at: now });
      },
    });
    this.epps = new EppSet(s, strategy, seed, {
      queue,
      replicas,
      signals: this.signals,
      network,
      observer,
      answerHeld: (held, outcome, now) => this.gateways.answerHeld(held, outcome, now),
    });
    if (this.epps.deployment.signals === 'nats') natsEpps.push(...this.epps.all);
    if (this.epps.deployment.signals === 'scrape') scrapeEpps.push(...this.epps.all);
    this.kv = new KvChannel(s, seed, kvMode, { queue, replicas, network, epps: natsEpps, signals: this.signals, observer });
    this.epps.attachKv(this.kv);
    this.scraper = new Scraper(s, seed, { queue, replicas, network, epps: scrapeEpps });
    this.measure = new Measurements(s, { queue, replicas, routers: () => this.epps.all.map((e) => e.router) });
    this.gateways = new Gateways(s, seed, { queue, replicas, epps: this.epps, kv: this.kv, measure: this.measure, network });
    this.faults = new Faults(s, { queue, replicas, signals: this.signals, epps: this.epps, measure: this.measure, kv: this.kv });
    this.handlers = this.handlersOf();
  }

  private handlersOf(): Handlers {
    const sharing = this.epps.sharing;
    const durationMs = this.s.durationMs;
    const router = (epp: number) => this.epps.all[epp]?.router;
    return {
      arrival: (e, at) => this.gateways.arrive(e, at),
      decide: (e, at) => this.gateways.decide(e, at),
      dispatch: (e, at) => this.gateways.dispatch(e, at),
      sample: (e, at) => this.signals.sample(e, at),
      readiness: (e, at) => this.signals.republish(e, at),
      deliver: (e, at) => {
        this.signals.deliver(e, at);
        // A sample may show room for requests flow control holds.
        router(e.epp)?.onRoom?.(at);
      },
      'scrape-read': (e, at) => this.scraper.read(e, at),
      'scrape-reply': (e, at) => this.scraper.reply(e, at),
      'load-report': (e, at) => router(e.epp)?.applyLoadReport?.(e.replica, e.utilization, at),
      'router-tick': (e, at) => {
        const r = router(e.epp);
        if (!r?.tickEveryMs) return;
        r.tick?.(at);
        if (at + r.tickEveryMs < durationMs) this.queue.push(at + r.tickEveryMs, { kind: 'router-tick', epp: e.epp });
      },
      'flow-wake': (e, at) => router(e.epp)?.wake?.(at),
      fault: (e, at) => this.faults.apply(e.fault, at),
      detect: (e, at) => this.faults.detect(e, at),
      mark: (e) => this.measure.mark(e),
      probe: (_e, at) => this.measure.probe(at),
      backlog: (_e, at) => this.measure.backlogSample(at),
      'share-flush': (e, at) => sharing?.flush(e.peer, at),
      'share-deliver': (e, at) => {
        sharing?.deliver(e.peer, e.batch, at);
        // A peer's releases may show room too.
        router(e.peer)?.onRoom?.(at);
        const to = this.epps.all[e.peer];
        if (to && this.observer.onMessage) {
          const fromZone = this.s.zones.findIndex((z) => z.zone === e.batch.zone);
          this.observer.onMessage({ kind: 'state', fromZone, toZone: to.zoneIndex, sentAt: e.batch.sentAt, at });
        }
      },
      'share-tick': (_e, at) => {
        sharing?.tick(at);
        if (at + HEARTBEAT_MS < durationMs) this.queue.push(at + HEARTBEAT_MS, { kind: 'share-tick' });
      },
      'kv-flush': (e, at) => this.kv.flush(e, at),
      'kv-snapshot': (e, at) => this.kv.snapshot(e, at),
      'kv-deliver': (e, at) => this.kv.deliver(e, at),
    };
  }

  run(): RunResult {
    this.signals.start();
    this.gateways.start();
    this.measure.start();
    this.faults.start();
    this.measure.startSamplers();
    const sharing = this.epps.sharing;
    if (sharing) this.queue.push(HEARTBEAT_MS, { kind: 'share-tick' });
    this.kv.start();
    this.scraper.start();
    for (const epp of this.epps.all) {
      const every = epp.router.tickEveryMs;
      if (every) this.queue.push(every, { kind: 'router-tick', epp: epp.index });
    }

    for (let e = this.queue.pop(); e !== undefined; e = this.queue.pop()) {
      if (!Number.isFinite(e.at)) continue;
      this.replicas.advance(e.at);
      if (sharing) sharing.now = e.at;
      dispatch(this.handlers, e.event, e.at);
    }
    // Drain: no more arrivals or picks, so engines can run to completion one after another.
    const pending = this.replicas.drain();
    if (pending !== 0) throw new Error(`simulation ended with ${pending} requests in flight`);
    return this.measure.result(this.strategy.name, this.seed);
  }
}
