import {
  fitKvSnapshot,
  KV_CLEARED,
  KV_REMOVED,
  KV_STORED,
  MAX_KV_EVENTS,
  MAX_KV_KEYS,
  MAX_KV_RANK,
  MAX_KV_SNAPSHOT_KEYS,
  MAX_KV_SNAPSHOT_RANKS,
  MAX_KV_SNAPSHOT_TIERS,
  MAX_KV_STORED_RUNS,
  type KvBatch,
  type KvKnown,
  type KvSkipped,
  type KvSnapshotEvent,
  type KvSnapshotRank,
  type KvSnapshotTier,
  type VllmDecodeReason,
  type VllmKvEvent,
  type VllmKvLimits,
} from '@spillway/events';
import type { Logger } from 'pino';
import type { Dispatcher } from 'undici';
import type { EndpointSpec } from './endpoint.js';
import { TrtllmFeed, ZmqRankFeed, type KvFeed } from './kv-feeds.js';
import { blockInfo, chunkKvChanges, SkippedTally, type KvChange } from './kv-info.js';
import { PodKnowledge } from './kv-known.js';
import { BLOCK_ENTRY_BYTES, PodKvUnion, RankKvMap, type KvSkipReason } from './kv-map.js';
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

  /** Per pod: blocks known, relay seq, per rank the server seq expected, and what the relay knows of its cache (tests and the operators' questions). */
  status(): Array<{
    pod: string;
    blocks: number;
    bytes: number;
    seq: number | undefined;
    expected: number;
    ranks: number[];
    known: KvKnown | undefined;
  }> {
    return [...this.pods.values()].map((r) => r.status());
  }

  /**
   * The server's KV-cache size in blocks per rank, as its metrics say (`vllm:cache_config_info`
   * `num_gpu_blocks` and the other engines' equivalents): how many stored blocks turn its cache over.
   */
  setCacheBlocks(pod: string, numBlocks: number): void {
    const relay = this.pods.get(pod);
    if (relay !== undefined && Number.isSafeInteger(numBlocks) && numBlocks >= 1) relay.cacheBlocks = numBlocks;
  }

  publishSnapshots(): void {
    for (const relay of this.pods.values()) relay.publishSnapshot();
    this.updateGauges();
  }

  updateGauges(): void {
    let blocks = 0;
    let bytes = 0;
    let partial = 0;
    for (const r of this.pods.values()) {
      const s = r.status();
      blocks += s.blocks;
      bytes += s.bytes;
      if (s.known?.complete === false) partial++;
    }
    this.options.metrics.kvBlocks.set(blocks);
    this.options.metrics.kvMapBytes.set(bytes);
    this.options.metrics.kvPartialPods.set(partial);
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
 * How a rank's events come: `fresh` when the rank must start over first (events were lost);
 * `fromServerStart` when they are the server's first (sequence 0, event id 0: its cache was empty
 * before them); `said` the data-parallel rank the server says they are of (vLLM's
 * `data_parallel_rank`, TensorRT-LLM's `attention_dp_rank`), relayed as the batch's `rank`.
 */
export interface RankEvents {
  readonly fresh: boolean;
  readonly fromServerStart: boolean;
  readonly said?: number | null | undefined;
}

/**
 * One model server: its ranks' block maps, their union, the relay sequence of its subject, and
 * what the relay knows of its cache (`PodKnowledge`). Its feeds hand it each rank's decoded events
 * (`apply`) or ask for a rank's fresh start (`fresh`).
 */
export class PodRelay {
  private readonly union = new PodKvUnion();
  private readonly maps: RankKvMap[] = [];
  /** Per rank (its place in the pod's rank list), the data-parallel rank it last said it is. */
  private readonly saidRanks: number[] = [];
  private readonly feeds: KvFeed[];
  private readonly knowledge = new PodKnowledge();
  /** When the relay began to follow the pod. */
  private readonly startedAt: number;
  /** The server's cache size per rank in blocks, from its metrics (`KvRelay.setCacheBlocks`). */
  cacheBlocks: number | undefined;
  /** Whether the last batch said the view is complete (transitions are logged). */
  private saidComplete: boolean | undefined;
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
    this.startedAt = relay.now();
    this.relaySeq = this.startedAt * 1000;
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
      known: this.published ? this.knowledge.known(this.startedAt) : undefined,
    };
  }

  /**
   * Stored blocks that turn a rank's cache over: the server's cache size when its metrics say it,
   * else the most blocks the relay can hold for the rank (a larger cache overflows the relay's
   * bound, which keeps the view partial anyway).
   */
  private turnoverBlocks(rank: number): number {
    if (this.cacheBlocks !== undefined) return this.cacheBlocks;
    const ranks = Math.max(this.source.ranks.length, this.maps.length, rank + 1);
    return Math.max(1, Math.floor(this.relay.options.maxBytesPerPod / ranks / BLOCK_ENTRY_BYTES));
  }

  /** Folds one rank's decoded events and publishes what they changed for the pod (`how`: see `RankEvents`). */
  apply(rank: number, events: readonly VllmKvEvent[], how: RankEvents): void {
    const said = how.said;
    // A rank the batch field cannot carry is relayed as its place in the pod's rank list.
    if (said !== undefined && said !== null && Number.isInteger(said) && said >= 0 && said <= MAX_KV_RANK) this.saidRanks[rank] = said;
    const out: KvChange[] = [];
    const map = this.mapOf(rank);
    const knowledge = this.knowledge;
    if (how.fresh) this.startRankAfresh(rank, out);
    if (how.fresh || !knowledge.heard(rank)) knowledge.began(rank, this.relay.now(), how.fromServerStart);
    const changes: KvChange[] = [];
    const skipped = new SkippedTally();
    let forgot = false;
    map.fold(events, changes, (reason, blocks, what) => {
      if (reason === 'pod-overflow') forgot = true;
      this.relay.skipped(this.pod, reason, blocks);
      skipped.add(reason, blocks, what);
    });
    // The bound's forgetting comes last in a fold, so it outweighs a reset earlier in the batch.
    if (events.some((e) => e.type === 'cleared')) knowledge.completed(rank);
    if (forgot) knowledge.lost(rank);
    else if (!knowledge.isComplete(rank) && map.storedSinceUnknown >= this.turnoverBlocks(rank)) knowledge.completed(rank);
    this.union.apply(rank, changes, out);
    this.publish(out, { rank: this.rankOf(rank), skipped: skipped.list() });
  }

  /** A rank's events were lost (a gap with no replay, a dropped batch, a reconnect): what it held is no longer vouched for. */
  fresh(rank: number): void {
    const out: KvChange[] = [];
    this.startRankAfresh(rank, out);
    this.knowledge.began(rank, this.relay.now(), false);
    this.publish(out, { rank: this.rankOf(rank) });
  }

  /** The data-parallel rank relayed for the rank at `index` of the pod's list: what it said, else its place. */
  private rankOf(index: number): number {
    return this.saidRanks[index] ?? index;
  }

  private startRankAfresh(rank: number, out: KvChange[]): void {
    this.mapOf(rank).clear();
    this.union.clearRank(rank, out);
  }

  /** Stops following; `gone`: the endpoint was removed, so receivers are told its blocks are gone. */
  close(gone: boolean): void {
    if (this.closed) return;
    this.closed = true;
    for (const feed of this.feeds) feed.close();
    if (gone && this.published) this.publish([[KV_CLEARED]], {});
  }

  get isClosed(): boolean {
    return this.closed;
  }

  /**
   * Publishes the pod's changes, cut into batches within their bounds, each saying the rank they
   * are of and what the server said of their stored blocks; the first also carries the tallies of
   * blocks not relayed as keys. A server batch whose blocks were all skipped is still published
   * (its events empty) when it has tallies: the blocks were reported, and receivers may count them.
   */
  private publish(changes: KvChange[], what: { rank?: number; skipped?: KvSkipped[] | undefined }): void {
    const known = this.knowledge.known(this.startedAt);
    this.noteKnown(known);
    if (changes.length === 0 && what.skipped === undefined) return;
    const o = this.relay.options;
    // The first batch a collector relays for a pod starts it afresh: receivers may hold what an
    // earlier collector said, which this one cannot vouch for. (Until then the union was empty:
    // everything it takes in is relayed.)
    if (!this.published && changes[0]?.[0] !== KV_CLEARED) changes = [[KV_CLEARED], ...changes];
    // Before the server's first BlockStored only `cleared` events go out, which no block size qualifies.
    const blockSize = this.maps.find((m) => m !== undefined && m.blockSize > 0)?.blockSize ?? 16;
    const chunks = chunkKvChanges(changes, { maxEvents: MAX_KV_EVENTS, maxKeys: MAX_KV_KEYS, maxRuns: MAX_KV_STORED_RUNS });
    if (chunks.length === 0) chunks.push({ events: [], stored: [] });
    chunks.forEach((chunk, i) => {
      const batch: KvBatch = {
        v: 1,
        pool: o.pool,
        zone: this.spec.zone,
        pod: this.spec.pod,
        seq: this.relaySeq++,
        observedAt: this.relay.now(),
        blockSize,
        events: chunk.events,
      };
      if (what.rank !== undefined) batch.rank = what.rank;
      batch.known = known;
      if (chunk.stored.length > 0) batch.stored = chunk.stored;
      if (i === 0 && what.skipped !== undefined) batch.skipped = what.skipped;
      this.published = true;
      if (o.sink.publishKvBatch(batch)) {
        o.metrics.kvBatchesPublished.inc();
        for (const e of chunk.events)
          o.metrics.kvEventsRelayed.inc({ type: e[0] === KV_STORED ? 'stored' : e[0] === KV_REMOVED ? 'removed' : 'cleared' });
      } else {
        o.metrics.kvDropped.inc({ reason: 'nats-down' });
      }
    });
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
        ...this.describeRanks(),
        known: this.snapshotKnown(),
      },
      o.sink.maxPayload(),
    );
    if (o.sink.publishKvSnapshot(event)) o.metrics.kvSnapshots.inc();
    else o.metrics.kvDropped.inc({ reason: 'nats-down' });
  }

  /** The snapshot's `known`: complete only when its keys are every block the pod holds (fitKvSnapshot cuts further). */
  private snapshotKnown(): KvKnown {
    const known = this.knowledge.known(this.startedAt);
    return known.complete && this.union.blocks > MAX_KV_SNAPSHOT_KEYS ? { since: known.since, complete: false } : known;
  }

  /** Logs a pod's view turning partial or complete (at most once a minute per pod and direction). */
  private noteKnown(known: KvKnown): void {
    if (known.complete === this.saidComplete) return;
    const first = this.saidComplete === undefined;
    this.saidComplete = known.complete;
    if (first && known.complete) return;
    const o = this.relay.options;
    this.relay.logLimited(this.pod, known.complete ? 'known-complete' : 'known-partial', () =>
      o.logger.info(
        { pod: this.pod, since: new Date(known.since).toISOString() },
        known.complete
          ? 'KV events: the relay now knows every block the server holds'
          : 'KV events: the relay does not know every block the server holds (its view began after the server stored some: no full replay, a lost batch or connection, or its byte bound); EPPs price the pod by both prefix indexes',
      ),
    );
  }

  /**
   * The snapshot's `ranks` (each rank's blocks in `keys` and its KV-cache group) and `tiers` (every
   * block followed, by tier; past the bound the smallest tiers are summed as `other`). A walk over
   * the ranks' maps, once per snapshot interval.
   */
  private describeRanks(): { ranks: KvSnapshotRank[]; tiers: KvSnapshotTier[] } {
    const ranks: KvSnapshotRank[] = [];
    const held = new Map<string, number>();
    this.maps.forEach((map, index) => {
      if (map === undefined || ranks.length >= MAX_KV_SNAPSHOT_RANKS) return;
      const entry: KvSnapshotRank = { rank: this.rankOf(index), blocks: map.summary(held) };
      const group = map.group;
      if (group !== undefined) Object.assign(entry, blockInfo({ group: group.group, kind: group.kind, window: group.window }));
      ranks.push(entry);
    });
    const tiers = [...held].map(([medium, blocks]) => ({ medium, blocks })).sort((a, b) => b.blocks - a.blocks);
    if (tiers.length > MAX_KV_SNAPSHOT_TIERS) {
      const rest = tiers.splice(MAX_KV_SNAPSHOT_TIERS - 1);
      tiers.push({ medium: 'other', blocks: rest.reduce((n, t) => n + t.blocks, 0) });
    }
    return { ranks, tiers };
  }
}
