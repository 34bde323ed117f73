import type { KvBatch, KvSnapshotEvent, MetricsEvent, ReadinessEvent, StateBatch } from '@spillway/events';
import type { ResolvedFault } from './resolve.js';
import type { ScrapeSample } from './routers.js';
import type { Tally } from './tally.js';
import type { Trip } from './trip.js';

/**
 * Every kind of event the simulation schedules, with what it carries. One handler per kind
 * (`Handlers`); `dispatch` hands an event to its handler with its type intact, so no handler
 * recovers its payload by a cast.
 */
export interface EventMap {
  /** The next request at a zone's gateway. */
  arrival: { readonly gateway: number };
  /** A request reaches the next EPP of its trip. */
  decide: { readonly trip: Trip };
  /** A request reaches a replica. */
  dispatch: { readonly trip: Trip; readonly replica: number };
  /** A picker's scrape reaches a pod, which renders its metrics (or refuses: dead). */
  'scrape-read': { readonly epp: number; readonly replica: number; readonly startedAt: number };
  /** A scrape's reply reaches its picker (no sample: the scrape failed). */
  'scrape-reply': { readonly epp: number; readonly replica: number; readonly startedAt: number; readonly sample: ScrapeSample | undefined };
  /** An ORCA load report (in a response's headers) reaches a gateway. */
  'load-report': { readonly epp: number; readonly replica: number; readonly utilization: number };
  /** An EPP's flow control wakes for its next expiry. */
  'flow-wake': { readonly epp: number };
  /** A picker's periodic work. */
  'router-tick': { readonly epp: number };
  /** A replica's collector takes a metrics sample. */
  sample: { readonly replica: number };
  /** A replica's collector re-publishes its readiness. */
  readiness: { readonly replica: number };
  /** A metrics or readiness event reaches an EPP. */
  deliver: { readonly epp: number; readonly message: MetricsEvent | ReadinessEvent };
  fault: { readonly fault: ResolvedFault };
  /** Probes notice that a replica died (if it has not come back since). */
  detect: { readonly replica: number; readonly generation: number };
  /** A report range starts or ends: output-token totals are recorded. */
  mark: { readonly tally: Tally; readonly edge: 'start' | 'end' };
  /** Every EPP's view of every endpoint is sampled for staleness. */
  probe: object;
  /** The backlog is sampled. */
  backlog: object;
  /** An EPP's shared-state batch leaves. */
  'share-flush': { readonly peer: number };
  /** A shared-state batch reaches an EPP. */
  'share-deliver': { readonly peer: number; readonly batch: StateBatch };
  /** Shared-state heartbeats and expiry. */
  'share-tick': object;
  /** A replica's collector relays its KV-event batch. */
  'kv-flush': { readonly replica: number };
  /** A replica's collector publishes its block set. */
  'kv-snapshot': { readonly replica: number };
  /** A KV batch or snapshot reaches an EPP. */
  'kv-deliver': { readonly epp: number; readonly message: KvBatch | KvSnapshotEvent };
}

export type EventKind = keyof EventMap;

/** An event of kind K (of any kind when K is the whole union). */
export type SimEvent<K extends EventKind = EventKind> = { [P in K]: { readonly kind: P } & EventMap[P] }[K];

export type Handlers = { readonly [K in EventKind]: (event: SimEvent<K>, at: number) => void };

export function dispatch<K extends EventKind>(handlers: Handlers, event: SimEvent<K>, at: number): void {
  handlers[event.kind](event, at);
}
