import { Engine, Rng, type EngineRequest, type Sequence } from '@spillway/engine';
import {
  RateWindow,
  type KvBatch,
  type KvSnapshotEvent,
  type MetricsEvent,
  type ReadinessEvent,
  type ServiceRates,
} from '@spillway/events';
import { Fleet } from '@spillway/fleet';
import type { StateBatch } from '@spillway/events';
import { KvRelay } from './kv-relay.js';
import { EventQueue } from './queue.js';
import type { ResolvedFault, ResolvedScenario, WindowSpec } from './resolve.js';
import { createRouter, GLOBAL_ZONE, POOL, type EppRouter, type Route } from './routers.js';
import { HEARTBEAT_MS, PEER_TIMEOUT_MS, REMOTE_ENTRY_TTL_MS, SharingChannel } from './sharing.js';
import { PRECISE_KINDS, schedulerConfigFor, sharesState, type StrategySpec } from './strategies.js';
import { slope, Tally, type Figures } from './tally.js';
import { layout, type ReplicaInfo } from './topology.js';
import { ArrivalStream, prefixGroupsOf, type SimRequest } from './workload.js';

/**
 * The routing simulation: a deterministic discrete-event run in virtual time (ms) of one gateway
 * per zone and `epps.perZone` EPPs per zone in front of `@spillway/engine` replicas. EPPs are the
 * production `Fleet` and `Scheduler`; metrics reach each EPP's fleet as v1 events every sample
 * interval after a jittered delay, readiness at start, on changes and every re-publish period.
 * Collectors and NATS can fail (their events stop); an EPP can restart (its fleet is rebuilt from
 * the last event per subject, as the stream replays it, and its scheduler starts empty).
 * Engines keep their own clocks; before each simulation event every engine is advanced to its
 * time, so completions (and the EPPs' in-flight releases) happen in time order.
 */
export interface WindowResult extends Figures {
  readonly name: string;
  readonly fromS: number;
  readonly toS: number;
  /** Per endpoint zone: the share of (EPP, endpoint, probe) observations whose metrics were stale. */
  readonly staleShareByZone: Readonly<Record<string, number>>;
  /** Events applied to any EPP's fleet during the window. */
  readonly eventsDelivered: number;
  /** The same figures over the span of equal length just before the window (from the warm-up on). */
  readonly before?: Figures & { readonly fromS: number; readonly toS: number };
}

export interface RunResult extends Figures {
  readonly strategy: string;
  readonly seed: number;
  /** Served rate below arrival rate: the backlog grows (by over 5 % of the arrival rate per second, late in the window). */
  readonly unbounded: boolean;
  /** Growth of the backlog (requests accepted but not finished) over the measured window, req/s. */
  readonly queueGrowthPerS: number;
  readonly windows: readonly WindowResult[];
}

interface Flight {
  readonly request: SimRequest;
  readonly route: Route;
  readonly replica: number;
  /** Position of the serving replica in the route's list. */
  readonly attempt: number;
  readonly networkMs: number;
}

interface SimEngineRequest extends EngineRequest {
  readonly flight: Flight;
}

interface ReplicaState {
  readonly info: ReplicaInfo;
  engine: Engine<SimEngineRequest> | undefined;
  readonly active: Set<Flight>;
  /** Gateways' view (Kubernetes endpoints), updated `detectMs` after a death. */
  gatewayReady: boolean;
  /** Readiness as the collector publishes it. */
  published: boolean;
  /** Output tokens of engines that died, so totals survive restarts. */
  retiredTokens: number;
  generation: number;
  /** The service rates its collector would publish, from the engine's counters (reset with the engine). */
  rates: RateWindow;
  /** Its collector's KV-event relay (the precise kinds only). */
  readonly kv: KvRelay | undefined;
}

