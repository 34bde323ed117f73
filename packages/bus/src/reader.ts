import {
  DeliverPolicy,
  jetstream,
  jetstreamManager,
  JetStreamApiError,
  type ConsumerMessages,
  type JetStreamClient,
  type JetStreamManager,
  type JsMsg,
  type OrderedConsumerOptions,
} from '@nats-io/jetstream';
import type { NatsConnection } from '@nats-io/nats-core';
import { decodeEvent, poolFilter, type SpillwayEvent } from '@spillway/events';
import { ConnectionTracker, type ConnectionState } from './connection-state.js';
import type { Logger } from './logger.js';
import { Notifier } from './notifier.js';
import { isSinkNotice, isSinkRefusal, RejectLog, type RejectReason, type SinkNotice, type SinkRefusal } from './rejects.js';
import { DEFAULT_STREAM } from './stream.js';

/**
 * Where a reader's events go: the view. The bus knows nothing else about it; `Fleet` fits as is.
 * (Not to be confused with the collector's EventSink, where the collector's events go out.)
 * `receivedAt` is ms on the reader's clock (see EventReader for which clock when). `apply` may
 * return `'future'` or `'over-capacity'` to say it refused the event (the Fleet does): the reader
 * then logs it (rate-limited) and counts it by reason; the sink counts it itself.
 */
export interface ReaderSink {
  apply(event: SpillwayEvent, receivedAt: number): unknown;
  recordRejected(): void;
}

export interface ReaderOptions {
  pool: string;
  sink: ReaderSink;
  stream?: string;
  logger?: Logger;
  /** The reader's clock (ms); injectable for tests. */
  now?: () => number;
  /** Pull request lifetime. Short, so a lost pull is noticed within seconds (see Recovery below). */
  expiresMs?: number;
  /** Idle heartbeat asked of the server; two missed ones make the client re-pull. */
  idleHeartbeatMs?: number;
  /** Messages per pull. */
  batch?: number;
  /**
   * Called when the stream turns out to be missing (deleted while running, or never created), before
   * the reader retries: the EPP re-creates it here when it may (`--ensure-stream`). Errors are logged.
   */
  onStreamMissing?: () => Promise<unknown>;
  /** Share a connection tracker (e.g. the EPP's, already following `nc.status()`). */
  connection?: ConnectionTracker;
  js?: JetStreamClient;
  jsm?: JetStreamManager;
}

export interface ReaderStatus {
  readonly connection: ConnectionState;
  /** The first replay has reached the end of the stream (the EPP's readiness gate). */
  readonly caughtUp: boolean;
  /**
   * Since when the view may be missing events (ms): set when the connection drops, cleared once the
   * consumer is re-established and has caught up again. Undefined while the view is current.
   */
  readonly staleSince: number | undefined;
  readonly reconnects: number;
  /** Consumers re-created by the reader (after reconnects, gaps or stalls). */
  readonly consumerRestarts: number;
  /** Stream sequence of the last message handled: the cursor a re-created consumer starts after. */
  readonly lastSequence: number;
  /** Messages handled (applied, ignored as old, or rejected). */
  readonly received: number;
  /** When the last message was handled (ms, the reader's clock); undefined before any. */
  readonly lastReceivedAt: number | undefined;
  /** Messages of the pool the stream held beyond the last one handled, when it was handled: the consumer's backlog. */
  readonly pending: number;
  /** How long the last message waited in the stream before it was handled (ms; the server's clock against the reader's). */
  readonly lastDelayMs: number | undefined;
  /** Messages that never reached the view: malformed, or valid but refused by the sink. */
  readonly rejected: number;
  readonly rejectedByReason: Readonly<Partial<Record<RejectReason, number>>>;
}

const INTERRUPTED = Symbol('interrupted');

/** Why the reader dropped its consumer and made a new one. */
type RestartCause = 'reconnect' | 'recreated' | 'stalled' | 'ended' | 'deleted';

/** Missed-heartbeat count at which the reader stops trusting the client's own recovery. */
const STALL_HEARTBEATS = 4;

/**
 * Replay-then-follow (docs/events.md, "Streams"): an ordered consumer with `last_per_subject` over the pool's
 * subjects rebuilds the view, then the same consumer follows live.
 *
 * Recovery. nats.js recreates an ordered consumer on its own after a gap or a lost consumer, but
 * its first pull after that asks only for what was left of the dead consumer's batch, and delivery
 * stalls until two heartbeats are missed (seen after a server restart). So the reader does not rely on it: on
 * every reconnect, on `ordered_consumer_recreated`, and on a long run of missed heartbeats it stops
 * the consumer and creates a fresh one starting after the last stream sequence it handled
 * (`by_start_sequence`). That is exact for last-value state: the stream keeps at most one message
 * per subject, every retained message up to the cursor has already been applied (the ordered
 * consumer guarantees no gaps), and every subject written since has its latest value after the
 * cursor. If the stream's last sequence is below the cursor the stream itself was recreated, and
 * the reader replays it from scratch with `last_per_subject`.
 *
 * receivedAt. While a consumer is catching up (the first replay, and the backlog after a
 * recovery) a message's receivedAt is its stream timestamp (capped at now), so a sample stored a
 * minute ago is a minute old, not fresh; once the consumer is at the head of the stream it is the
 * local clock, which is the clock the EPP's freshness checks use, so server clock skew cannot make
 * live samples look stale or fresh.
 */
