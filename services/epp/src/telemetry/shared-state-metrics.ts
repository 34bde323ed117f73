import { Counter, Gauge, type Registry } from 'prom-client';
import { mirrorCounter } from './counter-mirror.js';
import type { SharedStateCounters } from '../shared-state/counters.js';

/** What the metrics read when scraped: the channel's counters, and the scheduler's and outbox's figures. */
export interface SharedStateSources {
  readonly counters: SharedStateCounters;
  /** Entries the outbox dropped because it was full. */
  outboxDropped(): number;
  peerCount(): number;
  ownInFlight(): number;
  remoteInFlight(): number;
}

/**
 * The shared-state channel's Prometheus metrics (docs/metrics.md). Each reads its source when
 * scraped: a counter advances by what its source grew since the last scrape.
 */
export function registerSharedStateMetrics(registry: Registry, sources: SharedStateSources): void {
  const counters = sources.counters;
  const registers = [registry];
  const mirror = mirrorCounter;

  new Gauge({
    name: 'spillway_shared_state_peers',
    help: 'Other EPPs of the pool this EPP hears from (batches or heartbeats within the peer timeout).',
    registers,
    collect() {
      this.set(sources.peerCount());
    },
  });
  new Gauge({
    name: 'spillway_shared_state_in_flight',
    help: "Requests in flight this EPP accounts for, by origin: its own (own) and its peers' (remote).",
    labelNames: ['origin'] as const,
    registers,
    collect() {
      this.set({ origin: 'own' }, sources.ownInFlight());
      this.set({ origin: 'remote' }, sources.remoteInFlight());
    },
  });
  const batches: Counter<'direction'> = new Counter({
    name: 'spillway_shared_state_batches_total',
    help: 'Shared-state batches published (out, heartbeats included) and applied (in).',
    labelNames: ['direction'] as const,
    registers,
    collect: () => collectBatches(),
  });
  const collectBatches = mirror(batches, [
    [{ direction: 'out' }, () => counters.batchesOut],
    [{ direction: 'in' }, () => counters.batchesIn],
  ]);
  const entries: Counter<'direction'> = new Counter({
    name: 'spillway_shared_state_entries_total',
    help: 'Shared-state entries (picks, releases, penalties, placements) published (out) and received in applied batches (in).',
    labelNames: ['direction'] as const,
    registers,
    collect: () => collectEntries(),
  });
  const collectEntries = mirror(entries, [
    [{ direction: 'out' }, () => counters.entriesOut],
    [{ direction: 'in' }, () => counters.entriesIn],
  ]);
  const gaps: Counter = new Counter({
    name: 'spillway_shared_state_gaps_total',
    help: "Peers' batches this EPP missed, counted from their sequence numbers.",
    registers,
    collect: () => collectGaps(),
  });
  const collectGaps = mirror(gaps, [[{}, () => counters.gaps]]);
  const expired: Counter<'reason'> = new Counter({
    name: 'spillway_shared_state_expired_total',
    help: "Peers' in-flight entries forgotten without a release: for age (ttl) or with their silent peer (peer-timeout).",
    labelNames: ['reason'] as const,
    registers,
    collect: () => collectExpired(),
  });
  const collectExpired = mirror(expired, [
    [{ reason: 'ttl' }, () => counters.expiredTtl],
    [{ reason: 'peer-timeout' }, () => counters.expiredPeer],
  ]);
  const forgotten: Counter = new Counter({
    name: 'spillway_shared_state_peers_forgotten_total',
    help: 'Peers forgotten after the peer timeout without a batch.',
    registers,
    collect: () => collectForgotten(),
  });
  const collectForgotten = mirror(forgotten, [[{}, () => counters.peersForgotten]]);
  const evicted: Counter = new Counter({
    name: 'spillway_shared_state_peers_evicted_total',
    help: 'Peers forgotten to make room for a new one: the longest-silent of a zone holding maxPeersPerZone, or of the fullest zone in a table holding maxPeers.',
    registers,
    collect: () => collectEvicted(),
  });
  const collectEvicted = mirror(evicted, [[{}, () => counters.peersEvicted]]);
  const resyncs: Counter = new Counter({
    name: 'spillway_shared_state_resyncs_total',
    help: 'Peers whose sequence numbers were taken up afresh after three consecutive numbers were refused in a row (pushed behind by a forged batch, or a restarted count).',
    registers,
    collect: () => collectResyncs(),
  });
  const collectResyncs = mirror(resyncs, [[{}, () => counters.resyncs]]);
  const dropped: Counter<'reason'> = new Counter({
    name: 'spillway_shared_state_dropped_total',
    help: "This EPP's entries that never left: buffer full, NATS not connected, publish failed, batch too large.",
    labelNames: ['reason'] as const,
    registers,
    collect: () => collectDropped(),
  });
  const collectDropped = mirror(dropped, [
    [{ reason: 'buffer-full' }, () => sources.outboxDropped() + counters.dropped['buffer-full']],
    [{ reason: 'not-connected' }, () => counters.dropped['not-connected']],
    [{ reason: 'publish-failed' }, () => counters.dropped['publish-failed']],
    [{ reason: 'oversized' }, () => counters.dropped.oversized],
  ]);
  const reasons = [
    'oversized',
    'not-msgpack',
    'invalid',
    'too-many-hashes',
    'subject-mismatch',
    'replayed',
    'sequence-jump',
    'too-many-peers',
    'misplaced-snapshot',
    'unvouched-snapshot',
    'wrong-pool',
  ] as const;
  const rejected: Counter<'reason'> = new Counter({
    name: 'spillway_shared_state_rejected_total',
    help: 'Received batches refused whole, by reason: malformed (not-msgpack, invalid), too large (oversized, too-many-hashes), forged origin (subject-mismatch), replayed, a sequence number further ahead than the peer could have counted (sequence-jump), past the peer bound, a snapshot outside warm start or from a peer not heard on its own subject (unvouched-snapshot), another pool.',
    labelNames: ['reason'] as const,
    registers,
    collect: () => collectRejected(),
  });
  const collectRejected = mirror(
    rejected,
    reasons.map((reason) => [{ reason }, () => counters.rejected[reason] ?? 0] as [{ reason: string }, () => number]),
  );
  const ignored: Counter = new Counter({
    name: 'spillway_shared_state_entries_ignored_total',
    help: "Received entries ignored: an endpoint this EPP does not know, a release of a request it does not hold, or past a peer's bound.",
    registers,
    collect: () => collectIgnored(),
  });
  const collectIgnored = mirror(ignored, [[{}, () => counters.entriesIgnored]]);
  const sync: Counter<'result'> = new Counter({
    name: 'spillway_shared_state_sync_requests_total',
    help: "Peers' warm-start requests: answered with a snapshot, or throttled.",
    labelNames: ['result'] as const,
    registers,
    collect: () => collectSync(),
  });
  const collectSync = mirror(sync, [
    [{ result: 'answered' }, () => counters.syncAnswered],
    [{ result: 'throttled' }, () => counters.syncThrottled],
  ]);
  new Gauge({
    name: 'spillway_shared_state_warm_start_entries',
    help: 'Entries taken in from peers at the last warm start (0 for a lone EPP).',
    registers,
    collect() {
      this.set(counters.warmStartEntries);
    },
  });
}