interface Epp {
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

interface Stored {
  readonly event: MetricsEvent | ReadinessEvent | KvSnapshotEvent;
  readonly storedAt: number;
}

type Kind =
  | 'arrival'
  | 'sample'
  | 'readiness'
  | 'deliver'
  | 'fault'
  | 'detect'
  | 'mark'
  | 'probe'
  | 'backlog'
  | 'share-flush'
  | 'share-deliver'
  | 'share-tick'
  | 'kv-flush'
  | 'kv-snapshot'
  | 'kv-deliver';

/** KV events: relayed in batches with delay and loss, or (oracle) applied to every EPP the instant they happen. */
type KvMode = 'off' | 'relay' | 'oracle';
/** Tokens per block of the workload's block hashes and content keys. */
const KV_BLOCK_SIZE = 16;

/** Range marks: the run records output-token totals at every range boundary. */
interface Mark {
  readonly tally: Tally;
  readonly edge: 'start' | 'end';
}

const PROBE_EVERY_MS = 250;
const BACKLOG_EVERY_MS = 1000;
/**
 * Backlog growth above this share of the arrival rate, over the second half of the measured window
 * (after queues near the knee have settled), counts as unbounded.
 */
const UNBOUNDED_SHARE = 0.05;

/** Test and tooling hooks into a run; none of them can change it. */
export interface RunObserver {
  /** An EPP restarted at `at`: its fleet before, and the new one right after the replay (empty while NATS is down). */
  onEppRestart?(info: { readonly at: number; readonly zone: string; readonly before: Fleet; readonly after: Fleet }): void;
  /** NATS came back at `at`; the EPPs' fleets right after any delayed replay. */
  onNatsUp?(info: { readonly at: number; readonly fleets: readonly Fleet[] }): void;
}

export function runStrategy(scenario: ResolvedScenario, strategy: StrategySpec, seed: number, observer: RunObserver = {}): RunResult {
  return new Simulation(scenario, strategy, seed, observer).run();
}

class Simulation {
  private readonly queue = new EventQueue<Kind>();
  private readonly replicas: ReplicaState[];
  private readonly epps: Epp[];
  /** EPPs each gateway spreads its picks over. */
  private readonly gatewayEpps: Epp[][];
  private readonly gatewayNext: number[];
  private readonly spreadRng: Rng;
  private readonly streams: ArrivalStream[];
  private readonly jitter: Rng;
  private readonly lossRng: Rng;
  private readonly global: boolean;
  private readonly zoneNames: string[];
  /** The measured window, then per fault window: [window, before]. */
  private readonly measured: Tally;
  private readonly windows: {
    spec: WindowSpec;
    tally: Tally;
    before: Tally | undefined;
    stale: number[];
    observed: number[];
    delivered: number;
  }[];
  private readonly ranges: Tally[];
  /** The stream: last event per (pod, kind), as JetStream keeps it (max_msgs_per_subject 1). */
  private readonly stream = new Map<string, Stored>();
  private natsUp = true;
  private readonly collectorUp: boolean[];
  private readySnapshot: number[] | undefined;
  private readonly subsetCache: (string[] | undefined)[];
  private backlog = 0;
  /** The state channel between the EPPs, when this strategy's EPPs share state. */
  private readonly sharing: SharingChannel | undefined;
  private readonly backlogTimes: number[] = [];
  private readonly backlogValues: number[] = [];
  private readonly kvMode: KvMode;
  private readonly kvRng: Rng;