export class EventReader {
  /** Resolves when the first replay has caught up. Never rejects; it stays pending if it never does. */
  readonly caughtUp: Promise<void>;
  private markCaughtUp!: () => void;
  private isCaughtUp = false;
  private readonly now: () => number;
  private readonly js: JetStreamClient;
  private jsm: JetStreamManager | undefined;
  private readonly tracker: ConnectionTracker;
  private readonly rejects: RejectLog;
  private readonly notifier = new Notifier<ReaderStatus>();
  private readonly stream: string;
  private readonly filter: string;

  private cursor = 0;
  /** Creation time of the stream the cursor belongs to: a different one means the stream was re-created. */
  private streamCreated: string | undefined;
  private received = 0;
  private lastReceivedAt: number | undefined;
  private pending = 0;
  private lastDelayMs: number | undefined;
  private consumerRestarts = 0;
  private staleSince: number | undefined;
  /** The current consumer is still working through a backlog (use stream timestamps). */
  private catchingUp = true;
  private messages: ConsumerMessages | undefined;
  private restartCause: RestartCause | undefined;
  private wake: (() => void) | undefined;
  private closing = false;
  private readonly loop: Promise<void>;
  private stopWatchingConnection: (() => void) | undefined;
  private connectedWaiters: (() => void)[] = [];
  private interrupt: (() => void) | undefined;

  constructor(
    private readonly nc: NatsConnection,
    private readonly options: ReaderOptions,
  ) {
    this.caughtUp = new Promise((resolve) => (this.markCaughtUp = resolve));
    this.now = options.now ?? Date.now;
    this.js = options.js ?? jetstream(nc);
    this.jsm = options.jsm;
    this.tracker = options.connection ?? new ConnectionTracker(nc, this.now);
    this.rejects = new RejectLog(options.logger, options.pool);
    this.stream = options.stream ?? DEFAULT_STREAM;
    this.filter = poolFilter(options.pool);
    void this.watchConnection();
    this.loop = this.run();
  }

  get status(): ReaderStatus {
    const connection = this.tracker.status;
    return {
      connection: connection.state,
      caughtUp: this.isCaughtUp,
      staleSince: this.staleSince,
      reconnects: connection.reconnects,
      consumerRestarts: this.consumerRestarts,
      lastSequence: this.cursor,
      received: this.received,
      lastReceivedAt: this.lastReceivedAt,
      pending: this.pending,
      lastDelayMs: this.lastDelayMs,
      rejected: this.rejects.total,
      rejectedByReason: { ...this.rejects.byReason },
    };
  }

  /** Status snapshots on every change of connection, staleness, caught-up or consumer. */
  changes(): AsyncIterable<ReaderStatus> {
    return this.notifier.subscribe(this.status);
  }

  /** Stops following. Does not close the connection (the caller owns it). */
  async close(): Promise<void> {
    if (this.closing) return this.loop;
    this.closing = true;
    this.stopWatchingConnection?.();
    this.releaseWaiters();
    this.messages?.stop();
    this.wake?.();
    await this.loop;
    this.notifier.end();
  }

