import { Engine, Rng, type EngineRequest, type PresetName, type Sequence } from '@spillway/engine';
import type { MetricsEvent, ReadinessEvent } from '@spillway/events';
import { Fleet } from '@spillway/fleet';
import type { SchedulerConfigInput } from '@spillway/scheduler';
import { EventQueue } from './queue.js';
import { createRouter, decisionOf, GLOBAL_ZONE, POOL, type Route, type Router, type RouterContext, type StrategySpec } from './routers.js';
import { summarize, type Tally, type SimResult } from './stats.js';
import { DEFAULT_NETWORK, layout, rttMs, type NetworkSpec, type ReplicaInfo, type ZoneSpec } from './topology.js';
import { ArrivalStream, PrefixGroups, type SimRequest, type WorkloadSpec } from './workload.js';

/**
 * The routing simulation: a deterministic discrete-event run in virtual time (milliseconds) of
 * one zone gateway + one EPP per zone in front of `@spillway/engine` replicas. The EPPs are the
 * production `Scheduler` and `Fleet`; metrics reach each EPP's fleet as v1 events every sample
 * interval after a jittered propagation delay, readiness events at start and when replicas die or
 * return. Engines keep their own token heaps; before each simulation event every engine is
 * advanced to its time, so request completions (and the EPP's in-flight releases) happen in order.
 */
export interface ReplicaFailure {
  /** Zone index and how many of its replicas (the first ones) die. */
  readonly zone: number;
  readonly count: number;
  readonly atMs: number;
  /** They come back (empty caches) at this time; never when absent. */
  readonly returnAtMs?: number;
}

export interface SimOptions {
  readonly seed: number;
  readonly zones: readonly ZoneSpec[];
  readonly strategy: StrategySpec;
  readonly workload: WorkloadSpec;
  /** Arrival rate per zone gateway (requests per second). */
  readonly rates: readonly number[];
  /** Arrivals stop at durationMs; the run then drains. Statistics cover arrivals in [warmupMs, durationMs). */
  readonly durationMs: number;
  readonly warmupMs: number;
  readonly preset?: PresetName;
  readonly maxNumSeqs?: number;
  readonly numBlocks?: number;
  readonly maxWaiting?: number;
  readonly network?: NetworkSpec;
  /** Metric sample interval and the propagation delay range to each EPP. */
  readonly sampleIntervalMs?: number;
  readonly delayMinMs?: number;
  readonly delayMaxMs?: number;
  /** Time from a replica's death until readiness says so (probe failures) and the gateways drop it. */
  readonly detectMs?: number;
  readonly failures?: readonly ReplicaFailure[];
  /** Extra scheduler config for the scheduler-based strategies (merged over the strategy's). */
  readonly scheduler?: SchedulerConfigInput;
}

interface SimEngineRequest extends EngineRequest {
  readonly flight: Flight;
}

interface Flight {
  readonly request: SimRequest;
  readonly route: Route;
  readonly replica: number;
  readonly networkMs: number;
}

interface ReplicaState {
  readonly info: ReplicaInfo;
  engine: Engine<SimEngineRequest> | undefined;
  readonly active: Set<Flight>;
  /** Gateways' view (Kubernetes endpoints), updated `detectMs` after a death. */
  gatewayReady: boolean;
  /** Counters of engines that died, so totals survive restarts. */
  retiredTokens: number;
  retiredHits: number;
  retiredQueries: number;
  generation: number;
}

type Kind = 'arrival' | 'sample' | 'deliver' | 'kill' | 'detect' | 'revive' | 'mark';

export function runSimulation(options: SimOptions): SimResult {
  return new Simulation(options).run();
}

class Simulation {
  private readonly queue = new EventQueue<Kind>();
  private readonly replicas: ReplicaState[];
  private readonly fleets: Fleet[];
  private readonly router: Router;
  private readonly streams: ArrivalStream[];
  private readonly net: NetworkSpec;
  private readonly jitter: Rng;
  private readonly tally: Tally;
  private readonly globalView: boolean;
  private readonly interval: number;
  private readonly delayMin: number;
  private readonly delayMax: number;
  private readySnapshot: number[] | undefined;
  private readonly subsetCache: (string[] | undefined)[];
  private tokensAtWarmup = 0;
  private tokensAtEnd = 0;