  constructor(
    private readonly s: ResolvedScenario,
    private readonly strategy: StrategySpec,
    private readonly seed: number,
    private readonly observer: RunObserver,
  ) {
    this.global = strategy.kind === 'reference';
    this.zoneNames = s.zones.map((z) => z.zone);
    this.jitter = new Rng((seed * 2_654_435_761) >>> 0);
    this.lossRng = new Rng((seed * 40_503 + 7) >>> 0);
    this.spreadRng = new Rng((seed * 69_069 + 3) >>> 0);
    this.kvRng = new Rng((seed * 48_271 + 5) >>> 0);
    this.kvMode = PRECISE_KINDS.includes(strategy.kind) ? (strategy.kind === 'oracle' ? 'oracle' : 'relay') : 'off';
    this.replicas = layout(s.zones).map((info) => ({
      info,
      engine: undefined,
      active: new Set<Flight>(),
      gatewayReady: true,
      published: true,
      retiredTokens: 0,
      generation: 0,
      rates: new RateWindow(),
      kv: this.kvMode === 'off' ? undefined : new KvRelay(),
    }));
    for (const r of this.replicas) r.engine = this.newEngine(r);
    this.collectorUp = s.zones.map(() => true);
    this.subsetCache = s.zones.map(() => undefined);
    if (!this.global && sharesState(strategy, s.epps.sharing)) {
      const sharingRng = new Rng((seed * 7_919 + 11) >>> 0);
      this.sharing = new SharingChannel({
        batchMs: s.epps.batchMs,
        delayMs: s.signals.sharingDelayMs,
        lossRate: s.signals.lossRate,
        rng: sharingRng,
        schedule: (at: number, what: 'flush' | 'deliver', peer: number, batch?: StateBatch) =>
          this.queue.push(at, what === 'flush' ? 'share-flush' : 'share-deliver', peer, batch),
        up: () => this.natsUp,
      });
    }

    // The reference EPP is one pool-wide picker for every gateway; the others run per zone, each
    // with its own fleet and scheduler. With sharing (the default for Spillway's strategies), every
    // EPP of the pool folds the others' picks, prefix placements and penalties into its own state
    // after the channel's delay (sharing.ts).
    this.epps = [];
    if (this.global) {
      this.epps.push(this.newEpp(0, 0));
      this.gatewayEpps = s.zones.map(() => [this.epps[0] as Epp]);
    } else {
      this.gatewayEpps = s.zones.map((_, zi) =>
        Array.from({ length: s.epps.perZone }, () => {
          const epp = this.newEpp(this.epps.length, zi);
          this.epps.push(epp);
          return epp;
        }),
      );
    }
    this.gatewayNext = s.zones.map(() => 0);

    const groups = prefixGroupsOf(s.workload, seed);
    this.streams = s.zones.map(
      (_, i) =>
        new ArrivalStream(s.workload, groups, s.rates[i] as { startsMs: number[]; rates: number[] }, i, s.zones.length, seed, s.durationMs),
    );

    const zones = s.zones.length;
    this.measured = new Tally(s.warmupMs, s.durationMs, zones);
    this.windows = s.windows.map((spec) => {
      const len = spec.toMs - spec.fromMs;
      const beforeFrom = Math.max(s.warmupMs, spec.fromMs - len);
      const before = spec.fromMs - beforeFrom >= 1000 ? new Tally(beforeFrom, spec.fromMs, zones) : undefined;
      return {
        spec,
        tally: new Tally(spec.fromMs, spec.toMs, zones),
        before,
        stale: new Array<number>(zones).fill(0),
        observed: new Array<number>(zones).fill(0),
        delivered: 0,
      };
    });
    this.ranges = [this.measured, ...this.windows.flatMap((w) => (w.before ? [w.tally, w.before] : [w.tally]))];
  }

