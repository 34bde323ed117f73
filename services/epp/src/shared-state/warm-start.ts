import type { NatsConnection } from '@nats-io/nats-core';
import { requestStateSync } from '@spillway/bus';
import { stateSyncSubjectFor, type StateSubjectParts } from '@spillway/events';
import type { StateReceiver } from './receiver.js';

export interface WarmStartLimits {
  /** Give up waiting for replies after this long (the EPP reports ready then, whatever it has). */
  deadlineMs: number;
  /** Stop once no reply came for this long (each peer sends its parts back to back). */
  quietMs: number;
  /** Bytes taken in per peer at most; parts beyond are dropped. */
  maxBytesPerPeer: number;
}

export interface WarmStartResult {
  /**
   * `lone`: nobody answers warm-start requests in this pool (the server said so at once);
   * `complete`: every peer that answered sent its last part; `partial`: replies stopped before some
   * peer's last part; `deadline`: none came in time, or they were still coming at the deadline;
   * `failed`: the request could not be sent.
   */
  outcome: 'lone' | 'complete' | 'partial' | 'deadline' | 'failed';
  peers: number;
  entries: number;
  ms: number;
}

/**
 * A starting EPP asks its peers for their state before it reports ready (the shared-state sync
 * request of @spillway/bus): every peer answers with its snapshot in parts, and each part is
 * checked and applied as it arrives, at most `maxBytesPerPeer` from each. A lone EPP learns at once
 * that no one listens (NATS's no-responders status) and starts empty.
 */
export async function warmStart(
  nc: NatsConnection,
  self: StateSubjectParts,
  receiver: StateReceiver,
  limits: WarmStartLimits,
  now: () => number = Date.now,
): Promise<WarmStartResult> {
  // Replies come on an inbox; rejects and applied parts are logged under the request's subject.
  const subject = stateSyncSubjectFor(self);
  const open = new Set<string>();
  const bytes = new Map<string, number>();
  let entries = 0;
  const sync = await requestStateSync(nc, {
    self,
    deadlineMs: limits.deadlineMs,
    quietMs: limits.quietMs,
    now,
    onReply: (decoded, size) => {
      if (!decoded.ok) return receiver.reject(subject, decoded.reason, decoded.detail);
      const batch = decoded.batch;
      if (batch.snapshot === undefined) return receiver.reject(subject, 'invalid', 'a warm-start reply that is not a snapshot');
      if (batch.pool !== self.pool) return receiver.reject(subject, 'wrong-pool', `a snapshot of pool ${batch.pool}`);
      const taken = (bytes.get(batch.epp) ?? 0) + size;
      bytes.set(batch.epp, taken);
      if (taken <= limits.maxBytesPerPeer) {
        receiver.apply(batch, subject);
        entries += batch.entries.length;
      }
      if (batch.snapshot.last) open.delete(batch.epp);
      else open.add(batch.epp);
    },
  });
  const outcomes = {
    'no-responders': bytes.size === 0 ? 'lone' : 'complete',
    quiet: open.size === 0 ? 'complete' : 'partial',
    deadline: 'deadline',
    failed: 'failed',
  } as const;
  return { outcome: outcomes[sync.end], peers: bytes.size, entries, ms: sync.ms };
}
