import type { Logger } from 'pino';
import type { NatsConnection } from '@nats-io/nats-core';
import { jetstreamManager } from '@nats-io/jetstream';
import {
  connectNatsWithRetry,
  describeDifferences,
  ensureStream,
  startReader,
  type EventReader,
  type ReaderSink,
  type ReaderStatus,
} from '@spillway/bus';
import type { EppConfig } from '../config/config.js';
import { startChannel, type RunningChannel } from '../shared-state/channel.js';
import type { SharedStateCounters } from '../shared-state/counters.js';
import type { EppCore } from './core.js';
import type { Readiness } from './readiness.js';

export interface NatsFollowerParts {
  readonly config: EppConfig;
  readonly core: EppCore;
  readonly readiness: Readiness;
  readonly logger: Logger;
  /** This EPP's id among the pool's EPPs. */
  readonly eppId: string;
  /** The shared-state channel's counters; undefined when sharing is off. */
  readonly sharedCounters: SharedStateCounters | undefined;
}

/**
 * The EPP's NATS side, in the background: connected with retries, the stream ensured, the KV
 * subscription and the replay started into the fleet, readiness told once the replay caught up,
 * then the shared-state channel with its warm start. close() stops it whatever step it is at.
 */
export class NatsFollower {
  private nc: NatsConnection | undefined;
  private eventReader: EventReader | undefined;
  private channel: RunningChannel | undefined;
  private readonly stop = new AbortController();
  private readonly stopped: Promise<void>;
  private following: Promise<void> | undefined;

  constructor(private readonly parts: NatsFollowerParts) {
    this.stopped = new Promise<void>((resolve) => this.stop.signal.addEventListener('abort', () => resolve(), { once: true }));
  }

  /** The event reader, once NATS was first reached. */
  get reader(): EventReader | undefined {
    return this.eventReader;
  }

  get status(): ReaderStatus | undefined {
    return this.eventReader?.status;
  }

  start(): void {
    this.following = this.connectAndFollow().catch((error: unknown) => {
      if (!this.closed) this.parts.logger.error({ err: error }, 'NATS setup failed');
    });
  }

  /** Stops connecting, ensuring and waiting at once, whatever state NATS setup is in; close() finishes. */
  abort(): void {
    this.stop.abort();
  }

  async close(): Promise<void> {
    this.abort();
    await this.following;
    await this.channel?.close();
    await this.parts.core.kv.close();
    await this.eventReader?.close();
    await this.nc?.close();
  }

  private get closed(): boolean {
    return this.stop.signal.aborted;
  }

  private async connectAndFollow(): Promise<void> {
    const { config, core, readiness, logger } = this.parts;
    const { flags } = config;
    const connection = await connectNatsWithRetry(config.nats, { logger, signal: this.stop.signal });
    if (connection === undefined) return;
    this.nc = connection;
    if (this.closed) return;
    logger.info({ servers: config.nats.servers }, 'connected to NATS');
    const ensure = (): Promise<void> => ensureStreamLogged(connection, flags.stream, logger);
    if (flags.ensureStream) await ensureStreamWithRetry(ensure, logger, flags.stream, this.stop.signal);
    if (this.closed) return;
    core.kv.follow(connection, logger);
    const reader = startReader(connection, {
      pool: flags.pool,
      sink: roomOnEvents(core.kv.readerSink(core.fleet), () => core.control.flow.onRoom('sample')),
      stream: flags.stream,
      logger,
      // A stream deleted while running is created again, as at start, when this EPP may create it.
      onStreamMissing: flags.ensureStream ? ensure : undefined,
    });
    this.eventReader = reader;
    await Promise.race([reader.caughtUp, this.stopped]);
    if (this.closed) return;
    logger.info({ pods: core.fleet.pool(flags.pool)?.readyCount ?? 0, events: core.fleet.counters }, 'replay caught up');
    readiness.replayCaughtUp(reader.status);
    const counters = this.parts.sharedCounters;
    if (core.outbox === undefined || counters === undefined) return;
    // After the replay: peers' entries name endpoints, which the view must know. Ready after the warm start.
    this.channel = startChannel({
      nc: connection,
      self: { pool: flags.pool, zone: flags.zone, epp: this.parts.eppId },
      shared: core.scheduler.shared,
      outbox: core.outbox,
      config: config.sharedState,
      counters,
      logger,
      // A peer's releases (and the end of its penalties) may show room for held requests.
      onApplied: () => core.control.flow.onRoom('peer'),
    });
    await Promise.race([this.channel.warm, this.stopped]);
    if (!this.closed) readiness.warmStartOver(reader.status);
  }
}

/** The view's sink, telling flow control after each metrics or readiness event (a sample may show room). */
function roomOnEvents(sink: ReaderSink, onRoom: () => void): ReaderSink {
  return {
    apply(event, receivedAt) {
      const outcome = sink.apply(event, receivedAt);
      if (event.kind === 'metrics' || event.kind === 'readiness') onRoom();
      return outcome;
    },
    recordRejected: () => sink.recordRejected(),
  };
}

async function ensureStreamLogged(nc: NatsConnection, stream: string, logger: Logger): Promise<void> {
  const jsm = await jetstreamManager(nc);
  const result = await ensureStream(jsm, { name: stream });
  if (result.created) logger.info({ stream }, 'created stream');
  for (const difference of describeDifferences(result))
    logger.warn({ stream, difference }, 'existing stream differs from the defaults; left unchanged');
}

async function ensureStreamWithRetry(ensure: () => Promise<void>, logger: Logger, stream: string, signal: AbortSignal): Promise<void> {
  const aborted = new Promise<void>((resolve) => signal.addEventListener('abort', () => resolve(), { once: true }));
  for (let attempt = 0; !signal.aborted; attempt++) {
    try {
      await Promise.race([ensure(), aborted]);
      return;
    } catch (error) {
      if (signal.aborted) return;
      logger.warn({ err: error, stream, attempt }, 'cannot ensure the stream yet; retrying');
      await Promise.race([new Promise((r) => setTimeout(r, Math.min(5000, 250 * 2 ** Math.min(attempt, 5)))), aborted]);
    }
  }
}