  run(): RunResult {
    const s = this.s;
    const interval = s.signals.sampleEveryMs;
    const republish = s.signals.readinessEveryS * 1000;
    // t = 0: every EPP has the readiness of every replica and one idle sample (a replayed stream).
    for (const r of this.replicas) {
      this.publishReadiness(r, 0, false);
      this.publishMetrics(r, 0, false);
      const phase = (r.info.index + 0.5) / this.replicas.length;
      this.queue.push(phase * interval, 'sample', r.info.index);
      this.queue.push(phase * republish, 'readiness', r.info.index);
    }
    this.streams.forEach((st, i) => this.queue.push(st.peekAt(), 'arrival', i));
    for (const range of this.ranges) {
      this.queue.push(range.fromMs, 'mark', 0, { tally: range, edge: 'start' } satisfies Mark);
      this.queue.push(range.toMs, 'mark', 0, { tally: range, edge: 'end' } satisfies Mark);
    }
    s.faults.forEach((f, i) => this.queue.push(f.atMs, 'fault', i));
    if (this.windows.length > 0) this.queue.push(0, 'probe', 0);
    this.queue.push(s.warmupMs, 'backlog', 0);
    if (this.sharing) this.queue.push(HEARTBEAT_MS, 'share-tick', 0);
    if (this.kvMode === 'relay') {
      for (const r of this.replicas) {
        const phase = (r.info.index + 0.5) / this.replicas.length;
        this.queue.push(phase * s.signals.kvBatchMs, 'kv-flush', r.info.index);
        this.queue.push(phase * s.signals.kvSnapshotEveryS * 1000, 'kv-snapshot', r.info.index);
      }
    }

    for (let e = this.queue.pop(); e !== undefined; e = this.queue.pop()) {
      if (!Number.isFinite(e.at)) continue;
      this.advanceEngines(e.at);
      if (this.sharing) this.sharing.now = e.at;
      switch (e.kind) {
        case 'arrival':
          this.arrive(e.target, e.at);
          break;
        case 'sample':
          this.sample(e.target, e.at);
          break;
        case 'readiness':
          this.republish(e.target, e.at);
          break;
        case 'deliver':
          this.deliver(e.target, e.payload as MetricsEvent | ReadinessEvent, e.at);
          break;
        case 'fault':
          this.fault(s.faults[e.target] as ResolvedFault, e.at);
          break;
        case 'detect':
          this.detect(e.target, e.at, e.payload as number);
          break;
        case 'mark': {
          const m = e.payload as Mark;
          if (m.edge === 'start') m.tally.tokensAtStart = this.totalTokens();
          else m.tally.tokensAtEnd = this.totalTokens();
          break;
        }
        case 'probe':
          this.probe(e.at);
          break;
        case 'backlog':
          this.backlogTimes.push(e.at / 1000);
          this.backlogValues.push(this.backlog);
          if (e.at + BACKLOG_EVERY_MS <= s.durationMs) this.queue.push(e.at + BACKLOG_EVERY_MS, 'backlog', 0);
          break;
        case 'share-flush':
          this.sharing?.flush(e.target, e.at);
          break;
        case 'share-deliver':
          this.sharing?.deliver(e.target, e.payload as StateBatch, e.at);
          break;
        case 'share-tick':
          this.sharing?.tick(e.at);
          if (e.at + HEARTBEAT_MS < s.durationMs) this.queue.push(e.at + HEARTBEAT_MS, 'share-tick', 0);
          break;
        case 'kv-flush':
          this.kvFlush(e.target, e.at);
          break;
        case 'kv-snapshot':
          this.kvSnapshot(e.target, e.at);
          break;
        case 'kv-deliver':
          this.kvDeliver(e.target, e.payload as KvBatch | KvSnapshotEvent, e.at);
          break;
      }
    }
    // Drain: no more arrivals or picks, so engines can run to completion one after another.
    for (const r of this.replicas) {
      const engine = r.engine;
      if (!engine) continue;
      for (let t = engine.nextEventAt(); Number.isFinite(t); t = engine.nextEventAt()) engine.advance(t);
    }
    const pending = this.replicas.reduce((n, r) => n + r.active.size, 0);
    if (pending !== 0) throw new Error(`simulation ended with ${pending} requests in flight`);
    return this.result();
  }

  private result(): RunResult {
    const s = this.s;
    const zones = this.zoneNames;
    const figures = this.measured.figures(zones);
    const growth = slope(this.backlogTimes, this.backlogValues);
    const half = Math.floor(this.backlogTimes.length / 2);
    const lateGrowth = slope(this.backlogTimes.slice(half), this.backlogValues.slice(half));
    const arrivalRate = figures.arrivals / ((s.durationMs - s.warmupMs) / 1000);
    const windows: WindowResult[] = this.windows.map((w) => {
      const staleShareByZone = Object.fromEntries(
        zones.map((z, i) => [
          z,
          (w.observed[i] as number) > 0 ? Math.round(((w.stale[i] as number) / (w.observed[i] as number)) * 10_000) / 10_000 : 0,
        ]),
      );
      return {
        name: w.spec.name,
        fromS: w.spec.fromMs / 1000,
        toS: w.spec.toMs / 1000,
        ...w.tally.figures(zones),
        staleShareByZone,
        eventsDelivered: w.delivered,
        ...(w.before ? { before: { fromS: w.before.fromMs / 1000, toS: w.before.toMs / 1000, ...w.before.figures(zones) } } : {}),
      };
    });
    return {
      strategy: this.strategy.name,
      seed: this.seed,
      ...figures,
      unbounded: lateGrowth > UNBOUNDED_SHARE * arrivalRate,
      queueGrowthPerS: Math.round(growth * 100) / 100,
      windows,
    };
  }

  private newEpp(index: number, zoneIndex: number): Epp {
    const fleet = new Fleet({ staleAfterMs: this.s.signals.staleAfterMs });
    const id = `epp-${index}-0`;
    return { index, zoneIndex, id, fleet, router: this.newRouter(index, zoneIndex, fleet, 0, id), restarts: 0, awaitingReplay: false };
  }