  private async run(): Promise<void> {
    let failures = 0;
    let streamMissing = false;
    while (!this.closing && !this.nc.isClosed()) {
      // A JetStream request made while disconnected is buffered and can hang until its timeout
      // (5 s) even after the reconnect; wait for the connection instead.
      await this.connected();
      if (this.closing || this.nc.isClosed()) break;
      try {
        await this.session();
        failures = 0;
        streamMissing = false;
      } catch (error) {
        if (this.closing || this.nc.isClosed()) break;
        failures++;
        // No consumer means no events: the view is stale until one catches up again.
        if (this.staleSince === undefined && this.isCaughtUp) this.staleSince = this.now();
        if (isStreamMissing(error)) {
          if (!streamMissing)
            this.options.logger?.warn(
              { pool: this.options.pool, stream: this.stream },
              'the event stream is missing (deleted?); waiting for it to be created',
            );
          streamMissing = true;
          if (this.options.onStreamMissing) {
            // Observed with nats-server 2.9.10: a file stream created again within milliseconds of
            // its deletion can come up broken (its per-subject limit not enforced, consumers never
            // delivered to). Let the deletion settle first.
            await this.pause(STREAM_RECREATE_DELAY_MS);
            if (this.closing) break;
            try {
              await this.options.onStreamMissing();
            } catch (ensureError) {
              if (failures === 1)
                this.options.logger?.warn(
                  { pool: this.options.pool, stream: this.stream, error: (ensureError as Error).message },
                  'cannot re-create the event stream; retrying',
                );
            }
          }
        } else if (failures === 1) {
          // Once per outage, not once per retry.
          this.options.logger?.warn(
            { pool: this.options.pool, stream: this.stream, error: (error as Error).message },
            'event consumer failed; retrying',
          );
        }
        await this.pause(Math.min(2_000, 100 * 2 ** Math.min(failures, 5)));
      }
      if (!this.closing && this.restartCause === undefined) this.restartCause = 'ended';
      if (!this.closing) {
        this.consumerRestarts++;
        if (failures <= 1)
          this.options.logger?.info?.(
            { pool: this.options.pool, cause: this.restartCause, after: this.cursor },
            're-creating the event consumer',
          );
        this.publish();
      }
    }
  }

  /** One consumer's life: create it from the cursor, drain it until it ends or is stopped. */
  private async session(): Promise<void> {
    this.restartCause = undefined;
    const interrupted = new Promise<typeof INTERRUPTED>((resolve) => (this.interrupt = () => resolve(INTERRUPTED)));
    // A request sent just before the connection died is never answered, and nats.js would wait for
    // its timeout (5 s) even after the reconnect: a restart abandons it instead.
    const race = <T>(request: Promise<T>): Promise<T | typeof INTERRUPTED> => Promise.race([request, interrupted]);

    if ((await race(this.checkCursor())) === INTERRUPTED) return;
    const ordered: Partial<OrderedConsumerOptions> =
      this.cursor === 0
        ? { filter_subjects: this.filter, deliver_policy: DeliverPolicy.LastPerSubject }
        : { filter_subjects: this.filter, deliver_policy: DeliverPolicy.StartSequence, opt_start_seq: this.cursor + 1 };
    const creating = this.js.consumers.get(this.stream, ordered);
    const consumer = await race(creating);
    if (consumer === INTERRUPTED) {
      creating.then((late) => late.delete()).catch(() => undefined);
      return;
    }
    try {
      const info = await consumer.info(true);
      this.catchingUp = info.num_pending > 0;
      if (this.closing || this.restartCause !== undefined) return;
      const messages = await consumer.consume({
        max_messages: this.options.batch ?? 512,
        expires: this.options.expiresMs ?? 5_000,
        idle_heartbeat: this.options.idleHeartbeatMs ?? 1_000,
      });
      this.messages = messages;
      if (this.restartCause !== undefined) messages.stop();
      if (!this.catchingUp) this.reachedHead();
      void this.watchConsumer(messages);
      for await (const m of messages) this.handle(m);
    } finally {
      this.messages = undefined;
      // The ephemeral consumer would expire by itself after its inactivity threshold; free it now.
      consumer.delete().catch(() => undefined);
    }
  }

  /**
   * If the stream was deleted and created again since the cursor was taken (another creation time,
   * or it now ends before the cursor), the cursor means nothing there: start over.
   */
  private async checkCursor(): Promise<void> {
    this.jsm ??= await jetstreamManager(this.nc, { checkAPI: false });
    try {
      const info = await this.jsm.streams.info(this.stream);
      const recreated = this.streamCreated !== undefined && info.created !== this.streamCreated;
      if (recreated || info.state.last_seq < this.cursor) this.cursor = 0;
      this.streamCreated = info.created;
    } catch {
      // Stream missing (the consumer create reports it and the session retries), or no permission
      // to look (the cursor is then trusted as before): neither stops the reader here.
    }
  }

  private handle(m: JsMsg): void {
    this.received++;
    const now = this.now();
    const storedAt = Math.floor(m.info.timestampNanos / 1e6);
    const receivedAt = this.catchingUp ? Math.min(now, storedAt) : now;
    this.lastReceivedAt = now;
    this.pending = m.info.pending;
    this.lastDelayMs = Math.max(0, now - storedAt);
    const decoded = decodeEvent(m.data, m.subject);
    if (decoded.ok) {
      try {
        const outcome = this.options.sink.apply(decoded.event, receivedAt);
        if (isSinkRefusal(outcome)) this.rejects.record(m.subject, outcome, refusalDetail(outcome, decoded.event, receivedAt), now);
        else if (isSinkNotice(outcome)) this.rejects.notice(m.subject, outcome, refusalDetail(outcome, decoded.event, receivedAt), now);
      } catch (error) {
        this.reject(m.subject, 'apply-failed', (error as Error).message, now);
      }
    } else {
      this.reject(m.subject, decoded.error.reason, decoded.error.message, now);
    }
    this.cursor = m.seq;
    if (m.info.pending === 0 && this.catchingUp) this.reachedHead();
  }

