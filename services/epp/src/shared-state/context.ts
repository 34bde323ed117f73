import type { NatsConnection } from '@nats-io/nats-core';
import type { StateSubjectParts } from '@spillway/events';
import type { Logger } from 'pino';
import type { SharedStateCounters } from './counters.js';

/** What every part of one EPP's shared-state channel works with: the connection, who it is, its counters, log and clock. */
export interface ChannelContext {
  readonly nc: NatsConnection;
  /** This EPP: its pool, zone and id, which name its subjects. */
  readonly self: StateSubjectParts;
  readonly counters: SharedStateCounters;
  readonly logger: Logger;
  readonly now: () => number;
}
