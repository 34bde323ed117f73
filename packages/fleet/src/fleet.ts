import { parseEndpointAddress, type MetricsEvent, type ReadinessEvent, type SpillwayEvent } from '@spillway/events';
import { EndpointRecord, type Endpoint } from './endpoint.js';
import { PoolState, type PoolView } from './pool.js';

export interface FleetOptions {
  /** Metrics older than this (from when they were received) are stale. DESIGN §3 default: 1 s. */
  staleAfterMs?: number;
  /**
   * Time for a picked request to reach the model server: a sample observed less than this after a
   * pick cannot include it, so the pick stays counted on top of the sample.
   */
  pickTransitMs?: number;
  /**
   * A pick is taken as seen by any sample received this long after it, whatever the sample's
   * observedAt says, so a source clock running behind cannot make picks count forever.
   */
  maxSampleLagMs?: number;
}

export interface FleetCounters {
  /** Events that changed the view. */
  applied: number;
  /** Valid events older than (or a duplicate of) what the view already holds. */
  ignored: number;
  /** Messages the bus could not decode; counted here so one place reports the stream's health. */
  rejected: number;
}

/** The outcome of applying one event, for callers that log or count. */
export type ApplyOutcome = 'applied' | 'ignored';

/**
 * The event-sourced view of the model-server pools (DESIGN §3). Pure: it reads no clock; every
 * call that depends on time is handed `now` or `receivedAt`. Applying is O(1) per event, and the
 * result does not depend on the order events arrive in: for each (pod, kind) the newest
 * `observedAt` wins, equal timestamps are settled by comparing payloads.
 */
export class Fleet {
  readonly staleAfterMs: number;
  private readonly pickTransitMs: number;
  private readonly maxSampleLagMs: number;
  private readonly pools = new Map<string, PoolState>();
  private readonly lastReadiness = new WeakMap<EndpointRecord, ReadinessEvent>();
  private readonly lastMetrics = new WeakMap<EndpointRecord, MetricsEvent>();
  readonly counters: FleetCounters = { applied: 0, ignored: 0, rejected: 0 };
  /** Bumped whenever routability or topology changes (readiness); schedulers may cache on it. */
  topologyVersion = 0;

  constructor(options: FleetOptions = {}) {
    this.staleAfterMs = options.staleAfterMs ?? 1000;
    this.pickTransitMs = options.pickTransitMs ?? 2;
    this.maxSampleLagMs = options.maxSampleLagMs ?? 500;
  }

  apply(event: SpillwayEvent, receivedAt: number): ApplyOutcome {
    const record = this.recordFor(event.pool, event.pod);
    const outcome =
      event.kind === 'readiness' ? this.applyReadiness(record, event, receivedAt) : this.applyMetrics(record, event, receivedAt);
    if (outcome === 'applied') this.counters.applied++;
    else this.counters.ignored++;
    return outcome;
  }

  /** Counts a message that failed to decode; it never reaches the view. */
  recordRejected(): void {
    this.counters.rejected++;
  }

  pool(name: string): PoolView | undefined {
    return this.pools.get(name);
  }

  poolNames(): IterableIterator<string> {
    return this.pools.keys();
  }

  get(pool: string, pod: string): Endpoint | undefined {
    return this.pools.get(pool)?.pods.get(pod);
  }

  /** Milliseconds since the pod's latest sample was received; undefined when it has none. */
  metricsAge(endpoint: Endpoint, now: number): number | undefined {
    return endpoint.metrics ? now - endpoint.metrics.receivedAt : undefined;
  }

  /** Fresh means a sample no older than the staleness limit. No metrics is never fresh. */
  isFresh(endpoint: Endpoint, now: number): boolean {
    const metrics = endpoint.metrics;
    return metrics !== undefined && now - metrics.receivedAt <= this.staleAfterMs;
  }

  /**
   * Forgets pods deleted (tombstoned) before `before` (ms, the tombstone's observedAt), so a
   * long-running EPP does not keep every pod name it ever saw. Only old tombstones go: a late
   * event older than a recent tombstone must still be ignored rather than revive the pod, and
   * collectors stop publishing for a deleted pod, so after a while nothing older can arrive.
   * Returns how many were removed.
   */
  pruneDeleted(before: number): number {
    let removed = 0;
    for (const pool of this.pools.values()) {
      for (const [name, record] of pool.pods) {
        if (record.deleted && record.readinessAt < before && record.inFlight === 0) {
          pool.pods.delete(name);
          removed++;
        }
      }
    }
    return removed;
  }