  private reject(subject: string, reason: RejectReason, message: string, now: number): void {
    this.options.sink.recordRejected();
    this.rejects.record(subject, reason, message, now);
  }

  /** The current consumer has delivered everything the stream held for the filter. */
  private reachedHead(): void {
    this.catchingUp = false;
    let changed = false;
    if (!this.isCaughtUp) {
      this.isCaughtUp = true;
      this.markCaughtUp();
      changed = true;
    }
    if (this.staleSince !== undefined && this.tracker.status.state === 'connected') {
      this.staleSince = undefined;
      changed = true;
    }
    if (changed) this.publish();
  }

  private restart(cause: RestartCause): void {
    if (this.closing) return;
    this.restartCause ??= cause;
    this.interrupt?.();
    this.messages?.stop();
    this.wake?.();
  }

  private async watchConnection(): Promise<void> {
    let reconnects = this.tracker.status.reconnects;
    const iterator = this.tracker.changes()[Symbol.asyncIterator]();
    this.stopWatchingConnection = () => void iterator.return?.();
    for (;;) {
      const next = await iterator.next();
      if (next.done || this.closing) break;
      const status = next.value;
      if (status.state === 'connected' || status.state === 'closed') this.releaseWaiters();
      if (status.state !== 'connected' && this.staleSince === undefined) {
        this.staleSince = status.disconnectedSince ?? this.now();
      }
      if (status.state === 'connected' && status.reconnects > reconnects) {
        reconnects = status.reconnects;
        // The server may have restarted and lost our ephemeral consumer; never wait for the
        // client's own recovery (see Recovery above), start a fresh consumer from the cursor now.
        this.restart('reconnect');
      }
      this.publish();
    }
  }

  private async watchConsumer(messages: ConsumerMessages): Promise<void> {
    for await (const s of messages.status()) {
      if (this.closing || this.messages !== messages) break;
      if (s.type === 'ordered_consumer_recreated') this.restart('recreated');
      // The consumer went with its stream (deleted): do not wait for missed heartbeats to notice.
      else if (s.type === 'consumer_deleted' || s.type === 'stream_not_found') this.restart('deleted');
      else if (s.type === 'heartbeats_missed' && s.count >= STALL_HEARTBEATS && this.tracker.status.state === 'connected')
        this.restart('stalled');
    }
  }

  private releaseWaiters(): void {
    const waiters = this.connectedWaiters;
    this.connectedWaiters = [];
    for (const wake of waiters) wake();
  }

  private connected(): Promise<void> {
    if (this.tracker.status.state === 'connected' || this.tracker.status.state === 'closed') return Promise.resolve();
    return new Promise((resolve) => this.connectedWaiters.push(resolve));
  }

  private pause(ms: number): Promise<void> {
    return new Promise((resolve) => {
      const timer = setTimeout(done, ms);
      function done() {
        clearTimeout(timer);
        resolve();
      }
      this.wake = () => {
        this.wake = undefined;
        done();
      };
    });
  }

  private publish(): void {
    this.notifier.publish(this.status);
  }
}

/** JetStream's "stream not found" (10059), from a consumer create or a stream lookup. */
function isStreamMissing(error: unknown): boolean {
  return (
    (error instanceof JetStreamApiError && error.code === STREAM_NOT_FOUND) || (error as Error | undefined)?.message === 'stream not found'
  );
}

const STREAM_NOT_FOUND = 10059;
/** How long after finding the stream missing the reader asks for it to be created again. */
const STREAM_RECREATE_DELAY_MS = 1_000;

function refusalDetail(reason: SinkRefusal | SinkNotice, event: SpillwayEvent, receivedAt: number): string {
  switch (reason) {
    case 'future':
      return `observedAt ${event.observedAt} is ${event.observedAt - receivedAt} ms after the receive time ${receivedAt}`;
    case 'over-capacity':
      return `zone ${event.zone} of pool ${event.pool} already holds the most pods allowed; new pod ${event.pod} refused`;
    case 'too-many-zones':
      return `pool ${event.pool} already holds the most zones allowed; pod ${event.pod} of new zone ${event.zone} refused`;
    case 'address-conflict':
      return `pod ${event.pod} of zone ${event.zone} claims ${event.kind === 'readiness' ? event.address : 'an address'}, which a pod of another zone claims too: an address belongs to one zone, so only this EPP's own zone's claimants (else none) are routed to`;
  }
}

/** Starts a reader; `await reader.caughtUp` before reporting ready. */
export function startReader(nc: NatsConnection, options: ReaderOptions): EventReader {
  return new EventReader(nc, options);
}
