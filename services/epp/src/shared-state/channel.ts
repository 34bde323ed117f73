import type { NatsConnection } from '@nats-io/nats-core';
import type { StateSubjectParts } from '@spillway/events';
import type { SharedState, SharedStateConfig } from '@spillway/scheduler';
import type { Logger } from 'pino';
import type { SharedStateCounters } from './counters.js';
import type { StateOutbox } from './outbox.js';
import { StatePublisher } from './publisher.js';
import { StateReceiver, SyncResponder } from './receiver.js';
import { warmStart, type WarmStartResult } from './warm-start.js';

export interface RunningChannel {
  /** Resolves once the warm start is over (peers answered, or the deadline passed, or the EPP is alone). */
  readonly warm: Promise<WarmStartResult>;
  readonly publisher: StatePublisher;
  close(): Promise<void>;
}

export interface ChannelParts {
  readonly nc: NatsConnection;
  /** This EPP: its pool, zone and id. */
  readonly self: StateSubjectParts;
  /** The scheduler's shared state: peers' entries go in, snapshots come out. */
  readonly shared: SharedState;
  /** This EPP's entries waiting to be published. */
  readonly outbox: StateOutbox;
  readonly config: SharedStateConfig;
  readonly counters: SharedStateCounters;
  readonly logger: Logger;
  readonly now?: () => number;
  /** A peer's batch was applied (its releases may have freed room). */
  readonly onApplied?: () => void;
}

/**
 * The shared-state channel of one EPP, on an open NATS connection, once its view has caught up
 * (peers' entries name endpoints, so the view must know them): it starts taking in peers' batches,
 * asks them for their state (warm start), starts publishing its own entries, answers other EPPs'
 * warm-start requests once its own is over, and every so often forgets expired entries and silent
 * peers. Everything it does is counted in `counters`.
 */
export function startChannel(parts: ChannelParts): RunningChannel {
  const { nc, self, shared, outbox, config, counters, logger } = parts;
  const now = parts.now ?? Date.now;
  const context = { nc, self, counters, logger, now };
  const receiver = new StateReceiver(context, shared);
  receiver.onApplied = parts.onApplied;
  receiver.start();
  const publisher = new StatePublisher(context, outbox, config.heartbeatMs);
  publisher.start();
  const responder = new SyncResponder(context, shared, () => publisher.seq, {
    maxBytes: config.maxSnapshotBytes,
    maxPerS: config.maxSyncPerS,
  });
  let closed = false;
  const warm = warmStart({
    nc,
    self,
    receiver,
    limits: { deadlineMs: config.warmStartMs, quietMs: config.warmStartQuietMs, maxBytesPerPeer: config.maxSnapshotBytes },
    now,
  }).then((result) => {
    counters.warmStartPeers = result.peers;
    counters.warmStartEntries = result.entries;
    logger.info({ epp: self.epp, ...result }, result.outcome === 'lone' ? 'warm start: no peers, starting empty' : 'warm start over');
    // Answering before its own warm start is over would hand a half-built state to the next EPP.
    if (!closed) responder.start();
    return result;
  });
  const housekeeping = setInterval(
    () => {
      const expiry = shared.expire(now());
      counters.expiredTtl += expiry.expired;
      counters.expiredPeer += expiry.peerEntriesForgotten;
      counters.peersForgotten += expiry.peersForgotten;
      if (expiry.peersForgotten > 0)
        logger.info({ peersForgotten: expiry.peersForgotten, entries: expiry.peerEntriesForgotten }, 'forgot silent peers');
    },
    Math.max(50, Math.min(config.peerTimeoutMs, config.remoteEntryTtlMs) / 5),
  );
  housekeeping.unref();
  logger.info({ epp: self.epp, batchMs: config.batchMs, batchEntries: config.batchEntries }, 'sharing state with the pool');
  return {
    warm,
    publisher,
    close: async () => {
      closed = true;
      clearInterval(housekeeping);
      publisher.close();
      await Promise.all([receiver.close(), responder.close()]);
    },
  };
}
