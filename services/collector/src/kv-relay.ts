import {
  decodeVllmKvBatch,
  decodeVllmSeq,
  encodeVllmSeq,
  fitKvSnapshot,
  KV_CLEARED,
  MAX_KV_EVENTS,
  MAX_KV_KEYS,
  type KvBatch,
  type KvEvent,
  type KvSnapshotEvent,
  type VllmDecodeReason,
  type VllmKvLimits,
} from '@spillway/events';
import type { Logger } from 'pino';
import { Dealer, Subscriber } from 'zeromq';
import type { EndpointSpec } from './endpoint.js';
import { PodKvMap, SeqTracker, splitKvEvents, type KvSkipReason } from './kv-map.js';
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
  /** Bytes of block map per pod (server hash → content key). */
  maxBytesPerPod: number;
  snapshotIntervalMs: number;
  /** How long a replay may take before the relay gives up on it and starts the pod afresh. */
  replayTimeoutMs: number;
  /** ZeroMQ reconnect back-off: first and longest interval. */
  reconnectMs: number;
  reconnectMaxMs: number;
  /** Subscription prefix (vLLM's topic; empty = every message). */
  topic: string;
  /** Port convention: servers that name no KV endpoint publish on this port of their address (undefined: only named ones). */
  eventsPort?: number | undefined;
  /** Port convention for the replay socket. */
  replayPort?: number | undefined;
  sink: KvSink;
  logger: Logger;
  metrics: CollectorMetrics;
  /** The relay's clock (ms since the epoch). */
  now?: () => number;
}

export type KvDropReason = VllmDecodeReason | 'bad-frames' | 'bad-seq';

/**
 * An endpoint's KV endpoints: those it names (endpoints file, EndpointSlice port), else the port
 * convention applied to its address (`tcp://<ip>:<port>`).
 */
export function withKvEndpoints(spec: EndpointSpec, eventsPort: number | undefined, replayPort: number | undefined): EndpointSpec {
  const host = spec.address.slice(0, spec.address.lastIndexOf(':'));
  const kvEvents = spec.kvEvents ?? (eventsPort === undefined ? undefined : `tcp://${host}:${eventsPort}`);
  if (kvEvents === undefined) return spec;
  const kvReplay = spec.kvReplay ?? (replayPort === undefined ? undefined : `tcp://${host}:${replayPort}`);
  return { ...spec, kvEvents, kvReplay };
}

/** Log lines per (pod, reason) at most once a minute: a broken server re-sends every step. */
const LOG_EVERY_MS = 60_000;