  constructor(private readonly o: SimOptions) {
    this.net = o.network ?? DEFAULT_NETWORK;
    this.interval = o.sampleIntervalMs ?? 100;
    this.delayMin = o.delayMinMs ?? 5;
    this.delayMax = o.delayMaxMs ?? 20;
    this.jitter = new Rng((o.seed * 2_654_435_761) >>> 0);
    this.globalView = o.strategy.kind === 'reference';
    this.replicas = layout(o.zones).map((info) => ({
      info,
      engine: undefined,
      active: new Set<Flight>(),
      gatewayReady: true,
      retiredTokens: 0,
      retiredHits: 0,
      retiredQueries: 0,
      generation: 0,
    }));
    for (const r of this.replicas) r.engine = this.newEngine(r);
    this.fleets = o.zones.map(() => new Fleet({ staleAfterMs: 1000 }));
    this.subsetCache = o.zones.map(() => undefined);
    const strategy: StrategySpec = o.scheduler ? { ...o.strategy, scheduler: { ...o.strategy.scheduler, ...o.scheduler } } : o.strategy;
    const ctx: RouterContext = {
      zones: o.zones,
      replicas: this.replicas.map((r) => r.info),
      fleets: this.fleets,
      readyReplicas: () => this.readyReplicas(),
      localSubset: (zone) => this.localSubset(zone),
      seed: o.seed,
    };
    this.router = createRouter(strategy, ctx);
    const groups = o.workload.kind === 'shared-prefix' ? new PrefixGroups(o.workload, o.seed) : undefined;
    this.streams = o.zones.map((_, i) => new ArrivalStream(o.workload, groups, o.rates[i] ?? 0, i, o.zones.length, o.seed, o.durationMs));
    this.tally = {
      zones: o.zones,
      arrivals: 0,
      measuredArrivals: 0,
      served: 0,
      shed429: 0,
      unavailable503: 0,
      aborted: 0,
      measured: { served: 0, shed429: 0, unavailable503: 0, aborted: 0, crossZone: 0, fallback: 0, spilled: 0, retries: 0, outputTokens: 0 },
      ttft: [],
      e2e: [],
      servedByZone: o.zones.map(() => 0),
      tokensInWindow: 0,
      windowMs: o.durationMs - o.warmupMs,
      prefixHitTokens: 0,
      prefixQueryTokens: 0,
      digest: 0,
    };
  }

  run(): SimResult {
    const o = this.o;
    // t = 0: every EPP has the readiness of every replica and one idle sample.
    for (const r of this.replicas) {
      this.publishReadiness(r, true, 0, false);
      this.publishMetrics(r, 0, false);
      this.queue.push(((r.info.index + 0.5) * this.interval) / this.replicas.length, 'sample', r.info.index);
    }
    this.streams.forEach((s, i) => this.queue.push(s.peekAt(), 'arrival', i));
    this.queue.push(o.warmupMs, 'mark', 0);
    this.queue.push(o.durationMs, 'mark', 1);
    for (const f of o.failures ?? []) {
      const members = this.replicas.filter((r) => r.info.zoneIndex === f.zone).slice(0, f.count);
      for (const r of members) {
        this.queue.push(f.atMs, 'kill', r.info.index);
        if (f.returnAtMs !== undefined) this.queue.push(f.returnAtMs, 'revive', r.info.index);
      }
    }

    for (let e = this.queue.pop(); e !== undefined; e = this.queue.pop()) {
      if (!Number.isFinite(e.at)) continue;
      this.advanceEngines(e.at);
      switch (e.kind) {
        case 'arrival':
          this.arrive(e.target, e.at);
          break;
        case 'sample':
          this.sample(e.target, e.at);
          break;
        case 'deliver':
          (this.fleets[e.target] as Fleet).apply(e.payload as MetricsEvent | ReadinessEvent, e.at);
          break;
        case 'kill':
          this.kill(e.target, e.at);
          break;
        case 'detect':
          this.detect(e.target, e.at, e.payload as number);
          break;
        case 'revive':
          this.revive(e.target, e.at);
          break;
        case 'mark':
          if (e.target === 0) this.tokensAtWarmup = this.totalTokens();
          else this.tokensAtEnd = this.totalTokens();
          break;
      }
    }
    // Drain: no more arrivals or picks, so engines can run to completion one after another.
    for (const r of this.replicas) {
      const engine = r.engine;
      if (!engine) continue;
      for (let t = engine.nextEventAt(); Number.isFinite(t); t = engine.nextEventAt()) engine.advance(t);
    }
    this.tally.tokensInWindow = this.tokensAtEnd - this.tokensAtWarmup;
    for (const r of this.replicas) {
      this.tally.prefixHitTokens += r.retiredHits;
      this.tally.prefixQueryTokens += r.retiredQueries;
      if (r.engine) {
        const s = r.engine.stats();
        this.tally.prefixHitTokens += s.prefixHitTokens;
        this.tally.prefixQueryTokens += s.prefixQueryTokens;
      }
    }
    const pending = this.replicas.reduce((n, r) => n + r.active.size, 0);
    if (pending !== 0) throw new Error(`simulation ended with ${pending} requests in flight`);
    return summarize(o.strategy.name, this.tally);
  }

