import { randomBytes } from 'node:crypto';
import type { NatsConnection, Subscription } from '@nats-io/nats-core';
import { requestStateSync } from '@spillway/bus';
import {
  decodeStateBatch,
  parseStateSubject,
  STATE_PICK,
  STATE_RELEASE,
  statePoolFilter,
  type StateBatch,
  type StateDecodeResult,
} from '@spillway/events';

/** An EPP not heard from for this long (they send heartbeats every second) has left the view. */
const SILENT_MS = 5_000;
/** Released request ids remembered per EPP, so a snapshot taken before a release cannot revive it. */
const REMEMBERED_RELEASES = 4096;

interface EppRequests {
  zone: string;
  lastSeenAt: number;
  /** Request id -> `zone/pod` of the endpoint that carries it. */
  readonly open: Map<number, string>;
  readonly released: Set<number>;
}

/**
 * Requests in flight per endpoint as the pool's EPPs see them together: each EPP's own requests,
 * learnt from their warm-start answers (asked for `in-flight` only) and followed live on the
 * shared-state subjects. Pure bookkeeping; `followInFlight` wires it to NATS.
 */
export class PoolInFlight {
  private readonly epps = new Map<string, EppRequests>();
  /** Batches that were not valid shared state (not applied). */
  rejected = 0;

  apply(batch: StateBatch, now: number): void {
    let epp = this.epps.get(batch.epp);
    if (epp === undefined) {
      epp = { zone: batch.zone, lastSeenAt: now, open: new Map(), released: new Set() };
      this.epps.set(batch.epp, epp);
    }
    epp.lastSeenAt = now;
    for (const entry of batch.entries) {
      if (entry[0] === STATE_PICK) {
        if (batch.snapshot !== undefined && epp.released.has(entry[1])) continue;
        epp.open.set(entry[1], `${entry[2]}/${entry[3]}`);
      } else if (entry[0] === STATE_RELEASE) {
        epp.open.delete(entry[1]);
        epp.released.add(entry[1]);
        if (epp.released.size > REMEMBERED_RELEASES) epp.released.delete(epp.released.values().next().value as number);
      }
    }
  }

  /** Forgets EPPs silent for a while (they died, or stopped sharing). */
  prune(now: number): void {
    for (const [id, epp] of this.epps) if (now - epp.lastSeenAt > SILENT_MS) this.epps.delete(id);
  }

  /** Requests in flight on each endpoint (`zone/pod`), over every EPP. */
  byEndpoint(): Map<string, number> {
    const counts = new Map<string, number>();
    for (const epp of this.epps.values()) for (const key of epp.open.values()) counts.set(key, (counts.get(key) ?? 0) + 1);
    return counts;
  }

  get eppCount(): number {
    return this.epps.size;
  }

  get total(): number {
    let n = 0;
    for (const epp of this.epps.values()) n += epp.open.size;
    return n;
  }
}

export interface InFlightFollower {
  readonly view: PoolInFlight;
  /** Resolves once the EPPs' answers are in (or nobody answered, or `waitMs` passed). */
  readonly answered: Promise<void>;
  close(): void;
}

/**
 * Follows the pool's shared state: subscribes to every EPP's batches, then asks every EPP (the
 * shared-state sync request of @spillway/bus, on a `.sync` subject of the operator's own, `want:
 * in-flight`) for its open requests. Needs a NATS user that may publish a `spillway.state` subject
 * (an admin user in the zone topology).
 */
export function followInFlight(nc: NatsConnection, pool: string, now: () => number, waitMs = 2_000, quietMs = 200): InFlightFollower {
  const view = new PoolInFlight();
  const onBatch = (decoded: StateDecodeResult): void => {
    if (decoded.ok && decoded.batch.pool === pool) view.apply(decoded.batch, now());
    else view.rejected++;
  };
  const live: Subscription = nc.subscribe(statePoolFilter(pool), {
    callback: (error, msg) => (error ? undefined : onBatch(decodeStateBatch(msg.data, parseStateSubject(msg.subject)))),
  });
  const self = { pool, zone: 'ops', epp: `spillway-fleet-${randomBytes(4).toString('hex')}` };
  const answered = requestStateSync(nc, { self, want: 'in-flight', deadlineMs: waitMs, quietMs, now, onReply: onBatch }).then(
    () => undefined,
  );
  return {
    view,
    answered,
    close: () => {
      if (!nc.isClosed()) live.unsubscribe();
    },
  };
}
