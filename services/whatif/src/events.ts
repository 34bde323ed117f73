import type { KvBatch, KvSnapshotEvent, MetricsEvent, ReadinessEvent, StateBatch } from '@spillway/events';
import type { ResolvedFault } from './resolve.js';
import type { Tally } from './tally.js';

/**
 * Every kind of event the simulation schedules, with what it carries. One handler per kind
 * (`Handlers`); `dispatch` hands an event to its handler with its type intact, so no handler
 * recovers its payload by a cast.
 */
export interface EventMap {
  /** The next request at a zone's gateway. */
  arrival: { readonly gateway: number };
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