/**
 * The KV-event relay: one ZeroMQ subscription per model server that offers KV events, each
 * server's vLLM batches turned into content-keyed batches on `spillway.kv.<pool>.<zone>.<pod>`
 * (`PodKvMap`), sequence gaps recovered through the server's replay socket when it has one (else
 * the pod is started afresh with a `cleared` event), and every pod's block set published as a
 * `kv` snapshot into the stream every `snapshotIntervalMs`. ZeroMQ reconnects by itself with
 * back-off, so a dead endpoint costs a timer, never a blocked scrape.
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

  /** Follows the collector's endpoint list: subscribes to new KV endpoints, drops gone ones. */
  setEndpoints(endpoints: readonly EndpointSpec[]): void {
    if (this.stopped) return;
    const wanted = new Map<string, EndpointSpec>();
    for (const e of endpoints) {
      const spec = withKvEndpoints(e, this.options.eventsPort, this.options.replayPort);
      if (spec.kvEvents !== undefined) wanted.set(spec.pod, spec);
    }
    for (const [pod, relay] of this.pods) {
      const spec = wanted.get(pod);
      if (!spec || spec.kvEvents !== relay.spec.kvEvents || spec.kvReplay !== relay.spec.kvReplay || spec.zone !== relay.spec.zone) {
        relay.close(spec === undefined);
        this.pods.delete(pod);
      }
    }
    for (const [pod, spec] of wanted) {
      if (this.pods.has(pod)) continue;
      const relay = new PodRelay(this, spec);
      this.pods.set(pod, relay);
      this.options.logger.info({ pod, kvEvents: spec.kvEvents, kvReplay: spec.kvReplay }, 'following KV events');
    }
    this.updateGauges();
  }

  stop(): void {
    this.stopped = true;
    clearInterval(this.snapshotTimer);
    for (const relay of this.pods.values()) relay.close(false);
    this.pods.clear();
  }

  /** Per pod: blocks known, relay seq, server seq expected (tests and the operators' questions). */
  status(): Array<{ pod: string; blocks: number; bytes: number; seq: number | undefined; expected: number }> {
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

/** One model server's subscription, sequence, block map and relay sequence. */
class PodRelay {
  private readonly sub: Subscriber;
  private readonly map: PodKvMap;
  private readonly seq = new SeqTracker();
  /**
   * The relay's own sequence for this pod: +1 per published batch, starting from the clock in
   * microseconds so a restarted collector continues above what receivers last saw.
   */
  private relaySeq: number;
  private published = false;
  private closed = false;
  /** The connection dropped since the last message: the next one starts the pod afresh. */
  private resync = false;

  constructor(
    private readonly relay: KvRelay,
    readonly spec: EndpointSpec,
  ) {
    const o = relay.options;
    this.map = new PodKvMap(o.maxBytesPerPod);
    this.relaySeq = relay.now() * 1000;
    this.sub = new Subscriber({
      linger: 0,
      reconnectInterval: o.reconnectMs,
      reconnectMaxInterval: o.reconnectMaxMs,
      // Far larger messages are refused by ZeroMQ itself (the peer is disconnected) before any allocation.
      maxMessageSize: 4 * o.limits.maxPayloadBytes,
      ipv6: (spec.kvEvents as string).includes('['),
    });
    this.sub.events.on('connect', () => o.metrics.kvConnections.inc({ event: 'connect' }));
    this.sub.events.on('disconnect', () => {
      o.metrics.kvConnections.inc({ event: 'disconnect' });
      // Messages may be lost while disconnected, and the server may come back restarted with a
      // sequence that happens to continue ours: only a fresh start is safe.
      this.resync = true;
    });
    this.sub.events.on('connect:retry', () => o.metrics.kvConnections.inc({ event: 'retry' }));
    this.sub.subscribe(o.topic);
    this.sub.connect(spec.kvEvents as string);
    void this.receive();
  }

  status() {
    return {
      pod: this.spec.pod,
      blocks: this.map.blocks,
      bytes: this.map.bytes,
      seq: this.published ? this.relaySeq - 1 : undefined,
      expected: this.seq.expected,
    };
  }

  /** Stops following; `gone`: the endpoint was removed, so receivers are told its blocks are gone. */
  close(gone: boolean): void {
    if (this.closed) return;
    this.closed = true;
    this.sub.close();
    if (gone && this.published) this.publish([[KV_CLEARED]]);
  }

  private async receive(): Promise<void> {
    try {
      for await (const frames of this.sub) {
        if (this.closed) return;
        await this.onMessage(frames);
      }
    } catch (err) {
      if (!this.closed) this.relay.options.logger.warn({ pod: this.spec.pod, err }, 'KV events: subscription failed');
    }
  }

  private async onMessage(frames: Buffer[]): Promise<void> {
    const { pod } = this.spec;
    const o = this.relay.options;
    if (frames.length !== 3) return this.relay.dropped(pod, 'bad-frames', `${frames.length} frames`);
    const seq = decodeVllmSeq(frames[1] as Buffer);
    if (seq === undefined || seq < 0)
      return this.relay.dropped(pod, 'bad-seq', `sequence frame of ${(frames[1] as Buffer).byteLength} bytes`);
    o.metrics.kvBatchesReceived.inc();
    if (this.resync) {
      this.resync = false;
      o.metrics.kvGaps.inc({ handling: 'reconnect' });
      return this.apply(seq, frames[2] as Buffer, true);
    }
    const verdict = this.seq.verdict(seq);
    if (verdict === 'duplicate') return;
    let fresh = false;
    if (verdict === 'gap') {
      const recovered = this.spec.kvReplay !== undefined && (await this.replay(this.seq.expected, seq));
      o.metrics.kvGaps.inc({ handling: recovered ? 'replay' : 'cleared' });
      if (this.closed) return;
      // Not (fully) recovered: what was missed is unknown, so the pod starts afresh here.
      fresh = this.seq.verdict(seq) !== 'apply';
    } else if (verdict === 'restart') {
      o.metrics.kvGaps.inc({ handling: 'restart' });
      fresh = true;
    }
    this.apply(seq, frames[2] as Buffer, fresh);
  }

  /** Folds one server batch and publishes what it changed. `fresh`: start the pod over first. */
  private apply(seq: number, payload: Uint8Array, fresh: boolean): void {
    const { pod } = this.spec;
    this.seq.advance(seq);
    const events: KvEvent[] = [];
    // The first batch a collector relays for a pod starts it afresh too: receivers may hold what
    // an earlier collector said, which this one cannot vouch for.
    if (fresh || !this.published) {
      this.map.clear();
      events.push([KV_CLEARED]);
    }
    const decoded = decodeVllmKvBatch(payload, this.relay.options.limits);
    if (!decoded.ok) {
      this.relay.dropped(pod, decoded.reason, decoded.detail);
      // A lost batch may have removed blocks: never claim them; start afresh.
      if (events.length === 0) {
        this.map.clear();
        events.push([KV_CLEARED]);
      }
    } else {
      if (decoded.batch.unknownEvents > 0) this.relay.options.metrics.kvDropped.inc({ reason: 'unknown-tag' }, decoded.batch.unknownEvents);
      events.push(...this.map.fold(decoded.batch, (reason, blocks) => this.relay.skipped(pod, reason, blocks)));
    }
    if (events.length > 0) this.publish(events);
  }

  private publish(events: KvEvent[]): void {
    const o = this.relay.options;
    // Before the server's first BlockStored only `cleared` events go out, which no block size qualifies.
    const blockSize = this.map.blockSize || 16;
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
        for (const e of chunk) o.metrics.kvEventsRelayed.inc({ type: e[0] === 1 ? 'stored' : e[0] === 2 ? 'removed' : 'cleared' });
      } else {
        o.metrics.kvDropped.inc({ reason: 'nats-down' });
      }
    }
  }

  publishSnapshot(): void {
    const o = this.relay.options;
    if (!this.published || this.closed || this.map.blockSize === 0) return;
    const event = fitKvSnapshot(
      {
        v: 1,
        kind: 'kv',
        pool: o.pool,
        zone: this.spec.zone,
        pod: this.spec.pod,
        observedAt: this.relay.now(),
        blockSize: this.map.blockSize,
        seq: this.relaySeq - 1,
        keys: this.map.snapshotKeys(),
      },
      o.sink.maxPayload(),
    );
    if (o.sink.publishKvSnapshot(event)) o.metrics.kvSnapshots.inc();
    else o.metrics.kvDropped.inc({ reason: 'nats-down' });
  }

  /**
   * Asks the server's ROUTER socket for batches `from` onwards (vLLM's protocol: `["", seq]` in,
   * `["", seq, payload]` out per batch, then seq -1) and applies those that continue the
   * sequence. True when the sequence reaches `upTo` (the live message that revealed the gap).
   */
  private async replay(from: number, upTo: number): Promise<boolean> {
    const o = this.relay.options;
    const dealer = new Dealer({
      linger: 0,
      ipv6: (this.spec.kvReplay as string).includes('['),
      receiveTimeout: o.replayTimeoutMs,
      sendTimeout: o.replayTimeoutMs,
      maxMessageSize: 4 * o.limits.maxPayloadBytes,
    });
    try {
      dealer.connect(this.spec.kvReplay as string);
      await dealer.send(['', encodeVllmSeq(from)]);
      // Bounded: at most the batches up to the live one, plus the end marker.
      for (let n = 0; n <= upTo - from + 1 && !this.closed; n++) {
        const frames = await dealer.receive();
        const seq = frames.length === 3 ? decodeVllmSeq(frames[1] as Buffer) : undefined;
        if (seq === undefined) {
          this.relay.dropped(this.spec.pod, 'bad-frames', 'replay reply');
          return false;
        }
        if (seq === -1) break;
        if (seq >= upTo) continue;
        if (this.seq.verdict(seq) !== 'apply') continue;
        this.apply(seq, frames[2] as Buffer, false);
      }
      this.seq.replayed(from, this.seq.expected);
      return this.seq.expected >= upTo;
    } catch (err) {
      this.relay.logLimited(this.spec.pod, 'replay', () =>
        o.logger.warn({ pod: this.spec.pod, err: (err as Error).message }, 'KV events: replay failed; starting the pod afresh'),
      );
      return false;
    } finally {
      dealer.close();
    }
  }
}
