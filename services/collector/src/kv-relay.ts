import {
  fitKvSnapshot,
  KV_CLEARED,
  KV_REMOVED,
  KV_STORED,
  MAX_KV_EVENTS,
  MAX_KV_KEYS,
  type KvBatch,
  type KvEvent,
  type KvSnapshotEvent,
  type VllmDecodeReason,
  type VllmKvEvent,
  type VllmKvLimits,
} from '@spillway/events';
import type { Logger } from 'pino';
import type { Dispatcher } from 'undici';
import type { EndpointSpec } from './endpoint.js';
import { TrtllmFeed, ZmqRankFeed, type KvFeed } from './kv-feeds.js';
import { PodKvUnion, RankKvMap, splitKvEvents, type KvSkipReason } from './kv-map.js';
import { kvSourceOf, sameSource, type KvEventsFormat, type KvSource } from './kv-sources.js';
import type { CollectorMetrics } from './self-metrics.js';

/** Where relayed KV batches and snapshots go (NATS in production: `NatsSink`). */
export interface KvSink {
  /** Core publish on `spillway.kv.<pool>.<zone>.<pod>`; false when dropped (disconnected). */
  publishKvBatch(batch: KvBatch): boolean;
  /** Core publish into the stream subject `spillway.v1.<pool>.<zone>.<pod>.kv`; false when dropped. */
  publishKvSnapshot(event: KvSnapshotEvent): boolean;
  /** The largest payload the server takes (snapshots are fitted to it). */
  maxPayload(): number;
}

export interface KvRelayOptions {
  pool: string;
  /** Bounds of one server batch (larger or malformed ones are dropped and counted). */
  limits: VllmKvLimits;
  /** Bytes of block maps per pod (server hash → content key), shared by its ranks. */
  maxBytesPerPod: number;
  snapshotIntervalMs: number;
  /** How long a replay may take before the relay gives up on it and starts the rank afresh. */
  replayTimeoutMs: number;
  /** ZeroMQ reconnect back-off: first and longest interval (also TensorRT-LLM polling's back-off). */
  reconnectMs: number;
  reconnectMaxMs: number;
  /** Subscription prefix (vLLM's topic; empty = every message). */
  topic: string;
  /** Port convention: servers that name no KV endpoint publish on this port of their address (undefined: only named ones). */
  eventsPort?: number | undefined;
  /** Port convention for the replay socket. */
  replayPort?: number | undefined;
  /** `--kv-events-format` (undefined: from each endpoint's engine). */
  format?: KvEventsFormat | undefined;
  /** Data-parallel ranks of servers that name none (default 1). */
  dataParallelSize?: number | undefined;
  /** How often a TensorRT-LLM server's event queue is drained (default 100 ms). */
  pollIntervalMs?: number | undefined;
  /** HTTP client for TensorRT-LLM's `/kv_cache_events` (required to follow TensorRT-LLM servers). */
  dispatcher?: Dispatcher | undefined;
  sink: KvSink;
  logger: Logger;
  metrics: CollectorMetrics;
  /** The relay's clock (ms since the epoch). */
  now?: () => number;
}

export type KvDropReason = VllmDecodeReason | 'not-json' | 'bad-frames' | 'bad-seq';

/** Log lines per (pod, reason) at most once a minute: a broken server re-sends every step. */
const LOG_EVERY_MS = 60_000;

/**
 * The KV-event relay: per model server that offers KV events, one feed per data-parallel rank
 * (a ZeroMQ subscription each, vLLM and SGLang; one HTTP poller for TensorRT-LLM, whose events say
 * their rank), each rank's events turned into content keys (`RankKvMap`) and merged over the
 * pod's ranks (`PodKvUnion`) into batches on `spillway.kv.<pool>.<zone>.<pod>`; sequence gaps
 * recovered through a rank's replay socket when it has one (else that rank starts afresh), and
 * every pod's block set published as a `kv` snapshot into the stream every `snapshotIntervalMs`.
 * ZeroMQ reconnects by itself with back-off, so a dead endpoint costs a timer, never a blocked scrape.
 */
export class KvRelay {
  private readonly pods = new Map<string, PodRelay>();
  private readonly snapshotTimer: NodeJS.Timeout;
  private readonly lastLogged = new Map<string, number>();
  private stopped = false;
  readonly now: () => number;

  constructor(readonly options: KvRelayOptions) {
    this.now = options.now ?? Date.now;
    this.snapshotTimer = setInterval(() => this.publishSnapshots(), options.snapshotIntervalMs);
    this.snapshotTimer.unref();
  }

