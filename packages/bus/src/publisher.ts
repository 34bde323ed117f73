import { jetstream, JetStreamApiError, type JetStreamClient } from '@nats-io/jetstream';
import { errors, type NatsConnection } from '@nats-io/nats-core';
import { encodeEvent, subjectOf, type KvSnapshotEvent, type MetricsEvent, type ReadinessEvent, type SpillwayEvent } from '@spillway/events';
import type { ConnectionTracker } from './connection-state.js';

export interface PublisherOptions {
  /** A JetStream client to use (for domains or custom API prefixes); default `jetstream(nc)`. */
  js?: JetStreamClient;
  /** How long one readiness publish keeps retrying (server down, JetStream restarting) before it rejects. */
  retryForMs?: number;
  /** How long each attempt waits for the stream's ack. */
  ackTimeoutMs?: number;
  /**
   * When given, metric samples are dropped while the connection is down instead of being buffered:
   * nats.js buffers without a cap while disconnected, and a sample is worthless once the next one
   * is taken, so a long outage must not pile them up in memory.
   */
  connection?: ConnectionTracker;
}

export interface PublisherCounters {
  readinessAcked: number;
  /** Acks for a msgID the stream had already stored (a retry that had in fact gone through). */
  readinessDuplicates: number;
  readinessRetries: number;
  metricsSent: number;
  metricsDropped: number;
  kvSnapshotsSent: number;
  kvSnapshotsDropped: number;
}

export interface ReadinessAck {
  seq: number;
  duplicate: boolean;
}

/**
 * Publishes v1 events (docs/events.md): readiness acked by the stream with a deterministic
 * `Nats-Msg-Id`, so a retry after a lost ack is deduplicated; metric samples as core publishes
 * into the same subjects, captured by the stream with no ack awaited (they are superseded every
 * sample interval, so an ack per sample would cost a round trip for nothing).
 */
export class EventPublisher {
  readonly counters: PublisherCounters = {
    readinessAcked: 0,
    readinessDuplicates: 0,
    readinessRetries: 0,
    metricsSent: 0,
    metricsDropped: 0,
    kvSnapshotsSent: 0,
    kvSnapshotsDropped: 0,
  };
  private readonly js: JetStreamClient;
  private readonly retryForMs: number;
  private readonly ackTimeoutMs: number;

  constructor(
    private readonly nc: NatsConnection,
    private readonly options: PublisherOptions = {},
  ) {
    this.js = options.js ?? jetstream(nc);
    this.retryForMs = options.retryForMs ?? 30_000;
    this.ackTimeoutMs = options.ackTimeoutMs ?? 2_000;
  }

  /** Readiness is acked (awaited); metrics and kv snapshots resolve at once (false when dropped while disconnected). */
  publish(event: SpillwayEvent): Promise<ReadinessAck | boolean> {
    if (event.kind === 'readiness') return this.publishReadiness(event);
    return Promise.resolve(event.kind === 'metrics' ? this.publishMetrics(event) : this.publishKvSnapshot(event));
  }

  /**
   * Publishes and waits for the stream's ack, retrying with the same msgID on timeouts and missing
   * responders (server restarting) until `retryForMs` has passed. Rejects on a definitive refusal
   * (a JetStream API error, or the connection closed).
   */
  async publishReadiness(event: ReadinessEvent): Promise<ReadinessAck> {
    const subject = subjectOf(event);
    const data = encodeEvent(event);
    const msgID = readinessMsgId(subject, event.observedAt, data);
    const deadline = Date.now() + this.retryForMs;
    for (let attempt = 0; ; attempt++) {
      try {
        const ack = await this.js.publish(subject, data, { msgID, timeout: this.ackTimeoutMs });
        this.counters.readinessAcked++;
        if (ack.duplicate) this.counters.readinessDuplicates++;
        return { seq: ack.seq, duplicate: ack.duplicate };
      } catch (error) {
        if (!retryable(error) || Date.now() >= deadline) throw explained(error, subject);
        this.counters.readinessRetries++;
        await sleep(Math.min(1_000, 100 * 2 ** Math.min(attempt, 4)));
      }
    }
  }

  /** Fire and forget into the stream subject. Returns false when dropped because NATS is down. */
  publishMetrics(event: MetricsEvent): boolean {
    const sent = this.publishCore(event);
    if (sent) this.counters.metricsSent++;
    else this.counters.metricsDropped++;
    return sent;
  }

  /**
   * A pod's KV block set, like a metric sample: superseded by the next one, so fire and forget.
   * The caller fits it to the server's `max_payload` (`fitKvSnapshot`).
   */
  publishKvSnapshot(event: KvSnapshotEvent): boolean {
    const sent = this.publishCore(event);
    if (sent) this.counters.kvSnapshotsSent++;
    else this.counters.kvSnapshotsDropped++;
    return sent;
  }

  private publishCore(event: MetricsEvent | KvSnapshotEvent): boolean {
    const state = this.options.connection?.status.state;
    if (this.nc.isClosed() || (state !== undefined && state !== 'connected')) return false;
    this.nc.publish(subjectOf(event), encodeEvent(event));
    return true;
  }

  /** Resolves once the server has received everything published so far (not that the stream stored it). */
  flush(): Promise<void> {
    return this.nc.flush();
  }
}

/**
 * Deterministic from what the event is, so a retry of the same event carries the same id and the
 * stream drops the copy: the subject names pool, zone, pod and kind; observedAt the instant; a hash
 * of the payload keeps two different events stamped in the same millisecond apart.
 */
export function readinessMsgId(subject: string, observedAt: number, payload: Uint8Array): string {
  return `${subject}@${observedAt}#${fnv1a(payload).toString(16)}`;
}

function fnv1a(bytes: Uint8Array): number {
  let hash = 0x811c9dc5;
  for (const byte of bytes) {
    hash ^= byte;
    hash = Math.imul(hash, 0x01000193) >>> 0;
  }
  return hash;
}

/**
 * nats.js reports a publish nobody acks as "jetstream is not enabled"; for Spillway that almost
 * always means no stream captures the subject (deleted, never created, or subjects too narrow).
 */
function explained(error: unknown, subject: string): unknown {
  // The class is not exported by @nats-io/jetstream; its name is set on every instance.
  if (!(error instanceof Error) || error.name !== 'JetStreamNotEnabled') return error;
  return new Error(`no stream captures ${subject}: the stream is missing (deleted or not created yet) or does not cover this subject`, {
    cause: error,
  });
}

function retryable(error: unknown): boolean {
  if (error instanceof JetStreamApiError) return false;
  if (error instanceof errors.ClosedConnectionError || error instanceof errors.DrainingConnectionError) return false;
  if (error instanceof errors.PermissionViolationError) return false;
  return true;
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}