  private newRouter(index: number, zoneIndex: number, fleet: Fleet, restarts: number, id: string): EppRouter {
    const zone = this.s.zones[zoneIndex] as { zone: string; region: string };
    const sharing = this.sharing;
    const outbox = sharing === undefined ? undefined : restarts === 0 ? sharing.join(index, zone.zone, id) : sharing.restart(index, id);
    const router = createRouter(this.strategy.kind, {
      replicas: this.replicas.map((r) => r.info),
      fleet,
      readyReplicas: () => this.readyReplicas(),
      localSubset: (z) => this.localSubset(z),
      zone: this.global ? GLOBAL_ZONE : zone.zone,
      region: this.global ? GLOBAL_ZONE : zone.region,
      seed: (this.seed * 13 + index * 101 + restarts * 7919 + 1) >>> 0,
      config: schedulerConfigFor(this.strategy, { zones: this.s.zones, rttMs: this.s.rttMs }),
      shared: outbox === undefined ? undefined : { outbox, peerTimeoutMs: PEER_TIMEOUT_MS, remoteEntryTtlMs: REMOTE_ENTRY_TTL_MS },
    });
    sharing?.attach(index, router.shared);
    return router;
  }

  private newEngine(r: ReplicaState): Engine<SimEngineRequest> {
    const cfg = this.s.engines[r.info.zoneIndex];
    const relay = r.kv;
    const listener =
      relay === undefined
        ? { onFinish: (seq: Sequence<SimEngineRequest>, at: number) => this.finish(seq, at) }
        : {
            onFinish: (seq: Sequence<SimEngineRequest>, at: number) => this.finish(seq, at),
            onBlocksStored: (seq: Sequence<SimEngineRequest>, from: number, to: number, at: number) => {
              const request = seq.request.flight.request;
              if (request.blockHashes === undefined || request.contentKeys === undefined) return;
              relay.stored(request.blockHashes, request.contentKeys, from, to);
              if (this.kvMode === 'oracle') this.kvApplyNow(r, at);
            },
            // Called in the middle of an allocation: only recorded here, applied (oracle) at the next store or flush.
            onBlockEvicted: (hash: number) => relay.evicted(hash),
          };
    // A (re)started server has an empty cache: receivers start the pod afresh.
    if (relay !== undefined && r.generation > 0) relay.cleared();
    return new Engine<SimEngineRequest>({ ...cfg, seed: (this.seed * 1009 + r.info.index * 31 + r.generation + 1) >>> 0 }, listener);
  }

  // ---- KV events ------------------------------------------------------------------------------

  private kvBatch(r: ReplicaState, taken: { seq: number; events: KvBatch['events'] }, now: number): KvBatch {
    return {
      v: 1,
      pool: POOL,
      zone: r.info.zone,
      pod: r.info.pod,
      seq: taken.seq,
      observedAt: now,
      blockSize: KV_BLOCK_SIZE,
      events: taken.events,
    };
  }

  /** Oracle: every EPP learns the replica's events the instant they happen (no batching, delay or loss). */
  private kvApplyNow(r: ReplicaState, now: number): void {
    const taken = (r.kv as KvRelay).take();
    if (taken === undefined) return;
    const batch = this.kvBatch(r, taken, now);
    for (const epp of this.epps) epp.router.applyKvBatch?.(batch, now);
  }

  /** The collector relays the batch built since the last flush: lost with NATS or the collector down, else per EPP after a delay (in order), or lost at kvLossRate. */
  private kvFlush(index: number, now: number): void {
    const r = this.replicas[index] as ReplicaState;
    const s = this.s.signals;
    if (now + s.kvBatchMs < this.s.durationMs) this.queue.push(now + s.kvBatchMs, 'kv-flush', index);
    const relay = r.kv as KvRelay;
    const taken = relay.take();
    if (taken === undefined || !this.natsUp || !this.collectorUp[r.info.zoneIndex]) return;
    this.kvSend(relay, this.kvBatch(r, taken, now), now);
  }

  /** The collector publishes the pod's block set into the stream (last per subject), and every EPP receives it. */
  private kvSnapshot(index: number, now: number): void {
    const r = this.replicas[index] as ReplicaState;
    const every = this.s.signals.kvSnapshotEveryS * 1000;
    if (now + every < this.s.durationMs) this.queue.push(now + every, 'kv-snapshot', index);
    const relay = r.kv as KvRelay;
    if (!r.engine || !this.natsUp || !this.collectorUp[r.info.zoneIndex]) return;
    const event: KvSnapshotEvent = {
      v: 1,
      kind: 'kv',
      pool: POOL,
      zone: r.info.zone,
      pod: r.info.pod,
      observedAt: now,
      blockSize: KV_BLOCK_SIZE,
      seq: relay.seq,
      keys: relay.snapshotKeys(),
    };
    this.stream.set(`${r.info.pod}/kv`, { event, storedAt: now });
    this.kvSend(relay, event, now);
  }

