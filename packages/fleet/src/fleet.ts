import { parseEndpointAddress, type MetricsEvent, type ReadinessEvent, type SpillwayEvent } from '@spillway/events';
import { EndpointRecord, type Endpoint } from './endpoint.js';
import { PoolState, type PoolView, type ZonePods } from './pool.js';

/** An event dated further than this after its receive time is rejected (docs/hardening.md: events dated in the future). */
export const DEFAULT_MAX_CLOCK_SKEW_MS = 5_000;
/** Pods (live, metrics-only and tombstoned) one zone of a pool may hold; see FleetOptions. */
export const DEFAULT_MAX_PODS_PER_ZONE = 4_096;
/** Zones one pool may hold; see FleetOptions. */
export const DEFAULT_MAX_ZONES_PER_POOL = 64;

export interface FleetOptions {
  /** Metrics older than this (from when they were received) are stale. Default 1 s (docs/events.md). */
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
  /**
   * An event whose `observedAt` is more than this after the receive time it is applied with (the
   * EPP's clock live, the stream timestamp on replay) is rejected as `future`: otherwise one bad
   * clock or forged message would pin a pod's state, since later true events look older.
   */
  maxClockSkewMs?: number;
  /**
   * Most pods one zone of a pool holds. A zone's collector can name any pod of its zone, so this
   * bounds what one zone's publish rights can cost every EPP (memory, pick time, replay). When a
   * zone is full its oldest tombstone is forgotten to make room; with no tombstone to spare, an
   * event for a new pod is rejected as `over-capacity`. Events for pods already held always apply.
   */
  maxPodsPerZone?: number;
  /**
   * Most zones one pool holds. Every zone costs every EPP per-zone state and metric series, and any
   * publisher (in a topology without per-zone users, any client) can name a new zone; an event for
   * a pod of a new zone beyond it is rejected as `too-many-zones`. A zone whose pods are all
   * forgotten (pruned tombstones) frees its place.
   */
  maxZonesPerPool?: number;
  /**
   * The zone of the EPP holding this view. An address belongs to one zone: when pods of several
   * zones claim the same `ip:port`, only this zone's stay routable (its own collector is the one
   * that knows its pods), and without one of them none does. Unset (a view for every zone, such as
   * spillway-xds's, which settles per gateway zone): every claimant stays routable, marked
   * `addressConflict`.
   */
  localZone?: string | undefined;
}

export interface FleetCounters {
  /** Events that changed the view. */
  applied: number;
  /** Valid events older than (or a duplicate of) what the view already holds. */
  ignored: number;
  /** Messages the bus could not decode; counted here so one place reports the stream's health. */
  rejected: number;
  /** Valid events dated more than `maxClockSkewMs` after their receive time; never applied. */
  future: number;
  /** Valid events for a new pod of a zone already holding `maxPodsPerZone` pods; never applied. */
  overCapacity: number;
  /** Valid events for a pod of a new zone in a pool already holding `maxZonesPerPool` zones; never applied. */
  tooManyZones: number;
  /**
   * Readiness events that left an address claimed by pods of more than one zone (applied: the pod's
   * record holds it, but only one zone's claimants, or none, are routable).
   */
  addressConflict: number;
}

/**
 * The outcome of applying one event, for callers that log or count. `future`, `over-capacity` and
 * `too-many-zones` are refusals: the event is dropped whole and the view is unchanged.
 * `address-conflict`: the event was applied, and its pod's address is claimed by pods of more than
 * one zone (in a view held for a zone, not every claimant is routable: FleetOptions.localZone).
 */
export type ApplyOutcome = 'applied' | 'ignored' | 'future' | 'over-capacity' | 'too-many-zones' | 'address-conflict';

