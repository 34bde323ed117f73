import { randomBytes } from 'node:crypto';
import { errors, type NatsConnection, type Subscription } from '@nats-io/nats-core';
import { requestStateSync } from '@spillway/bus';
import {
  decodeStateBatch,
  parseStateSubject,
  STATE_PICK,
  STATE_RELEASE,
  STATE_STARTED,
  statePoolFilter,
  stateSyncSubjectFor,
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
  /** Of the open requests, those whose response has begun (they stay charged past their streams). */
  readonly started: Set<number>;
  readonly released: Set<number>;
}

/**
 * Requests in flight per endpoint as the pool's EPPs see them together: each EPP's own requests,
 * learnt from their warm-start answers (asked for `in-flight` only) and followed live on the
 * shared-state subjects. A request stays open until its EPP says its charge ended — a completion,
 * a release before it started, or an end by the samples or its bound (a release at time 0) — not
 * when its ext_proc stream did. Pure bookkeeping; `followInFlight` wires it to NATS.
 */
export class PoolInFlight {
  private readonly epps = new Map<string, EppRequests>();
  /** Batches that were not valid shared state (not applied). */
  rejected = 0;

  apply(batch: StateBatch, now: number): void {
    let epp = this.epps.get(batch.epp);
    if (epp === undefined) {
      epp = { zone: batch.zone, lastSeenAt: now, open: new Map(), started: new Set(), released: new Set() };
      this.epps.set(batch.epp, epp);
    }
    epp.lastSeenAt = now;
    for (const entry of batch.entries) {
      if (entry[0] === STATE_PICK) {
        if (batch.snapshot !== undefined && epp.released.has(entry[1])) continue;
        epp.open.set(entry[1], `${entry[2]}/${entry[3]}`);
      } else if (entry[0] === STATE_STARTED) {
        if (epp.open.has(entry[1])) epp.started.add(entry[1]);
      } else if (entry[0] === STATE_RELEASE) {
        epp.open.delete(entry[1]);
        epp.started.delete(entry[1]);
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

  /** Of `total`, the requests whose response has begun: their charges end by a completion, the samples or their bound. */
  get started(): number {
    let n = 0;
    for (const epp of this.epps.values()) n += epp.started.size;
    return n;
  }
}

export interface InFlightFollower {
  readonly view: PoolInFlight;
  /** Resolves once the EPPs' answers are in (or nobody answered, the request was refused, or `waitMs` passed). */
  readonly answered: Promise<void>;
  /**
   * The server refused the request (the NATS user may not publish its subject): the view then holds
   * only requests started since it began following, so the caller must say so.
   */
  readonly refused: string | undefined;
  close(): void;
}

export interface FollowInFlightOptions {
  readonly pool: string;
  /**
   * The zone whose `spillway.state` subjects the NATS user may publish the request on: an EPP user
   * (`epp-<zone>`) may publish only its own zone's; an admin user any (default `ops`).
   */
  readonly zone?: string;
  readonly now: () => number;
  readonly waitMs?: number;
  readonly quietMs?: number;
}

/** The zone an operator's sync request names when none is given (a user allowed every state subject). */
export const OPERATOR_ZONE = 'ops';

/**
 * Follows the pool's shared state: subscribes to every EPP's batches, then asks every EPP (the
 * shared-state sync request of @spillway/bus, on a `.sync` subject of the operator's own, `want:
 * in-flight`) for its open requests. The request is published in `zone`, so the user needs the
 * right to publish that zone's `spillway.state` subjects; a refusal is noticed (`refused`), never silent.
 */
export function followInFlight(nc: NatsConnection, options: FollowInFlightOptions): InFlightFollower {
  const { pool, now, waitMs = 2_000, quietMs = 200 } = options;
  const view = new PoolInFlight();
  const onBatch = (decoded: StateDecodeResult): void => {
    if (decoded.ok && decoded.batch.pool === pool) view.apply(decoded.batch, now());
    else view.rejected++;
  };
  const live: Subscription = nc.subscribe(statePoolFilter(pool), {
    callback: (error, msg) => (error ? undefined : onBatch(decodeStateBatch(msg.data, parseStateSubject(msg.subject)))),
  });
  const self = { pool, zone: options.zone ?? OPERATOR_ZONE, epp: `spillway-fleet-${randomBytes(4).toString('hex')}` };
  const subject = stateSyncSubjectFor(self);
  let refused: string | undefined;
  let onRefused!: () => void;
  const refusal = new Promise<void>((resolve) => (onRefused = resolve));
  // The server reports a publish it refuses asynchronously, as a status of the connection.
  const statuses = nc.status()[Symbol.asyncIterator]();
  void (async () => {
    for (let next = await statuses.next(); next.done !== true; next = await statuses.next()) {
      const status = next.value;
      if (status.type === 'error' && status.error instanceof errors.PermissionViolationError && status.error.subject === subject) {
        refused = `the NATS user may not publish ${subject}`;
        onRefused();
      }
    }
  })();
  const sync = requestStateSync(nc, { self, want: 'in-flight', deadlineMs: waitMs, quietMs, now, onReply: onBatch });
  const answered = Promise.race([sync.then(() => undefined), refusal]);
  void answered.then(() => statuses.return?.());
  return {
    view,
    answered,
    get refused() {
      return refused;
    },
    close: () => {
      void statuses.return?.();
      onRefused();
      if (!nc.isClosed()) live.unsubscribe();
    },
  };
}