  private kvSend(relay: KvRelay, message: KvBatch | KvSnapshotEvent, now: number): void {
    const { kvDelayMs, kvLossRate } = this.s.signals;
    for (const epp of this.epps) {
      if (kvLossRate > 0 && this.kvRng.next() < kvLossRate) continue;
      const at = Math.max(now + kvDelayMs[0] + this.kvRng.next() * (kvDelayMs[1] - kvDelayMs[0]), relay.deliveredAt[epp.index] ?? 0);
      relay.deliveredAt[epp.index] = at;
      this.queue.push(at, 'kv-deliver', epp.index, message);
    }
  }

  private kvDeliver(eppIndex: number, message: KvBatch | KvSnapshotEvent, now: number): void {
    if (!this.natsUp) return;
    const router = (this.epps[eppIndex] as Epp).router;
    if ('kind' in message) router.applyKvSnapshot?.(message, now);
    else router.applyKvBatch?.(message, now);
  }

  private advanceEngines(now: number): void {
    for (const r of this.replicas) r.engine?.advance(now);
  }

  private totalTokens(): number {
    let n = 0;
    for (const r of this.replicas) n += r.retiredTokens + (r.engine ? r.engine.stats().generationTokens : 0);
    return n;
  }

  private pickEpp(gateway: number): Epp {
    const list = this.gatewayEpps[gateway] as Epp[];
    if (list.length === 1) return list[0] as Epp;
    if (this.s.epps.spread === 'random') return list[this.spreadRng.int(list.length)] as Epp;
    const i = (this.gatewayNext[gateway] as number) % list.length;
    this.gatewayNext[gateway] = i + 1;
    return list[i] as Epp;
  }

  private arrive(gateway: number, now: number): void {
    const stream = this.streams[gateway] as ArrivalStream;
    const request = stream.next();
    if (!request) return;
    this.queue.push(stream.peekAt(), 'arrival', gateway);
    for (const range of this.ranges) {
      if (!range.contains(request.arrivalAt)) continue;
      range.arrivals++;
      (range.arrivalsByZone[gateway] as number)++;
    }

    if (this.kvMode === 'oracle') for (const r of this.replicas) this.kvApplyNow(r, now);
    const route = this.pickEpp(gateway).router.route(request, gateway, now);
    if (route.status !== 'routed') {
      this.count(request.arrivalAt, (t) => (route.status === 429 ? t.rejected429++ : t.rejected503++));
      return;
    }
    // The gateway walks the list: a dead replica refuses the connection, a full queue answers 503;
    // either costs a round trip to that replica and moves on to the next entry.
    let extraMs = 0;
    for (let i = 0; i < route.list.length; i++) {
      const replica = route.list[i] as number;
      const r = this.replicas[replica] as ReplicaState;
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
      this.backlog++;
      route.router.served(route, replica, now);
      return;
    }
    route.router.release(route, now);
    this.count(request.arrivalAt, (t) => t.rejected503++);
  }

  private count(arrivalAt: number, f: (t: Tally) => void): void {
    for (const range of this.ranges) if (range.contains(arrivalAt)) f(range);
  }

  private finish(seq: Sequence<SimEngineRequest>, at: number): void {
    const flight = seq.request.flight;
    const r = this.replicas[flight.replica] as ReplicaState;
    r.active.delete(flight);
    this.backlog--;
    flight.route.router.release(flight.route, at);
    const request = flight.request;
    const ttft = seq.ttftMs;
    const e2e = at - request.arrivalAt + flight.networkMs;
    const gateway = request.gateway;
    const zone = r.info.zoneIndex;
    for (const t of this.ranges) {
      if (!t.contains(request.arrivalAt)) continue;
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
    }
  }

  // ---- signals --------------------------------------------------------------------------------

  private sample(index: number, now: number): void {
    const r = this.replicas[index] as ReplicaState;
    if (now + this.s.signals.sampleEveryMs < this.s.durationMs) this.queue.push(now + this.s.signals.sampleEveryMs, 'sample', index);
    if (r.engine) this.publishMetrics(r, now, true);
  }