  private newEngine(r: ReplicaState): Engine<SimEngineRequest> {
    const o = this.o;
    return new Engine<SimEngineRequest>(
      {
        preset: o.preset ?? 'llama-8b-h100',
        ...(o.maxNumSeqs !== undefined ? { maxNumSeqs: o.maxNumSeqs } : {}),
        ...(o.numBlocks !== undefined ? { numBlocks: o.numBlocks } : {}),
        ...(o.maxWaiting !== undefined ? { maxWaiting: o.maxWaiting } : {}),
        seed: (o.seed * 1009 + r.info.index * 31 + r.generation + 1) >>> 0,
      },
      { onFinish: (seq, at) => this.finish(seq, at) },
    );
  }

  private advanceEngines(now: number): void {
    for (const r of this.replicas) r.engine?.advance(now);
  }

  private totalTokens(): number {
    let n = 0;
    for (const r of this.replicas) n += r.retiredTokens + (r.engine ? r.engine.stats().generationTokens : 0);
    return n;
  }

  private measuredAt(at: number): boolean {
    return at >= this.o.warmupMs && at < this.o.durationMs;
  }

  private arrive(gateway: number, now: number): void {
    const stream = this.streams[gateway] as ArrivalStream;
    const request = stream.next();
    if (!request) return;
    this.queue.push(stream.peekAt(), 'arrival', gateway);
    const t = this.tally;
    const measured = this.measuredAt(request.arrivalAt);
    t.arrivals++;
    if (measured) t.measuredArrivals++;

    const route = this.router.route(request, gateway, now);
    if (route.status !== 'routed') {
      if (route.status === 429) {
        t.shed429++;
        if (measured) t.measured.shed429++;
      } else {
        t.unavailable503++;
        if (measured) t.measured.unavailable503++;
      }
      return;
    }
    // The gateway walks the list: a dead replica refuses the connection, a full queue answers 503;
    // either costs a round trip to that replica and moves on to the next entry.
    let extraMs = 0;
    for (let i = 0; i < route.list.length; i++) {
      const replica = route.list[i] as number;
      const r = this.replicas[replica] as ReplicaState;
      const rtt = rttMs(this.o.zones, this.net, gateway, r.info);
      if (!r.engine) {
        extraMs += Math.max(rtt, 0.2);
        continue;
      }
      const flight: Flight = { request, route, replica, networkMs: extraMs + rtt };
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
      this.router.served(route, replica, now);
      t.served++;
      if (measured) {
        const m = t.measured;
        if (i > 0) m.fallback++;
        m.retries += i;
        if (r.info.zoneIndex !== gateway) m.crossZone++;
        if (decisionOf(route)?.rule === 'spill') m.spilled++;
        (t.servedByZone[r.info.zoneIndex] as number)++;
      }
      return;
    }
    this.router.release(route);
    t.unavailable503++;
    if (measured) t.measured.unavailable503++;
  }

  private finish(seq: Sequence<SimEngineRequest>, at: number): void {
    const flight = seq.request.flight;
    const r = this.replicas[flight.replica] as ReplicaState;
    r.active.delete(flight);
    this.router.release(flight.route);
    const request = flight.request;
    if (!this.measuredAt(request.arrivalAt)) return;
    const t = this.tally;
    const ttft = seq.ttftMs;
    const e2e = at - request.arrivalAt + flight.networkMs;
    t.ttft.push(ttft);
    t.e2e.push(e2e);
    t.measured.served++;
    t.measured.outputTokens += request.outputTokens;
    t.digest = (Math.imul(t.digest ^ Math.round(ttft * 1000), 0x01000193) + request.id) >>> 0;
  }

