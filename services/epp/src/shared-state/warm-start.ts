import { createInbox, type Msg, type NatsConnection } from '@nats-io/nats-core';
import { decodeStateBatch, encodeStateBatch, stateSyncSubjectFor, type StateSubjectParts } from '@spillway/events';
import type { StateReceiver } from './receiver.js';

export interface WarmStartLimits {
  /** Give up waiting for replies after this long (the EPP reports ready then, whatever it has). */
  deadlineMs: number;
  /** Stop once no reply came for this long and every peer that answered sent its last part. */
  quietMs: number;
  /** Bytes taken in per peer at most; parts beyond are dropped. */
  maxBytesPerPeer: number;
}

export interface WarmStartResult {
  /** `lone`: nobody answers warm-start requests in this pool (the server said so at once). */
  outcome: 'lone' | 'complete' | 'deadline' | 'failed';
  peers: number;
  entries: number;
  ms: number;
}

/**
 * A starting EPP asks its peers for their state (request/reply on core NATS) before it reports
 * ready: one request on its own `.sync` subject, with many replies on an inbox — every peer answers
 * with its snapshot in parts. Each part is applied as it arrives. Ends when every peer that answered
 * has sent its last part and nothing came for `quietMs`, or at the deadline. A lone EPP learns at
 * once that no one listens (NATS's no-responders status) and starts empty.
 */
export function warmStart(
  nc: NatsConnection,
  self: StateSubjectParts,
  receiver: StateReceiver,
  limits: WarmStartLimits,
  now: () => number = Date.now,
): Promise<WarmStartResult> {
  const started = now();
  const inbox = createInbox();
  const open = new Set<string>();
  const bytes = new Map<string, number>();
  let entries = 0;
  return new Promise<WarmStartResult>((resolve) => {
    let quiet: NodeJS.Timeout | undefined;
    let settled = false;
    const finish = (outcome: WarmStartResult['outcome']): void => {
      if (settled) return;
      settled = true;
      clearTimeout(deadline);
      if (quiet !== undefined) clearTimeout(quiet);
      if (!nc.isClosed()) subscription.unsubscribe();
      resolve({ outcome, peers: bytes.size, entries, ms: now() - started });
    };
    const deadline = setTimeout(() => finish('deadline'), limits.deadlineMs);
    const onReply = (msg: Msg): void => {
      if (msg.data.length === 0 && (msg.headers?.code === 503 || msg.headers?.status === '503'))
        return finish(bytes.size === 0 ? 'lone' : 'complete');
      const decoded = decodeStateBatch(msg.data);
      if (!decoded.ok) receiver.reject(inbox, decoded.reason, decoded.detail);
      else if (decoded.batch.snapshot === undefined) receiver.reject(inbox, 'invalid', 'a warm-start reply that is not a snapshot');
      else if (decoded.batch.pool !== self.pool) receiver.reject(inbox, 'wrong-pool', `a snapshot of pool ${decoded.batch.pool}`);
      else {
        const batch = decoded.batch;
        const taken = (bytes.get(batch.epp) ?? 0) + msg.data.byteLength;
        bytes.set(batch.epp, taken);
        if (taken <= limits.maxBytesPerPeer) {
          receiver.apply(batch, inbox);
          entries += batch.entries.length;
        }
        if (batch.snapshot?.last === true) open.delete(batch.epp);
        else open.add(batch.epp);
      }
      if (quiet !== undefined) clearTimeout(quiet);
      quiet = setTimeout(() => {
        if (open.size === 0) finish('complete');
      }, limits.quietMs);
    };
    const subscription = nc.subscribe(inbox, { callback: (error, msg) => (error ? finish('failed') : onReply(msg)) });
    const request = encodeStateBatch({ v: 1, pool: self.pool, zone: self.zone, epp: self.epp, seq: 0, sentAt: started, entries: [] });
    try {
      nc.publish(stateSyncSubjectFor(self), request, { reply: inbox });
    } catch {
      finish('failed');
    }
  });
}