  private republish(index: number, now: number): void {
    const r = this.replicas[index] as ReplicaState;
    const every = this.s.signals.readinessEveryS * 1000;
    if (now + every < this.s.durationMs) this.queue.push(now + every, 'readiness', index);
    this.publishReadiness(r, now, true);
  }

  private publishMetrics(r: ReplicaState, now: number, delayed: boolean): void {
    const engine = r.engine as Engine<SimEngineRequest>;
    const event: MetricsEvent = {
      v: 1,
      kind: 'metrics',
      pool: POOL,
      zone: this.global ? GLOBAL_ZONE : r.info.zone,
      pod: r.info.pod,
      observedAt: now,
      waitingRequests: engine.waitingCount,
      runningRequests: engine.runningCount,
      kvCacheUsage: engine.kvUsage,
      cache: { blockSize: engine.config.blockSize, numBlocks: engine.config.numBlocks },
    };
    const rates = this.ratesOf(r, engine, now);
    if (rates !== undefined) event.rates = rates;
    this.publish(r, event, now, delayed);
  }

  /** What the zone's collector computes from the server's counters (2 s sliding window). */
  private ratesOf(r: ReplicaState, engine: Engine<SimEngineRequest>, now: number): ServiceRates | undefined {
    const st = engine.stats();
    return r.rates.update(now, {
      promptTokens: st.promptTokens,
      generationTokens: st.generationTokens,
      requests: st.finished,
      ttft: { sumMs: st.ttftSumMs, count: st.ttftCount },
      queue: { sumMs: st.queueSumMs, count: st.queueCount },
      prefixHits: st.prefixHitTokens,
      prefixQueries: st.prefixQueryTokens,
    }).rates;
  }

  private publishReadiness(r: ReplicaState, now: number, delayed: boolean): void {
    const event: ReadinessEvent = {
      v: 1,
      kind: 'readiness',
      pool: POOL,
      zone: this.global ? GLOBAL_ZONE : r.info.zone,
      region: this.global ? GLOBAL_ZONE : r.info.region,
      pod: r.info.pod,
      address: r.info.address,
      ready: r.published,
      observedAt: now,
    };
    this.publish(r, event, now, delayed);
  }

  /**
   * A collector publishes: nothing leaves while its zone's collector or NATS is down. What leaves
   * is stored (last per subject) and delivered to every EPP after its own delay; metric samples
   * may be lost on the way (`lossRate`), readiness is acknowledged and never lost.
   */
  private publish(r: ReplicaState, event: MetricsEvent | ReadinessEvent, now: number, delayed: boolean): void {
    if (!this.natsUp || !this.collectorUp[r.info.zoneIndex]) return;
    this.stream.set(`${r.info.pod}/${event.kind}`, { event, storedAt: now });
    const { delayMs, lossRate } = this.s.signals;
    for (const epp of this.epps) {
      if (!delayed) {
        epp.fleet.apply(event, now);
        continue;
      }
      if (event.kind === 'metrics' && lossRate > 0 && this.lossRng.next() < lossRate) continue;
      const delay = delayMs[0] + this.jitter.next() * (delayMs[1] - delayMs[0]);
      this.queue.push(now + delay, 'deliver', epp.index, event);
    }
  }

  private deliver(eppIndex: number, event: MetricsEvent | ReadinessEvent, now: number): void {
    // Messages inside NATS when it goes down are lost with it.
    if (!this.natsUp) return;
    (this.epps[eppIndex] as Epp).fleet.apply(event, now);
    for (const w of this.windows) if (now >= w.spec.fromMs && now < w.spec.toMs) w.delivered++;
  }

  /** Every EPP's view of every endpoint: fresh or stale, by the endpoint's zone, for the windows in force. */
  private probe(now: number): void {
    if (now + PROBE_EVERY_MS < this.s.durationMs) this.queue.push(now + PROBE_EVERY_MS, 'probe', 0);
    const open = this.windows.filter((w) => now >= w.spec.fromMs && now < w.spec.toMs);
    if (open.length === 0) return;
    for (const epp of this.epps) {
      for (const r of this.replicas) {
        const endpoint = epp.fleet.get(POOL, this.global ? GLOBAL_ZONE : r.info.zone, r.info.pod);
        const stale = !endpoint || !epp.fleet.isFresh(endpoint, now);
        for (const w of open) {
          (w.observed[r.info.zoneIndex] as number)++;
          if (stale) (w.stale[r.info.zoneIndex] as number)++;
        }
      }
    }
  }