/**
 * The event-sourced view of the model-server pools (docs/events.md, "The view"). Pure: it reads no clock; every
 * call that depends on time is handed `now` or `receivedAt`. A pod is identified by (pool, zone,
 * pod): the zone of the event's subject is part of the key, so per-zone publish permissions also
 * bound which pods a publisher can change. Applying is O(1) per event, and the result does not
 * depend on the order events arrive in: for each (pod, kind) the newest `observedAt` wins, equal
 * timestamps are settled by comparing payloads. (Two exceptions, both refusals of hostile input:
 * an event dated in the future is refused by its receive time, and a full zone refuses new pods.)
 */
export class Fleet {
  readonly staleAfterMs: number;
  private readonly pickTransitMs: number;
  private readonly maxSampleLagMs: number;
  readonly maxClockSkewMs: number;
  readonly maxPodsPerZone: number;
  readonly maxZonesPerPool: number;
  private readonly localZone: string | undefined;
  private readonly pools = new Map<string, PoolState>();
  readonly counters: FleetCounters = {
    applied: 0,
    ignored: 0,
    rejected: 0,
    future: 0,
    overCapacity: 0,
    tooManyZones: 0,
    addressConflict: 0,
  };
  /** Bumped whenever routability or topology changes (readiness); schedulers may cache on it. */
  topologyVersion = 0;

  constructor(options: FleetOptions = {}) {
    this.staleAfterMs = options.staleAfterMs ?? 1000;
    this.pickTransitMs = options.pickTransitMs ?? 2;
    this.maxSampleLagMs = options.maxSampleLagMs ?? 500;
    this.maxClockSkewMs = options.maxClockSkewMs ?? DEFAULT_MAX_CLOCK_SKEW_MS;
    this.maxPodsPerZone = options.maxPodsPerZone ?? DEFAULT_MAX_PODS_PER_ZONE;
    this.maxZonesPerPool = options.maxZonesPerPool ?? DEFAULT_MAX_ZONES_PER_POOL;
    this.localZone = options.localZone;
  }