  /** Follows the collector's endpoint list: subscribes to new KV sources, drops gone or changed ones. */
  setEndpoints(endpoints: readonly EndpointSpec[]): void {
    if (this.stopped) return;
    const o = this.options;
    const defaults = { format: o.format, eventsPort: o.eventsPort, replayPort: o.replayPort, dataParallelSize: o.dataParallelSize ?? 1 };
    const wanted = new Map<string, { spec: EndpointSpec; source: KvSource }>();
    for (const spec of endpoints) {
      const source = kvSourceOf(spec, defaults);
      if (source !== undefined && (source.format !== 'trtllm' || o.dispatcher !== undefined)) wanted.set(spec.pod, { spec, source });
    }
    for (const [pod, relay] of this.pods) {
      const want = wanted.get(pod);
      if (!want || !sameSource(want.source, relay.source) || want.spec.zone !== relay.spec.zone) {
        relay.close(want === undefined);
        this.pods.delete(pod);
      }
    }
    for (const [pod, { spec, source }] of wanted) {
      if (this.pods.has(pod)) continue;
      this.pods.set(pod, new PodRelay(this, spec, source));
      o.logger.info({ pod, format: source.format, ranks: source.ranks }, 'following KV events');
    }
    this.updateGauges();
  }

  stop(): void {
    this.stopped = true;
    clearInterval(this.snapshotTimer);
    for (const relay of this.pods.values()) relay.close(false);
    this.pods.clear();
  }

  /** Per pod: blocks known, relay seq, and per rank the server seq expected (tests and the operators' questions). */
  status(): Array<{ pod: string; blocks: number; bytes: number; seq: number | undefined; expected: number; ranks: number[] }> {
    return [...this.pods.values()].map((r) => r.status());
  }

  publishSnapshots(): void {
    for (const relay of this.pods.values()) relay.publishSnapshot();
    this.updateGauges();
  }

  updateGauges(): void {
    let blocks = 0;
    let bytes = 0;
    for (const r of this.pods.values()) {
      const s = r.status();
      blocks += s.blocks;
      bytes += s.bytes;
    }
    this.options.metrics.kvBlocks.set(blocks);
    this.options.metrics.kvMapBytes.set(bytes);
    this.options.metrics.kvEndpoints.set(this.pods.size);
  }

  /** Counted always; logged once a minute per pod and reason. */
  dropped(pod: string, reason: KvDropReason, detail: string): void {
    this.options.metrics.kvDropped.inc({ reason });
    this.logLimited(pod, reason, () => this.options.logger.warn({ pod, reason, detail }, 'KV events: server batch dropped'));
  }

  skipped(pod: string, reason: KvSkipReason, blocks: number): void {
    if (blocks <= 0) return;
    this.options.metrics.kvSkippedBlocks.inc({ reason }, blocks);
    this.logLimited(pod, reason, () => this.options.logger.info({ pod, reason, blocks }, 'KV events: blocks not relayed'));
  }

  logLimited(pod: string, reason: string, log: () => void): void {
    const key = `${pod}\u0000${reason}`;
    const now = this.now();
    const last = this.lastLogged.get(key);
    if (last !== undefined && now - last < LOG_EVERY_MS) return;
    if (this.lastLogged.size > 10_000) this.lastLogged.clear();
    this.lastLogged.set(key, now);
    log();
  }
}

/**
 * One model server: its ranks' block maps, their union, and the relay sequence of its subject.
 * Its feeds hand it each rank's decoded events (`apply`) or ask for a rank's fresh start (`fresh`).
 */
export class PodRelay {
  private readonly union = new PodKvUnion();
  private readonly maps: RankKvMap[] = [];
  private readonly feeds: KvFeed[];
  /**
   * The relay's own sequence for this pod: +1 per published batch, starting from the clock in
   * microseconds so a restarted collector continues above what receivers last saw.
   */
  private relaySeq: number;
  private published = false;
  private closed = false;

  constructor(
    readonly relay: KvRelay,
    readonly spec: EndpointSpec,
    readonly source: KvSource,
  ) {
    this.relaySeq = relay.now() * 1000;
    this.feeds =
      source.format === 'trtllm'
        ? [new TrtllmFeed(this, source.ranks[0]?.events as string)]
        : source.ranks.map((endpoint, rank) => new ZmqRankFeed(this, endpoint, rank));
  }