  /** The EPP sent a request to this endpoint at `now`. */
  recordPick(endpoint: Endpoint, now: number): void {
    const record = endpoint as EndpointRecord;
    record.inFlight++;
    record.pickTimes.push(now);
  }

  /** A request picked at `pickedAt` finished (completed, cancelled or failed) and no longer loads the endpoint. */
  releasePick(endpoint: Endpoint, pickedAt: number): void {
    const record = endpoint as EndpointRecord;
    if (record.inFlight > 0) record.inFlight--;
    const times = record.pickTimes;
    for (let i = times.length - 1; i >= record.pickHead; i--) {
      if (times[i] === pickedAt) {
        times.splice(i, 1);
        return;
      }
    }
    // Not among the unsampled picks: the latest sample counted this request, and it is gone now.
    if (record.metrics !== undefined) record.releasedSinceSample++;
  }

  private recordFor(poolName: string, pod: string): EndpointRecord {
    let pool = this.pools.get(poolName);
    if (!pool) {
      pool = new PoolState(poolName);
      this.pools.set(poolName, pool);
    }
    let record = pool.pods.get(pod);
    if (!record) {
      record = new EndpointRecord(poolName, pod);
      pool.pods.set(pod, record);
    }
    return record;
  }

  private applyReadiness(record: EndpointRecord, event: ReadinessEvent, receivedAt: number): ApplyOutcome {
    if (!isNewer(event, record.readinessAt, this.lastReadiness.get(record))) return 'ignored';
    const address = parseEndpointAddress(event.address);
    // The schema already validated the address; an unparsable one here means a caller skipped decoding.
    if (!address) throw new Error(`readiness event for ${event.pod} has an invalid address ${event.address}`);
    const pool = this.pools.get(record.pool) as PoolState;
    pool.unindex(record);
    record.applyReadiness(event, address);
    record.readinessAt = event.observedAt;
    record.readinessReceivedAt = receivedAt;
    this.lastReadiness.set(record, event);
    pool.index(record);
    pool.noteReadiness(event.zone, receivedAt);
    this.topologyVersion++;
    return 'applied';
  }

  private applyMetrics(record: EndpointRecord, event: MetricsEvent, receivedAt: number): ApplyOutcome {
    if (!isNewer(event, record.metricsAt, this.lastMetrics.get(record))) return 'ignored';
    record.metrics = {
      observedAt: event.observedAt,
      receivedAt,
      waitingRequests: event.waitingRequests,
      runningRequests: event.runningRequests,
      kvCacheUsage: event.kvCacheUsage,
      lora: event.lora,
      cache: event.cache,
      rates: event.rates,
    };
    record.metricsAt = event.observedAt;
    record.releasedSinceSample = 0;
    this.lastMetrics.set(record, event);
    (this.pools.get(record.pool) as PoolState).noteSample(event.zone, receivedAt);
    absorbSampledPicks(record, Math.max(event.observedAt - this.pickTransitMs, receivedAt - this.maxSampleLagMs));
    return 'applied';
  }
}

/** Drops the picks a sample taken at `seenUntil` already reflects; compacts the deque now and then. */
function absorbSampledPicks(record: EndpointRecord, seenUntil: number): void {
  const times = record.pickTimes;
  let head = record.pickHead;
  while (head < times.length && (times[head] as number) <= seenUntil) head++;
  if (head === times.length) {
    times.length = 0;
    head = 0;
  } else if (head > 64 && head * 2 > times.length) {
    times.splice(0, head);
    head = 0;
  }
  record.pickHead = head;
}

function isNewer(event: SpillwayEvent, appliedAt: number, applied: SpillwayEvent | undefined): boolean {
  if (event.observedAt !== appliedAt) return event.observedAt > appliedAt;
  // Same instant: order-independent tie-break on the payload, so every replica converges.
  return applied !== undefined && canonical(event) > canonical(applied);
}

function canonical(value: unknown): string {
  return JSON.stringify(value, (_key, inner: unknown) =>
    inner && typeof inner === 'object' && !Array.isArray(inner)
      ? Object.fromEntries(Object.entries(inner as Record<string, unknown>).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)))
      : inner,
  );
}
