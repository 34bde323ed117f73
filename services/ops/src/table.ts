import type { Fleet, FleetCounters } from '@spillway/fleet';
import type { ReaderStatus } from '@spillway/bus';

/** One pod as the operator table shows it. Plain data, so rendering is a pure function. */
export interface FleetRow {
  zone: string;
  pod: string;
  address: string;
  ready: 'ready' | 'not ready' | 'deleted' | 'unknown';
  waiting: number | undefined;
  running: number | undefined;
  kvCacheUsage: number | undefined;
  /** Requests in flight on the pod over every EPP of the pool (their shared state); undefined when not followed. */
  inFlight: number | undefined;
  /** Since this reader received the pod's latest sample (ms); undefined without metrics. */
  metricsAgeMs: number | undefined;
  /** Metrics missing or older than the fleet's staleness limit. */
  stale: boolean;
}

/**
 * The pool's pods at `now`, sorted by zone then pod. Reads the fleet, changes nothing. `inFlight`
 * holds requests in flight by `zone/pod`, when the pool's shared state is followed.
 */
export function fleetRows(fleet: Fleet, pool: string, now: number, inFlight?: ReadonlyMap<string, number>): FleetRow[] {
  const view = fleet.pool(pool);
  if (!view) return [];
  const rows: FleetRow[] = [];
  for (const ep of view.endpoints()) {
    const m = ep.metrics;
    rows.push({
      zone: ep.zone,
      pod: ep.pod,
      address: ep.address ?? '-',
      // No address yet: only metrics have been seen, no readiness.
      ready: ep.deleted ? 'deleted' : ep.address === undefined ? 'unknown' : ep.ready ? 'ready' : 'not ready',
      waiting: m?.waitingRequests,
      running: m?.runningRequests,
      kvCacheUsage: m?.kvCacheUsage,
      inFlight: inFlight === undefined ? undefined : (inFlight.get(`${ep.zone}/${ep.pod}`) ?? 0),
      metricsAgeMs: fleet.metricsAge(ep, now),
      stale: !fleet.isFresh(ep, now),
    });
  }
  return rows.sort((a, b) => (a.zone !== b.zone ? (a.zone < b.zone ? -1 : 1) : a.pod < b.pod ? -1 : a.pod > b.pod ? 1 : 0));
}

const HEADER = ['ZONE', 'POD', 'ADDRESS', 'READY', 'WAITING', 'RUNNING', 'KV USE', 'IN FLIGHT', 'METRICS AGE', 'STALE'] as const;
/** Numeric columns are right-aligned. */
const RIGHT = new Set([4, 5, 6, 7, 8]);

export function formatAge(ms: number | undefined): string {
  if (ms === undefined) return '-';
  if (ms < 0) return '0ms';
  if (ms < 1_000) return `${Math.round(ms)}ms`;
  if (ms < 60_000) return `${(ms / 1_000).toFixed(1)}s`;
  if (ms < 3_600_000) return `${Math.floor(ms / 60_000)}m${Math.floor((ms % 60_000) / 1_000)}s`;
  return `${(ms / 3_600_000).toFixed(1)}h`;
}

function cells(row: FleetRow): string[] {
  return [
    row.zone,
    row.pod,
    row.address,
    row.ready,
    row.waiting === undefined ? '-' : String(row.waiting),
    row.running === undefined ? '-' : String(row.running),
    row.kvCacheUsage === undefined ? '-' : `${(row.kvCacheUsage * 100).toFixed(1)}%`,
    row.inFlight === undefined ? '-' : String(row.inFlight),
    formatAge(row.metricsAgeMs),
    row.stale ? 'STALE' : '',
  ];
}

/** A fixed-width text table, one line per pod; `(no pods)` when empty. */
export function renderFleetTable(rows: readonly FleetRow[]): string {
  const table = [[...HEADER], ...rows.map(cells)];
  const widths = HEADER.map((_, i) => Math.max(...table.map((r) => (r[i] ?? '').length)));
  const lines = table.map((r) =>
    r
      .map((cell, i) => (RIGHT.has(i) ? cell.padStart(widths[i] ?? 0) : cell.padEnd(widths[i] ?? 0)))
      .join('  ')
      .trimEnd(),
  );
  if (rows.length === 0) lines.push('(no pods)');
  return lines.join('\n');
}

/** What the summary lines above the table show. */
export interface FleetStatusView {
  readonly header: { pool: string; stream: string; server: string };
  readonly status: ReaderStatus;
  readonly counters: FleetCounters;
  readonly rows: readonly FleetRow[];
  readonly now: number;
  /**
   * The pool's requests in flight as its EPPs share them; undefined when not followed. `refused`:
   * why the EPPs could not be asked for what they held before (then only later requests show).
   */
  readonly shared?: { epps: number; inFlight: number; started?: number | undefined; refused?: string | undefined } | undefined;
}

/** The summary lines above the table: connection, replay, counters. */
export function renderFleetStatus(view: FleetStatusView): string {
  const { header, status, counters, rows, now, shared } = view;
  const ready = rows.filter((r) => r.ready === 'ready').length;
  const stale = rows.filter((r) => r.stale).length;
  const staleness = status.staleSince === undefined ? '' : `  STALE for ${formatAge(now - status.staleSince)}`;
  const rejected = Object.entries(status.rejectedByReason)
    .map(([reason, n]) => `${reason}=${n}`)
    .join(' ');
  return [
    `pool ${header.pool}  stream ${header.stream}  nats ${header.server}`,
    `connection ${status.connection}  reconnects ${status.reconnects}  ${status.caughtUp ? 'caught up' : 'replaying'}  seq ${status.lastSequence}${staleness}`,
    `pods ${rows.length}  ready ${ready}  stale metrics ${stale}`,
    `events applied ${counters.applied}  ignored ${counters.ignored}  rejected ${counters.rejected}${rejected ? ` (${rejected})` : ''}  future ${counters.future}  over capacity ${counters.overCapacity}  too many zones ${counters.tooManyZones}  address conflicts ${counters.addressConflict}`,
    ...(shared === undefined
      ? []
      : [
          shared.epps === 0
            ? 'in flight: no EPP shares its state'
            : `in flight ${shared.inFlight}${shared.started === undefined ? '' : ` (${shared.started} started)`} over ${shared.epps} EPP${shared.epps === 1 ? '' : 's'} (their shared state)`,
          ...(shared.refused === undefined
            ? []
            : [
                `in flight: INCOMPLETE, only requests started since spillway-fleet did: ${shared.refused} (an EPP user may publish only its own zone's: give --zone <its zone>)`,
              ]),
        ]),
  ].join('\n');
}