  get pod(): string {
    return this.spec.pod;
  }

  /** The block map of `rank`, created on first use (TensorRT-LLM's ranks are known from its events). */
  mapOf(rank: number): RankKvMap {
    let map = this.maps[rank];
    if (map === undefined) {
      const ranks = Math.max(this.source.ranks.length, rank + 1);
      map = new RankKvMap(Math.floor(this.relay.options.maxBytesPerPod / ranks));
      this.maps[rank] = map;
    }
    return map;
  }

  status() {
    let bytes = 0;
    for (const map of this.maps) bytes += map?.bytes ?? 0;
    return {
      pod: this.spec.pod,
      blocks: this.union.blocks,
      bytes,
      seq: this.published ? this.relaySeq - 1 : undefined,
      expected: this.feeds[0]?.expected ?? 0,
      ranks: this.feeds.map((f) => f.expected),
    };
  }

  /** Folds one rank's decoded events and publishes what they changed for the pod. `fresh`: start the rank over first. */
  apply(rank: number, events: readonly VllmKvEvent[], fresh: boolean): void {
    const out: KvEvent[] = [];
    const map = this.mapOf(rank);
    if (fresh) this.startRankAfresh(rank, out);
    const changes: KvEvent[] = [];
    map.fold(events, changes, (reason, blocks) => this.relay.skipped(this.pod, reason, blocks));
    this.union.apply(rank, changes, out);
    this.publish(out);
  }

  /** A rank's events were lost (a gap with no replay, a dropped batch, a reconnect): what it held is no longer vouched for. */
  fresh(rank: number): void {
    const out: KvEvent[] = [];
    this.startRankAfresh(rank, out);
    this.publish(out);
  }

  private startRankAfresh(rank: number, out: KvEvent[]): void {
    this.mapOf(rank).clear();
    this.union.clearRank(rank, out);
  }

  /** Stops following; `gone`: the endpoint was removed, so receivers are told its blocks are gone. */
  close(gone: boolean): void {
    if (this.closed) return;
    this.closed = true;
    for (const feed of this.feeds) feed.close();
    if (gone && this.published) this.publish([[KV_CLEARED]]);
  }

  get isClosed(): boolean {
    return this.closed;
  }

  private publish(events: KvEvent[]): void {
    if (events.length === 0) return;
    const o = this.relay.options;
    // The first batch a collector relays for a pod starts it afresh: receivers may hold what an
    // earlier collector said, which this one cannot vouch for. (Until then the union was empty:
    // everything it takes in is relayed.)
    if (!this.published && events[0]?.[0] !== KV_CLEARED) events = [[KV_CLEARED], ...events];
    // Before the server's first BlockStored only `cleared` events go out, which no block size qualifies.
    const blockSize = this.maps.find((m) => m !== undefined && m.blockSize > 0)?.blockSize ?? 16;
    for (const chunk of splitKvEvents(events, MAX_KV_EVENTS, MAX_KV_KEYS)) {
      const batch: KvBatch = {
        v: 1,
        pool: o.pool,
        zone: this.spec.zone,
        pod: this.spec.pod,
        seq: this.relaySeq++,
        observedAt: this.relay.now(),
        blockSize,
        events: chunk,
      };
      this.published = true;
      if (o.sink.publishKvBatch(batch)) {
        o.metrics.kvBatchesPublished.inc();
        for (const e of chunk)
          o.metrics.kvEventsRelayed.inc({ type: e[0] === KV_STORED ? 'stored' : e[0] === KV_REMOVED ? 'removed' : 'cleared' });
      } else {
        o.metrics.kvDropped.inc({ reason: 'nats-down' });
      }
    }
  }

  publishSnapshot(): void {
    const o = this.relay.options;
    const blockSize = this.maps.find((m) => m !== undefined && m.blockSize > 0)?.blockSize ?? 0;
    if (!this.published || this.closed || blockSize === 0) return;
    const event = fitKvSnapshot(
      {
        v: 1,
        kind: 'kv',
        pool: o.pool,
        zone: this.spec.zone,
        pod: this.spec.pod,
        observedAt: this.relay.now(),
        blockSize,
        seq: this.relaySeq - 1,
        keys: this.union.snapshotKeys(),
      },
      o.sink.maxPayload(),
    );
    if (o.sink.publishKvSnapshot(event)) o.metrics.kvSnapshots.inc();
    else o.metrics.kvDropped.inc({ reason: 'nats-down' });
  }
}