  private sample(index: number, now: number): void {
    const r = this.replicas[index] as ReplicaState;
    if (now + this.interval < this.o.durationMs) this.queue.push(now + this.interval, 'sample', index);
    if (!r.engine) return;
    this.publishMetrics(r, now, true);
  }

  private publishMetrics(r: ReplicaState, now: number, delayed: boolean): void {
    const engine = r.engine as Engine<SimEngineRequest>;
    const event: MetricsEvent = {
      v: 1,
      kind: 'metrics',
      pool: POOL,
      zone: this.globalView ? GLOBAL_ZONE : r.info.zone,
      pod: r.info.pod,
      observedAt: now,
      waitingRequests: engine.waitingCount,
      runningRequests: engine.runningCount,
      kvCacheUsage: engine.kvUsage,
      cache: { blockSize: engine.config.blockSize, numBlocks: engine.config.numBlocks },
    };
    this.deliver(event, now, delayed);
  }

  private publishReadiness(r: ReplicaState, ready: boolean, now: number, delayed: boolean): void {
    const event: ReadinessEvent = {
      v: 1,
      kind: 'readiness',
      pool: POOL,
      zone: this.globalView ? GLOBAL_ZONE : r.info.zone,
      region: this.globalView ? GLOBAL_ZONE : r.info.region,
      pod: r.info.pod,
      address: r.info.address,
      ready,
      observedAt: now,
    };
    this.deliver(event, now, delayed);
  }

  private deliver(event: MetricsEvent | ReadinessEvent, now: number, delayed: boolean): void {
    for (let f = 0; f < this.fleets.length; f++) {
      if (!delayed) {
        (this.fleets[f] as Fleet).apply(event, now);
        continue;
      }
      const delay = this.delayMin + this.jitter.next() * (this.delayMax - this.delayMin);
      this.queue.push(now + delay, 'deliver', f, event);
    }
  }

  private kill(index: number, now: number): void {
    const r = this.replicas[index] as ReplicaState;
    const engine = r.engine;
    if (!engine) return;
    const s = engine.stats();
    r.retiredTokens += s.generationTokens;
    r.retiredHits += s.prefixHitTokens;
    r.retiredQueries += s.prefixQueryTokens;
    r.engine = undefined;
    // Requests on a dead replica fail mid-stream: the client sees an error (counted as aborted).
    const t = this.tally;
    for (const flight of r.active) {
      this.router.release(flight.route);
      t.served--;
      t.aborted++;
      if (this.measuredAt(flight.request.arrivalAt)) t.measured.aborted++;
    }
    r.active.clear();
    this.queue.push(now + (this.o.detectMs ?? 2000), 'detect', index, r.generation);
  }

  private detect(index: number, now: number, generation: number): void {
    const r = this.replicas[index] as ReplicaState;
    if (r.engine || r.generation !== generation) return;
    this.setGatewayReady(r, false);
    this.publishReadiness(r, false, now, true);
  }

  private revive(index: number, now: number): void {
    const r = this.replicas[index] as ReplicaState;
    if (r.engine) return;
    r.generation++;
    r.engine = this.newEngine(r);
    r.engine.advance(now);
    this.setGatewayReady(r, true);
    this.publishReadiness(r, true, now, true);
    this.publishMetrics(r, now, true);
    // Its sample chain kept ticking while it was dead; samples resume on the next tick.
  }

  private setGatewayReady(r: ReplicaState, ready: boolean): void {
    if (r.gatewayReady === ready) return;
    r.gatewayReady = ready;
    this.readySnapshot = undefined;
    this.subsetCache[r.info.zoneIndex] = undefined;
  }

  private readyReplicas(): readonly number[] {
    if (!this.readySnapshot) this.readySnapshot = this.replicas.filter((r) => r.gatewayReady).map((r) => r.info.index);
    return this.readySnapshot;
  }

  private localSubset(zone: number): readonly string[] {
    let subset = this.subsetCache[zone];
    if (!subset) {
      subset = this.replicas.filter((r) => r.gatewayReady && r.info.zoneIndex === zone).map((r) => r.info.address);
      this.subsetCache[zone] = subset;
    }
    return subset;
  }
}
