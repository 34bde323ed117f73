import { jetstreamManager } from '@nats-io/jetstream';
import {
  ConnectionTracker,
  EventPublisher,
  connectNatsWithRetry,
  describeDifferences,
  ensureStream,
  type NatsSettings,
} from '@spillway/bus';
import {
  encodeKvBatch,
  kvSubjectFor,
  MAX_KV_SNAPSHOT_BYTES,
  type KvBatch,
  type KvSnapshotEvent,
  type MetricsEvent,
  type ReadinessEvent,
} from '@spillway/events';
import type { KvSink } from './kv-relay.js';
import type { Logger } from 'pino';
import type { EventSink } from './sink.js';

type NatsConnection = NonNullable<Awaited<ReturnType<typeof connectNatsWithRetry>>>;

/**
 * About the bytes of a metrics event's JSON, without encoding it: its fixed fields take well
 * under 1 KB; only names can make it large (up to 2 × 1024 LoRA adapters of 253 characters).
 */
function approxBytes(event: MetricsEvent): number {
  let bytes = 512 + event.pool.length + event.zone.length + event.pod.length;
  const lora = event.lora;
  if (lora !== undefined) {
    for (const name of lora.running) bytes += name.length + 3;
    for (const name of lora.waiting) bytes += name.length + 3;
  }
  return bytes;
}

/** How long closing waits for the server to confirm what was published (only while connected). */
const FLUSH_ON_CLOSE_MS = 2_000;

export interface NatsSinkOptions {
  settings: NatsSettings;
  stream: string;
  /** Subjects this collector publishes (its pool and zone); an existing stream need capture only these. */
  requiredSubjects?: string[];
  logger: Logger;
  /** How long one readiness publish retries before giving up (the periodic re-publish covers the rest). */
  readinessRetryMs?: number;
  /** How long a metrics sample may wait for others to share its socket write (default METRICS_BATCH_MS; 0: the end of the turn). */
  metricsBatchMs?: number;
}

/**
 * Metrics samples wait at most this long to leave together. Scrapes of hundreds of endpoints end
 * a few at a time over the interval, so batching by turn of the event loop still made one socket
 * write (a system call) every millisecond or so — a tenth of the collector's CPU on a busy machine.
 * A few milliseconds gather each write's worth of samples, and cost nothing a reader sees: the EPP
 * reads samples taken every 100 ms.
 */
export const METRICS_BATCH_MS = 5;
/** A batch leaves at once when it holds this many samples, or about this many bytes (see approxBytes). */
const MAX_BATCH_SAMPLES = 256;
const MAX_BATCH_BYTES = 256 * 1024;

/**
 * The collector's events into NATS through `@spillway/bus`: readiness acked with a `Nats-Msg-Id`,
 * metrics as core publishes dropped (never queued) while disconnected. Connecting happens in the
 * background, so the collector probes and scrapes from the start and a NATS outage at startup or
 * later only pauses publishing. Every (re)connect ensures the stream (a server restarted without
 * its store has none) and tells the collector to re-publish readiness.
 */
export class NatsSink implements EventSink, KvSink {
  private nc: NatsConnection | undefined;
  private publisher: EventPublisher | undefined;
  private tracker: ConnectionTracker | undefined;
  private readonly listeners: (() => void)[] = [];
  /** Metrics samples waiting to be published together (see METRICS_BATCH_MS), and their approximate size. */
  private pending: MetricsEvent[] = [];
  private pendingBytes = 0;
  private batchTimer: NodeJS.Timeout | undefined;
  private batchImmediate: NodeJS.Immediate | undefined;
  /** The longest a metrics sample waits in the sink before it is handed to the NATS client, ms. */
  readonly metricsBatchMs: number;
  private readonly publishPending = (): void => {
    clearTimeout(this.batchTimer);
    clearImmediate(this.batchImmediate);
    this.batchTimer = undefined;
    this.batchImmediate = undefined;
    const batch = this.pending;
    if (batch.length === 0) return;
    this.pending = [];
    this.pendingBytes = 0;
    for (const event of batch) this.publisher?.publishMetrics(event);
  };
  private readonly connected: Promise<EventPublisher>;
  private closed = false;
  /** Stops connecting (and ensuring the stream) when the sink closes before NATS was reached. */
  private readonly stopConnecting = new AbortController();

  constructor(private readonly options: NatsSinkOptions) {
    this.metricsBatchMs = Math.max(0, options.metricsBatchMs ?? METRICS_BATCH_MS);
    this.connected = this.connect();
    this.connected.catch(() => undefined);
  }

  /** Resolves once connected and the stream is ensured (for tests and startup logs). */
  async ready(): Promise<void> {
    await this.connected;
  }

  async publishReadiness(event: ReadinessEvent): Promise<void> {
    const publisher = await this.connected;
    await publisher.publishReadiness(event);
  }

