import type { StateDecodeReason } from '@spillway/events';

/** Why a received batch was refused whole. */
export type StateRejectReason =
  StateDecodeReason | 'replayed' | 'sequence-jump' | 'too-many-peers' | 'misplaced-snapshot' | 'unvouched-snapshot' | 'wrong-pool';
/** Why entries of this EPP never left. */
export type StateDropReason = 'buffer-full' | 'not-connected' | 'publish-failed' | 'oversized';

/**
 * The channel's figures as plain numbers, bumped where things happen; Prometheus reads them when it
 * scrapes (telemetry/shared-state-metrics.ts), so nothing on the request path touches prom-client.
 */
export class SharedStateCounters {
  batchesOut = 0;
  entriesOut = 0;
  bytesOut = 0;
  batchesIn = 0;
  entriesIn = 0;
  /** Batches of peers missed, by their sequence numbers. */
  gaps = 0;
  /** Received entries that named an unknown endpoint or request, or went past a peer's bound. */
  entriesIgnored = 0;
  /** Remote in-flight entries forgotten for age, and with their silent peer. */
  expiredTtl = 0;
  expiredPeer = 0;
  peersForgotten = 0;
  /** Peers whose sequence was taken up afresh after consecutive refusals (a real count pushed behind by a forged batch, or a restarted count). */
  resyncs = 0;
  /** Peers forgotten to make room for a new one (a full zone, or a full table). */
  peersEvicted = 0;
  readonly dropped: Record<StateDropReason, number> = { 'buffer-full': 0, 'not-connected': 0, 'publish-failed': 0, oversized: 0 };
  readonly rejected: Partial<Record<StateRejectReason, number>> = {};
  syncAnswered = 0;
  syncThrottled = 0;
  /** The last warm start: peers that answered and entries taken in. */
  warmStartPeers = 0;
  warmStartEntries = 0;

  reject(reason: StateRejectReason): void {
    this.rejected[reason] = (this.rejected[reason] ?? 0) + 1;
  }
}