  // ---- faults ---------------------------------------------------------------------------------

  private fault(f: ResolvedFault, now: number): void {
    switch (f.kind) {
      case 'replica-down':
        for (const i of f.replicas) this.kill(i, now);
        break;
      case 'replica-up':
        for (const i of f.replicas) this.revive(i, now);
        break;
      case 'collector-down':
        this.collectorUp[f.zone] = false;
        break;
      case 'collector-up':
        this.collectorUp[f.zone] = true;
        // A starting collector publishes every pod's readiness and a first sample at once.
        for (const r of this.replicas) if (r.info.zoneIndex === f.zone) this.publishCurrent(r, now);
        break;
      case 'nats-down':
        this.natsUp = false;
        break;
      case 'nats-up':
        this.natsUp = true;
        // EPPs that restarted during the outage replay now; collectors re-publish what they hold.
        for (const epp of this.epps) if (epp.awaitingReplay) this.replay(epp, now);
        this.observer.onNatsUp?.({ at: now, fleets: this.epps.map((e) => e.fleet) });
        for (const r of this.replicas) if (this.collectorUp[r.info.zoneIndex]) this.publishCurrent(r, now);
        break;
      case 'epp-restart':
        for (const epp of this.epps) {
          if (this.global || epp.zoneIndex !== f.zone) continue;
          const list = this.gatewayEpps[f.zone] as Epp[];
          if (f.index !== undefined && list[f.index] !== epp) continue;
          this.restart(epp, now);
        }
        break;
    }
  }

  private publishCurrent(r: ReplicaState, now: number): void {
    this.publishReadiness(r, now, true);
    if (r.engine) this.publishMetrics(r, now, true);
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
    if (this.natsUp) this.replay(epp, now);
    else epp.awaitingReplay = true;
    this.observer.onEppRestart?.({ at: now, zone: this.zoneNames[epp.zoneIndex] as string, before, after: epp.fleet });
  }

  private replay(epp: Epp, now: number): void {
    epp.awaitingReplay = false;
    for (const { event, storedAt } of this.stream.values()) {
      if (event.kind === 'kv') epp.router.applyKvSnapshot?.(event, Math.min(storedAt, now));
      else epp.fleet.apply(event, Math.min(storedAt, now));
    }
    // The oracle knows every cache exactly, across restarts too.
    if (this.kvMode === 'oracle') {
      for (const r of this.replicas) {
        const relay = r.kv as KvRelay;
        epp.router.applyKvSnapshot?.(
          {
            v: 1,
            kind: 'kv',
            pool: POOL,
            zone: r.info.zone,
            pod: r.info.pod,
            observedAt: now,
            blockSize: KV_BLOCK_SIZE,
            seq: relay.seq,
            keys: relay.snapshotKeys(),
          },
          now,
        );
      }
    }
    // Then, as the EPP does before it reports ready, it asks its peers for their state.
    this.sharing?.warmStart(epp.index, now);
  }

  private kill(index: number, now: number): void {
    const r = this.replicas[index] as ReplicaState;
    const engine = r.engine;
    if (!engine) return;
    r.retiredTokens += engine.stats().generationTokens;
    r.engine = undefined;
    // Requests on a dead replica fail mid-stream: the client sees an error (counted as aborted).
    for (const flight of r.active) {
      flight.route.router.release(flight.route, now);
      this.backlog--;
      this.count(flight.request.arrivalAt, (t) => t.aborted++);
    }
    r.active.clear();
    this.queue.push(now + this.s.signals.detectMs, 'detect', index, r.generation);
  }

  private detect(index: number, now: number, generation: number): void {
    const r = this.replicas[index] as ReplicaState;
    if (r.engine || r.generation !== generation) return;
    this.setGatewayReady(r, false);
    r.published = false;
    this.publishReadiness(r, now, true);
  }

  private revive(index: number, now: number): void {
    const r = this.replicas[index] as ReplicaState;
    if (r.engine) return;
    r.generation++;
    r.engine = this.newEngine(r);
    r.engine.advance(now);
    this.setGatewayReady(r, true);
    r.published = true;
    this.publishCurrent(r, now);
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