  /**
   * Samples leave in batches: the client writes to its socket once per batch of publishes, and
   * scrapes of hundreds of endpoints finish a few at a time, so handing each over at once cost one
   * socket write per sample (a large part of a scrape's CPU). A batch goes out `metricsBatchMs`
   * after its first sample (0: at the end of the turn), or at once when it holds MAX_BATCH_SAMPLES
   * samples or about MAX_BATCH_BYTES bytes: bounded in time, count and bytes. A sample is dropped,
   * not held, while the connection is down.
   */
  publishMetrics(event: MetricsEvent): boolean {
    const publisher = this.publisher;
    if (publisher === undefined) return false;
    const nc = this.nc;
    if (nc === undefined || nc.isClosed() || this.tracker?.status.state !== 'connected') return publisher.publishMetrics(event);
    this.pending.push(event);
    this.pendingBytes += approxBytes(event);
    if (this.pending.length >= MAX_BATCH_SAMPLES || this.pendingBytes >= MAX_BATCH_BYTES) this.publishPending();
    else if (this.batchTimer === undefined && this.batchImmediate === undefined) {
      if (this.metricsBatchMs > 0) this.batchTimer = setTimeout(this.publishPending, this.metricsBatchMs);
      else this.batchImmediate = setImmediate(this.publishPending);
    }
    return true;
  }

  /** Relayed KV batches: core NATS, outside the stream; dropped (never queued) while disconnected. */
  publishKvBatch(batch: KvBatch): boolean {
    const nc = this.nc;
    if (!nc || nc.isClosed() || this.tracker?.status.state !== 'connected') return false;
    nc.publish(kvSubjectFor(batch), encodeKvBatch(batch));
    return true;
  }

  publishKvSnapshot(event: KvSnapshotEvent): boolean {
    return this.publisher?.publishKvSnapshot(event) ?? false;
  }

  maxPayload(): number {
    return this.nc?.info?.max_payload ?? MAX_KV_SNAPSHOT_BYTES;
  }

  onReconnect(listener: () => void): void {
    this.listeners.push(listener);
  }

  /** Connected to a server now (not connecting, reconnecting or closed). */
  get isConnected(): boolean {
    return this.nc !== undefined && !this.nc.isClosed() && this.tracker?.status.state === 'connected';
  }

  /**
   * Closes the connection. While connected, what was published is flushed first (for at most
   * FLUSH_ON_CLOSE_MS); otherwise nothing is waited for: a flush or a retrying readiness publish
   * would wait for a server that is gone, and the collector must stop when told to. Publishes still
   * in flight then fail at once (the next collector re-publishes every pod's readiness).
   */
  async close(): Promise<void> {
    this.publishPending();
    this.closed = true;
    this.stopConnecting.abort();
    const nc = this.nc;
    if (nc && !nc.isClosed()) {
      if (this.isConnected) {
        let timer: NodeJS.Timeout | undefined;
        const waited = new Promise<void>((resolve) => (timer = setTimeout(resolve, FLUSH_ON_CLOSE_MS)));
        await Promise.race([nc.flush().catch(() => undefined), waited]);
        clearTimeout(timer);
      }
      await nc.close();
    }
  }

  private async connect(): Promise<EventPublisher> {
    const { settings, logger } = this.options;
    // Keeps trying (each cause logged) until the server is up, or the sink closes.
    const nc = await connectNatsWithRetry(settings, { logger, signal: this.stopConnecting.signal });
    if (nc === undefined || this.closed) {
      await nc?.close();
      throw new Error('sink closed');
    }
    this.nc = nc;
    logger.info({ server: nc.getServer() }, 'connected to NATS');
    const tracker = new ConnectionTracker(nc);
    this.tracker = tracker;
    await this.ensure(nc);
    const publisher = new EventPublisher(nc, { connection: tracker, retryForMs: this.options.readinessRetryMs ?? 10_000 });
    this.publisher = publisher;
    void this.follow(nc, tracker);
    return publisher;
  }

  private async ensure(nc: NatsConnection): Promise<void> {
    const { logger, stream } = this.options;
    for (let attempt = 0; !this.closed && !nc.isClosed(); attempt++) {
      try {
        const jsm = await jetstreamManager(nc, { checkAPI: false });
        const result = await ensureStream(jsm, { name: stream, requiredSubjects: this.options.requiredSubjects });
        if (result.created) logger.info({ stream }, 'created stream');
        for (const line of describeDifferences(result)) logger.warn(line);
        return;
      } catch (error) {
        // JetStream may still be starting; publishing readiness needs the stream, so keep trying.
        if (attempt === 0) logger.warn({ stream, error: (error as Error).message }, 'cannot ensure stream yet; retrying');
        await new Promise((r) => setTimeout(r, Math.min(2_000, 100 * 2 ** Math.min(attempt, 5))));
      }
    }
  }

  private async follow(nc: NatsConnection, tracker: ConnectionTracker): Promise<void> {
    const { logger } = this.options;
    let previous = tracker.status.state;
    for await (const status of tracker.changes()) {
      if (status.state !== previous) {
        if (status.state === 'connected') {
          logger.info({ server: status.server }, 'reconnected to NATS');
          await this.ensure(nc);
          for (const listener of this.listeners) listener();
        } else if (previous === 'connected') {
          logger.warn({ state: status.state }, 'lost NATS; dropping metric samples until reconnected');
        }
        previous = status.state;
      }
    }
  }
}