  /**
   * Applies one decoded event received at `receivedAt` (ms: the EPP's clock for live events, the
   * stream timestamp on replay, so a running and a restarted EPP judge an event alike).
   */
  apply(event: SpillwayEvent, receivedAt: number): ApplyOutcome {
    if (event.observedAt > receivedAt + this.maxClockSkewMs) {
      this.counters.future++;
      return 'future';
    }
    // A pod's KV block set feeds the scheduler's block index, not this view: never a pod record.
    if (event.kind === 'kv') {
      this.counters.ignored++;
      return 'ignored';
    }
    const record = this.recordFor(event.pool, event.zone, event.pod);
    if (typeof record === 'string') {
      if (record === 'over-capacity') this.counters.overCapacity++;
      else this.counters.tooManyZones++;
      return record;
    }
    const outcome =
      event.kind === 'readiness' ? this.applyReadiness(record, event, receivedAt) : this.applyMetrics(record, event, receivedAt);
    if (outcome === 'ignored') this.counters.ignored++;
    else this.counters.applied++;
    if (outcome === 'address-conflict') this.counters.addressConflict++;
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

  /** The pod `pod` of `zone` in `pool`; pods of the same name in other zones are other pods. */
  get(pool: string, zone: string, pod: string): Endpoint | undefined {
    return this.pools.get(pool)?.zones.get(zone)?.pods.get(pod);
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
      for (const zone of [...pool.zones.values()]) {
        for (const record of zone.deleted) {
          if (record.readinessAt < before && record.inFlight === 0) {
            zone.remove(record);
            removed++;
          }
        }
        if (zone.pods.size === 0) pool.dropZone(zone.zone);
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

  /**
   * This EPP's picks of the endpoint in the last `windowMs` that no sample has seen yet, each
   * weighted by how much of the window is still ahead of it (1 for a pick made now, 0 for one made
   * `windowMs` ago): the share of their work still in progress when each takes about `windowMs`.
   */
  recentPicks(endpoint: Endpoint, now: number, windowMs: number): number {
    const record = endpoint as EndpointRecord;
    const times = record.pickTimes;
    let load = 0;
    if (windowMs <= 0) return 0;
    for (let i = times.length - 1; i >= record.pickHead; i--) {
      const age = now - (times[i] as number);
      if (age >= windowMs) break;
      load += 1 - Math.max(0, age) / windowMs;
    }
    return load;
  }

  /**
   * A pick made at `pickedAt` (EPP clock) and learnt only now: another EPP's, from the shared-state
   * channel. It counts in flight and, like a local pick, loads the endpoint until the first sample
   * that postdates it: a pick the latest sample already covers is not counted as unsampled, and a
   * later one is placed in time order among this endpoint's unsampled picks. Returns whether it is
   * counted as unsampled.
   */
  recordPickAt(endpoint: Endpoint, pickedAt: number): boolean {
    const record = endpoint as EndpointRecord;
    record.inFlight++;
    if (pickedAt <= record.sampledUntil) return false;
    const times = record.pickTimes;
    let i = times.length;
    while (i > record.pickHead && (times[i - 1] as number) > pickedAt) i--;
    if (i === times.length) times.push(pickedAt);
    else times.splice(i, 0, pickedAt);
    return true;
  }

  /**
   * A request picked at `pickedAt` finished (completed, cancelled or failed) and no longer loads the
   * endpoint. `releasedAt` (EPP clock) is given for a release learnt later (another EPP's): when the
   * latest sample postdates it, that sample already showed the request gone.
   */
  releasePick(endpoint: Endpoint, pickedAt: number, releasedAt?: number): void {
    const record = endpoint as EndpointRecord;
    if (this.dropPick(record, pickedAt)) return;
    // Not among the unsampled picks: the latest sample counted this request, and it is gone now.
    if (record.metrics !== undefined && !(releasedAt !== undefined && releasedAt <= record.sampledUntil)) record.releasedSinceSample++;
  }

  /**
   * Forgets a pick without saying the request finished: another EPP's pick whose release never
   * came (lost, or that EPP went silent). It stops counting in flight and as unsampled load; a
   * sample taken since it still shows the request, if it is still running.
   */
  forgetPick(endpoint: Endpoint, pickedAt: number): void {
    this.dropPick(endpoint as EndpointRecord, pickedAt);
  }

  /** Takes the pick out of the in-flight count and the unsampled picks; true when it was unsampled. */
  private dropPick(record: EndpointRecord, pickedAt: number): boolean {
    if (record.inFlight > 0) record.inFlight--;
    const times = record.pickTimes;
    for (let i = times.length - 1; i >= record.pickHead; i--) {
      if (times[i] === pickedAt) {
        times.splice(i, 1);
        return true;
      }
    }
    return false;
  }

  /** The pod's record, created if new; why not when its zone is full or the pool holds the most zones allowed. */
  private recordFor(poolName: string, zone: string, pod: string): EndpointRecord | 'over-capacity' | 'too-many-zones' {
    let pool = this.pools.get(poolName);
    if (!pool) {
      pool = new PoolState(poolName, this.localZone);
      this.pools.set(poolName, pool);
    }
    if (!pool.zones.has(zone) && pool.zoneCount >= this.maxZonesPerPool) return 'too-many-zones';
    const pods = pool.zonePods(zone);
    let record = pods.pods.get(pod);
    if (!record) {
      if (pods.pods.size >= this.maxPodsPerZone && !pods.evictOldestTombstone()) return 'over-capacity';
      record = new EndpointRecord(poolName, zone, pod);
      pods.pods.set(pod, record);
    }
    return record;
  }

  private zoneOf(record: EndpointRecord): ZonePods {
    return (this.pools.get(record.pool) as PoolState).zonePods(record.zone);
  }

  private applyReadiness(record: EndpointRecord, event: ReadinessEvent, receivedAt: number): ApplyOutcome {
    const previous = record.lastReadiness;
    if (!isNewer(event, record.readinessAt, () => previous)) return 'ignored';
    // Readiness is re-published every 30 s, almost always with the same address: parse it once.
    const address =
      previous !== undefined && previous.address === event.address && record.address !== undefined && record.ip !== undefined
        ? { ip: record.ip, key: record.address }
        : parseEndpointAddress(event.address);
    // The schema already validated the address; an unparsable one here means a caller skipped decoding.
    if (!address) throw new Error(`readiness event for ${event.pod} has an invalid address ${event.address}`);
    const pool = this.pools.get(record.pool) as PoolState;
    pool.unindex(record);
    record.applyReadiness(event, address);
    record.readinessAt = event.observedAt;
    record.readinessReceivedAt = receivedAt;
    record.lastReadiness = event;
    const conflict = pool.index(record);
    pool.noteReadiness(event.zone, receivedAt);
    this.zoneOf(record).track(record);
    this.topologyVersion++;
    return conflict ? 'address-conflict' : 'applied';
  }

  private applyMetrics(record: EndpointRecord, event: MetricsEvent, receivedAt: number): ApplyOutcome {
    if (!isNewer(event, record.metricsAt, () => appliedMetrics(record))) return 'ignored';
    const sample = record.metrics;
    if (sample === undefined) {
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
    } else {
      sample.observedAt = event.observedAt;
      sample.receivedAt = receivedAt;
      sample.waitingRequests = event.waitingRequests;
      sample.runningRequests = event.runningRequests;
      sample.kvCacheUsage = event.kvCacheUsage;
      sample.lora = event.lora;
      sample.cache = event.cache;
      sample.rates = event.rates;
    }
    record.metricsAt = event.observedAt;
    record.releasedSinceSample = 0;
    record.queuedSamples = event.waitingRequests > 0 ? Math.min(record.queuedSamples + 1, 1_000_000) : 0;
    const running = event.runningRequests;
    if (running > record.maxRunningSeen) record.maxRunningSeen = running;
    if (record.queuedSamples >= 2 && running >= record.maxRunningSeen) record.batchCapacity = running;
    else if (record.batchCapacity !== undefined && running > record.batchCapacity) record.batchCapacity = running;
    (this.pools.get(record.pool) as PoolState).noteSample(event.zone, receivedAt);
    record.sampledUntil = Math.max(event.observedAt - this.pickTransitMs, receivedAt - this.maxSampleLagMs);
    absorbSampledPicks(record, record.sampledUntil);
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

function isNewer(event: SpillwayEvent, appliedAt: number, applied: () => SpillwayEvent | undefined): boolean {
  if (event.observedAt !== appliedAt) return event.observedAt > appliedAt;
  // Same instant: order-independent tie-break on the payload, so every replica converges.
  const previous = applied();
  return previous !== undefined && canonical(event) > canonical(previous);
}

/**
 * The metrics event the view applied last, rebuilt from the record and its sample: every field of a
 * metrics event is kept there (fleet.test.ts checks it against the schema), so the rebuilt event is
 * the decoded one, and the decoded event itself need not outlive its message.
 */
export function appliedMetrics(record: EndpointRecord): MetricsEvent | undefined {
  const sample = record.metrics;
  if (sample === undefined) return undefined;
  const event: MetricsEvent = {
    v: 1,
    kind: 'metrics',
    pool: record.pool,
    zone: record.zone,
    pod: record.pod,
    observedAt: sample.observedAt,
    waitingRequests: sample.waitingRequests,
    runningRequests: sample.runningRequests,
    kvCacheUsage: sample.kvCacheUsage,
  };
  if (sample.lora !== undefined) event.lora = sample.lora;
  if (sample.cache !== undefined) event.cache = sample.cache;
  if (sample.rates !== undefined) event.rates = sample.rates;
  return event;
}

function canonical(value: unknown): string {
  return JSON.stringify(value, (_key, inner: unknown) =>
    inner && typeof inner === 'object' && !Array.isArray(inner)
      ? Object.fromEntries(Object.entries(inner as Record<string, unknown>).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)))
      : inner,
  );
}
