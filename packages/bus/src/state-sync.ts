import { NoRespondersError, type NatsConnection } from '@nats-io/nats-core';
import { decodeStateBatch, encodeStateBatch, stateSyncSubjectFor, type StateDecodeResult, type StateSubjectParts } from '@spillway/events';

export interface StateSyncRequest {
  /** The requester: its pool, zone and id name the `.sync` subject the request goes out on. */
  readonly self: StateSubjectParts;
  /** `in-flight`: requests in flight and penalties only (the operator's view); the whole state otherwise. */
  readonly want?: 'in-flight';
  /** Replies are taken for this long at most (ms). */
  readonly deadlineMs: number;
  /** Once replies come, the request ends when none came for this long (ms): every EPP sends its parts back to back. */
  readonly quietMs: number;
  /**
   * Each reply as it arrives: decoded and validated as a batch (never throws), not yet checked
   * against the requester's pool; `bytes` is its size on the wire.
   */
  onReply(reply: StateDecodeResult, bytes: number): void;
  /** The clock the request is dated with and the deadline is measured on (ms). */
  readonly now?: () => number;
}

/**
 * How a state sync ended: `no-responders` (the server said at once that no EPP of the pool listens),
 * `quiet` (replies came, then none for `quietMs`), `deadline` (none came in time, or they were still
 * coming at the deadline), or `failed` (the request could not be sent or the connection failed).
 */
export type StateSyncEnd = 'no-responders' | 'quiet' | 'deadline' | 'failed';

export interface StateSyncResult {
  readonly end: StateSyncEnd;
  readonly replies: number;
  /** How long it took (ms, on the request's clock). */
  readonly ms: number;
  /** Why it failed, with `end: 'failed'`. */
  readonly error?: unknown;
}

/**
 * The shared-state warm-start request/reply (docs/sharing.md): one request on the requester's own
 * `spillway.state.<pool>.<zone>.<epp>.sync` subject, and every EPP of the pool answers with its
 * snapshot in parts on the reply subject. Built on nats.js's `requestMany` with its `stall`
 * strategy: it waits up to the deadline for a first reply, then until replies pause for `quietMs`.
 * A starting EPP warm-starts with it; `spillway-fleet` asks it for the requests in flight.
 * Resolves once the replies are over; never rejects.
 */
export async function requestStateSync(nc: NatsConnection, request: StateSyncRequest): Promise<StateSyncResult> {
  const now = request.now ?? Date.now;
  const started = now();
  const payload = encodeStateBatch({
    v: 1,
    ...request.self,
    seq: 0,
    sentAt: started,
    entries: [],
    ...(request.want !== undefined && { want: request.want }),
  });
  let replies = 0;
  const result = (end: StateSyncEnd, error?: unknown): StateSyncResult => ({
    end,
    replies,
    ms: now() - started,
    ...(error !== undefined && { error }),
  });
  try {
    const answers = await nc.requestMany(stateSyncSubjectFor(request.self), payload, {
      strategy: 'stall',
      stall: request.quietMs,
      maxWait: request.deadlineMs,
    });
    for await (const msg of answers) {
      replies++;
      request.onReply(decodeStateBatch(msg.data), msg.data.byteLength);
      // The stall strategy ends only when replies pause: a stream of them is cut at the deadline here.
      if (now() - started >= request.deadlineMs) return result('deadline');
    }
    return result(replies === 0 ? 'deadline' : 'quiet');
  } catch (error) {
    if (error instanceof NoRespondersError) return result('no-responders');
    return result('failed', error);
  }
}
