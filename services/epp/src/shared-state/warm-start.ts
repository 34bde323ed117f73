import type { NatsConnection } from '@nats-io/nats-core';
import { requestStateSync } from '@spillway/bus';
import { stateSyncSubjectFor, type StateBatch, type StateSubjectParts } from '@spillway/events';
import type { StateReceiver } from './receiver.js';

export interface WarmStartLimits {
  /** Give up waiting for replies after this long (the EPP reports ready then, whatever it has). */
  deadlineMs: number;
  /** Stop once no reply came for this long (each peer sends its parts back to back). */
  quietMs: number;
  /**
   * Bytes taken in per peer at most; parts beyond are dropped. Also the most held, over all
   * claimed peers, while they wait to be vouched for (below).
   */
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
  /** Peers whose snapshot was taken in. */
  peers: number;
  entries: number;
  /** Peers that answered but were never heard on their own subject: their parts were dropped. */
  unvouched: number;
  ms: number;
}

export interface WarmStartParts {
  readonly nc: NatsConnection;
  /** This EPP: its pool, zone and id. */
  readonly self: StateSubjectParts;
  /** Applies the parts, and says which peers were heard on their own subjects. */
  readonly receiver: StateReceiver;
  readonly limits: WarmStartLimits;
  readonly now?: () => number;
}

/** A claimed peer's parts waiting for the peer to be heard on its own subject. */
interface Held {
  readonly zone: string;
  readonly epp: string;
  readonly batches: StateBatch[];
  bytes: number;
}

/**
 * A starting EPP asks its peers for their state before it reports ready (the shared-state sync
 * request of @spillway/bus): every peer answers with its snapshot in parts, and each part is
 * checked and applied, at most `maxBytesPerPeer` from each. A lone EPP learns at once that no one
 * listens (NATS's no-responders status) and starts empty.
 *
 * Replies come on an inbox, where no subject vouches for who sent them: a part is applied only for
 * a peer already heard on its own `spillway.state.<pool>.<zone>.<epp>` subject, which only that
 * zone's EPPs may publish. A part from a peer not heard yet (it answers within milliseconds, its
 * next batch or heartbeat comes within `heartbeatMs`) is held until the peer is heard, and dropped
 * (counted as `unvouched-snapshot`) if it is not heard by the deadline.
 */
export async function warmStart(parts: WarmStartParts): Promise<WarmStartResult> {
  const { nc, self, receiver, limits } = parts;
  const now = parts.now ?? Date.now;
  const started = now();
  // Replies come on an inbox; rejects and applied parts are logged under the request's subject.
  const subject = stateSyncSubjectFor(self);
  const open = new Set<string>();
  const bytes = new Map<string, number>();
  const taken = new Set<string>();
  const held = new Map<string, Held>();
  let heldBytes = 0;
  let entries = 0;
  let settled: (() => void) | undefined;

  const take = (batch: StateBatch): void => {
    receiver.apply(batch, subject);
    entries += batch.entries.length;
    taken.add(peerKey(batch.zone, batch.epp));
  };
  receiver.onPeerHeard = (zone, epp) => {
    const waiting = held.get(peerKey(zone, epp));
    if (waiting === undefined) return;
    held.delete(peerKey(zone, epp));
    heldBytes -= waiting.bytes;
    for (const batch of waiting.batches) take(batch);
    if (held.size === 0) settled?.();
  };
  try {
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
        const key = peerKey(batch.zone, batch.epp);
        const total = (bytes.get(key) ?? 0) + size;
        bytes.set(key, total);
        if (batch.snapshot.last) open.delete(key);
        else open.add(key);
        if (total > limits.maxBytesPerPeer) return;
        if (receiver.knowsPeer(batch.zone, batch.epp)) return take(batch);
        // Not heard on its own subject yet: held, within one peer's worth of bytes over all claimants.
        if (heldBytes + size > limits.maxBytesPerPeer)
          return receiver.reject(subject, 'unvouched-snapshot', `a snapshot part of ${batch.zone}/${batch.epp}: too many held already`);
        let waiting = held.get(key);
        if (waiting === undefined) {
          waiting = { zone: batch.zone, epp: batch.epp, batches: [], bytes: 0 };
          held.set(key, waiting);
        }
        waiting.batches.push(batch);
        waiting.bytes += size;
        heldBytes += size;
      },
    });
    // Held parts wait for their peers' next batch or heartbeat, up to the deadline.
    const left = limits.deadlineMs - (now() - started);
    if (held.size > 0 && left > 0 && sync.end !== 'failed') {
      await new Promise<void>((resolve) => {
        settled = resolve;
        setTimeout(resolve, left).unref();
      });
    }
    for (const waiting of held.values()) {
      receiver.reject(
        subject,
        'unvouched-snapshot',
        `${waiting.batches.length} snapshot parts of ${waiting.zone}/${waiting.epp}, never heard on its own subject`,
      );
    }
    const outcomes = {
      'no-responders': bytes.size === 0 ? 'lone' : 'complete',
      quiet: open.size === 0 ? 'complete' : 'partial',
      deadline: 'deadline',
      failed: 'failed',
    } as const;
    return { outcome: outcomes[sync.end], peers: taken.size, entries, unvouched: held.size, ms: now() - started };
  } finally {
    receiver.onPeerHeard = undefined;
  }
}

/** A peer's zone and id as one key (the zone's length first, so no two pairs make the same key). */
function peerKey(zone: string, epp: string): string {
  return `${zone.length}:${zone}/${epp}`;
}
