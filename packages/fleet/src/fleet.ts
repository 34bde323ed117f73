import { parseEndpointAddress, type MetricsEvent, type ReadinessEvent, type SpillwayEvent } from '@spillway/events';
import { ChargeHeap, type Charge, type ChargeEnd } from './charge.js';
import { EndpointRecord, type Endpoint } from './endpoint.js';
import { PoolState, type PoolView, type ZonePods } from './pool.js';

/** An event dated further than this after its receive time is rejected (docs/hardening.md: events dated in the future). */
export const DEFAULT_MAX_CLOCK_SKEW_MS = 5_000;
/** Pods (live, metrics-only and tombstoned) one zone of a pool may hold; see FleetOptions. */
export const DEFAULT_MAX_PODS_PER_ZONE = 4_096;
/** Zones one pool may hold; see FleetOptions. */
export const DEFAULT_MAX_ZONES_PER_POOL = 64;
/** Charges one endpoint holds at most; see FleetOptions. */
export const DEFAULT_MAX_CHARGES_PER_ENDPOINT = 4_096;
/** Estimated bytes all charges hold at most; see FleetOptions. */
export const DEFAULT_MAX_CHARGE_BYTES = 128 * 1024 * 1024;

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
  /**
   * Most requests charged to one endpoint at once (default 4,096: beyond any model server's batch
   * plus queue). A started request can stay charged long after its stream, so without a cap a
   * flood of picks to one endpoint would hold memory for as long as their bounds.
   */
  maxChargesPerEndpoint?: number;
  /** Most estimated bytes of all charges together (default 128 MiB; `Charge.bytes` says what each costs). */
  maxChargeBytes?: number;
}

/** What became of charges the fleet settled itself (docs/metrics.md, `spillway_charges_ended_total`). */
export interface ChargeCounters {
  /** Started charges ended because a sample could no longer hold them. */
  endedBySamples: number;
  /** Started charges ended at their bound. */
  endedByBound: number;
  /** Started charges ended to make room at a cap. */
  evicted: number;
  /** Charges refused at a cap (nothing started to make room with). */
  refused: number;
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

/** Which charges Fleet.prefillAhead reads: those of the last `horizonMs`, at most `maxCharges` of the newest. */
export interface PrefillAheadLimits {
  readonly horizonMs: number;
  readonly maxCharges: number;
  /**
   * The share of the prefill of the request just ahead of a sampled queue (the one prefilling
   * then) still counted ahead of that queue; 0 or absent: none (the scheduler's `backlog.queueHead`).
   */
  readonly queueHead?: number;
}

/** Fleet.prefillAhead's answer, in an object the caller reuses. */
export interface PrefillAhead {
  ms: number;
  tokens: number;
}

/**
 * How fast an endpoint prefills: ms per prompt token at the short-prompt rate, the context
 * position at which a token's attention costs as much again (the scheduler's `rates.attentionTokens`;
 * 0: prefill priced linearly), and the engine step a prefill runs in: `stepMs` for each chunk of at
 * most `chunkTokens` prompt tokens (0: tokens only).
 */
export interface PrefillRate {
  msPerToken: number;
  attentionTokens: number;
  /**
   * What one step of the endpoint costs beyond the prompt tokens it prefills: the engine's fixed
   * step overhead and its running requests' decodes, which a request waiting behind that prefill
   * waits out too.
   */
  stepMs: number;
  /** Prompt tokens one step prefills at most: a longer prompt takes ⌈n / chunkTokens⌉ steps. */
  chunkTokens: number;
}

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
  /** Started charges by bound, over every endpoint. */
  private readonly bounds = new ChargeHeap();
  private chargeTotal = 0;
  private chargeBytes = 0;
  maxChargesPerEndpoint: number;
  maxChargeBytes: number;
  readonly chargeCounters: ChargeCounters = { endedBySamples: 0, endedByBound: 0, evicted: 0, refused: 0 };
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
    this.maxChargesPerEndpoint = options.maxChargesPerEndpoint ?? DEFAULT_MAX_CHARGES_PER_ENDPOINT;
    this.maxChargeBytes = options.maxChargeBytes ?? DEFAULT_MAX_CHARGE_BYTES;
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

  // ---- charges: the requests loading each endpoint (docs/picking.md, "A request's charge") ----

  /**
   * Charges `endpoint` with a request from `at` (EPP clock): the EPP sent it there now, or another
   * EPP did at `at` and this EPP learnt it only now (shared state), or a fallback served it. It
   * counts in flight and, until the first sample that postdates it, as unsampled load: a charge
   * the latest sample already covers counts in flight only. At the caps (the endpoint's
   * `maxChargesPerEndpoint`, the fleet's `maxChargeBytes`) the started charge nearest its end makes
   * room (`cap`); with none to end, the charge is refused (counted) and false returned.
   */
  charge(charge: Charge, endpoint: Endpoint, at: number): boolean {
    const record = endpoint as EndpointRecord;
    if (charge.chargedTo !== undefined) this.unlink(charge);
    if (!this.makeRoom(record, charge.bytes, at)) {
      this.chargeCounters.refused++;
      return false;
    }
    charge.chargedTo = endpoint;
    charge.chargedAt = at;
    charge.startedAt = Number.NaN;
    charge.endsBy = Number.POSITIVE_INFINITY;
    // Oldest first; a charge learnt late goes back to its place (from the end: it is almost always last).
    let before = record.lastCharge;
    while (before !== undefined && before.chargedAt > at) before = before.prevCharge;
    const after = before === undefined ? record.firstCharge : before.nextCharge;
    charge.prevCharge = before;
    charge.nextCharge = after;
    if (before === undefined) record.firstCharge = charge;
    else before.nextCharge = charge;
    if (after === undefined) record.lastCharge = charge;
    else after.prevCharge = charge;
    record.inFlight++;
    this.chargeTotal++;
    this.chargeBytes += charge.bytes;
    if (at > record.sampledUntil) {
      record.unsampled++;
      if (record.firstUnsampled === undefined || record.firstUnsampled === after) record.firstUnsampled = charge;
    }
    return true;
  }

  /**
   * The request's response began at `at` (EPP clock): it runs on, past its stream, until a
   * completion is seen, the endpoint's samples account for it, or `endsBy`. Ignored for a charge
   * that is not held or has started already.
   */
  startCharge(charge: Charge, at: number, endsBy: number): void {
    const record = charge.chargedTo as EndpointRecord | undefined;
    if (record === undefined || charge.started) return;
    // Never before its charge (a peer's times are translated batch by batch, a few ms apart).
    charge.startedAt = Math.max(at, charge.chargedAt);
    charge.endsBy = Math.max(charge.startedAt, endsBy);
    record.startedInFlight++;
    this.bounds.push(charge);
  }

  /**
   * A real signal that the request finished (its completion seen, or its stream ended before any
   * response: cancelled, failed, answered by the gateway itself): it no longer loads the endpoint.
   * `releasedAt` (EPP clock) is given for a release learnt later (another EPP's): when the latest
   * sample postdates it, that sample already showed the request gone. Idempotent.
   */
  releaseCharge(charge: Charge, releasedAt?: number): void {
    const record = charge.chargedTo as EndpointRecord | undefined;
    if (record === undefined) return;
    // Not among the unsampled charges: the latest sample counted this request, and it is gone now.
    const sampled = !(charge.chargedAt > record.sampledUntil);
    this.unlink(charge);
    if (sampled && record.metrics !== undefined && !(releasedAt !== undefined && releasedAt <= record.sampledUntil))
      record.releasedSinceSample++;
  }

  /**
   * Ends a charge without saying the request finished: another EPP's whose peer went silent, or
   * that ended without a completion there (by samples, at its bound). It stops counting in flight
   * and as unsampled load; a sample taken since it still shows the request, if it is still
   * running, so it is never counted as released since that sample. Idempotent.
   */
  forgetCharge(charge: Charge): void {
    if (charge.chargedTo !== undefined) this.unlink(charge);
  }

  /** Ends every started charge whose bound has passed at `now` (`bound`); returns how many. */
  expireCharges(now: number): number {
    let ended = 0;
    for (let next = this.bounds.peek(); next !== undefined && next.endsBy <= now; next = this.bounds.peek()) {
      this.endCharge(next, 'bound', now);
      ended++;
    }
    return ended;
  }

  /** Charges held over all endpoints, and their estimated bytes. */
  get charges(): { readonly count: number; readonly bytes: number; readonly started: number } {
    return { count: this.chargeTotal, bytes: this.chargeBytes, started: this.bounds.size };
  }

  /**
   * The prefill work still ahead at the endpoint from the requests charged to it in the last
   * `horizonMs` (at most `maxCharges` of the newest): each brings its `prefillTokens`, and the
   * endpoint works them off one after the other from the moment each was charged — a FIFO server,
   * whose last finish is the latest `t_i + Σ_{j ≥ i} work_j` over the charges (read newest first, so
   * no state is kept between calls). A charge of n tokens is n · msPerToken plus its attention,
   * n² · msPerToken / (2 · attentionTokens), as if its prompt had nothing cached ahead of the tokens
   * it brings, plus `stepMs` for each step it takes (⌈n / chunkTokens⌉, one at least): the engine
   * prefills in steps, and each step also pays its fixed overhead and every running request's
   * decode, so a short prompt ahead costs about a step more than its tokens.
   *
   * The latest sample's queue is work the endpoint held then: when it showed `waitingRequests`
   * waiting, those are (first come, first served) the newest requests charged before the time the
   * sample covers (`sampledUntil`), however long ago, as far as charges know them. Their prefills
   * were all still ahead at that time, and every charge since comes after them, so the FIFO also
   * finishes no earlier than `sampledUntil + Σ queued + Σ since`. A queue of documents is so priced
   * by what it holds, not by its length. A queue also means the step's token budget was spent (or
   * its slots): the request charged just before the queued ones was being served then, part of its
   * prefill still to do — `queueHead` of its work (half, on average) is counted ahead of the queue,
   * however old its charge. That is the document still prefilling which holds the queue up, and
   * which no sample shows but as one running request.
   *
   * Returns the ms left of it at `now` (0 when it is done); `out.tokens` the tokens those ms are at msPerToken.
   */
  prefillAhead(endpoint: Endpoint, now: number, limits: PrefillAheadLimits, rate: PrefillRate, out: PrefillAhead): number {
    const record = endpoint as EndpointRecord;
    const msPerToken = rate.msPerToken;
    const msPerTokenSquared = rate.attentionTokens > 0 ? msPerToken / (2 * rate.attentionTokens) : 0;
    const sampledUntil = record.sampledUntil;
    let queueLeft = record.metrics?.waitingRequests ?? 0;
    const queueHead = limits.queueHead ?? 0;
    let headTaken = queueHead <= 0;
    let work = 0;
    let workSince = 0;
    let queued = 0;
    let finish = Number.NEGATIVE_INFINITY;
    let seen = 0;
    const since = now - limits.horizonMs;
    for (let c = record.lastCharge; c !== undefined && seen < limits.maxCharges; c = c.prevCharge) {
      const covered = c.chargedAt <= sampledUntil;
      const recent = c.chargedAt >= since;
      const inQueue = covered && queueLeft > 0;
      // The first covered charge past the queue: the one being served when the sample was taken.
      const head = !headTaken && covered && !inQueue && queued > 0;
      if (!recent && !inQueue && !head) break;
      seen++;
      const tokens = c.prefillTokens;
      const cost = tokens * (msPerToken + tokens * msPerTokenSquared) + stepsOf(tokens, rate.chunkTokens) * rate.stepMs;
      if (inQueue) {
        queued += cost;
        queueLeft--;
      } else if (head) {
        queued += queueHead * cost;
        headTaken = true;
      }
      if (!recent) continue;
      work += cost;
      if (!covered) workSince = work;
      const end = c.chargedAt + work;
      if (end > finish) finish = end;
    }
    if (queued > 0 && sampledUntil + queued + workSince > finish) finish = sampledUntil + queued + workSince;
    const ms = finish > now ? finish - now : 0;
    out.tokens = msPerToken > 0 ? ms / msPerToken : 0;
    out.ms = ms;
    return ms;
  }

  /** Takes a charge out of its endpoint's list, the in-flight and unsampled counts, and the bound heap. */
  private unlink(charge: Charge): void {
    const record = charge.chargedTo as EndpointRecord;
    const before = charge.prevCharge;
    const after = charge.nextCharge;
    if (before === undefined) record.firstCharge = after;
    else before.nextCharge = after;
    if (after === undefined) record.lastCharge = before;
    else after.prevCharge = before;
    if (charge.chargedAt > record.sampledUntil) {
      record.unsampled--;
      if (record.firstUnsampled === charge) record.firstUnsampled = after;
    }
    if (charge.started) record.startedInFlight--;
    record.inFlight--;
    this.chargeTotal--;
    this.chargeBytes -= charge.bytes;
    this.bounds.remove(charge);
    charge.prevCharge = charge.nextCharge = charge.chargedTo = undefined;
  }

  /** Ends a charge the fleet settled itself, and tells its owner. */
  private endCharge(charge: Charge, reason: ChargeEnd, at: number): void {
    this.unlink(charge);
    if (reason === 'samples') this.chargeCounters.endedBySamples++;
    else if (reason === 'bound') this.chargeCounters.endedByBound++;
    else this.chargeCounters.evicted++;
    charge.chargeEnded(reason, at);
  }

  /**
   * Room for a charge of `bytes` at `record`: under the endpoint's count cap and the fleet's byte
   * cap, ending started charges that are closest to their end (they are the likeliest finished:
   * the endpoint's oldest started one for its own cap, the earliest bound for the fleet's).
   */
  private makeRoom(record: EndpointRecord, bytes: number, at: number): boolean {
    while (record.inFlight >= this.maxChargesPerEndpoint) {
      let oldest = record.firstCharge;
      while (oldest !== undefined && !oldest.started) oldest = oldest.nextCharge;
      if (oldest === undefined) return false;
      this.endCharge(oldest, 'cap', at);
    }
    while (this.chargeBytes + bytes > this.maxChargeBytes) {
      const nearest = this.bounds.peek();
      if (nearest === undefined) return false;
      this.endCharge(nearest, 'cap', at);
    }
    return true;
  }

  /**
   * After a sample of `record` (its counts `present` = running + waiting) covering what happened up
   * to `record.sampledUntil`: a request that started by then is in the sample if it still runs. When
   * more started charges are covered than the sample counts requests, the difference certainly
   * finished (the sample may also count requests no EPP charged, so it is a lower bound): that many
   * end, oldest first — the longest running are the likeliest done, and completions of a batch
   * come roughly in the order requests joined it. Never counted as released since the sample: the
   * sample already shows them gone.
   */
  private settleBySample(record: EndpointRecord, present: number, at: number): void {
    // Cheap test first: the covered started charges are among the sampled ones.
    if (record.inFlight - record.unsampled <= present) return;
    const until = record.sampledUntil;
    const stop = record.firstUnsampled;
    let covered = 0;
    for (let c = record.firstCharge; c !== undefined && c !== stop; c = c.nextCharge) if (c.startedAt <= until) covered++;
    let surplus = covered - present;
    for (let c = record.firstCharge; surplus > 0 && c !== undefined && c !== stop;) {
      const next = c.nextCharge;
      if (c.startedAt <= until) {
        this.endCharge(c, 'samples', at);
        surplus--;
      }
      c = next;
    }
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
    // Never past its receipt: a source clock running ahead cannot make the sample cover later picks.
    record.sampledUntil = Math.min(receivedAt, Math.max(event.observedAt - this.pickTransitMs, receivedAt - this.maxSampleLagMs));
    absorbSampledCharges(record);
    this.settleBySample(record, event.runningRequests + event.waitingRequests, receivedAt);
    return 'applied';
  }
}

/** Moves the charges a sample covers (charged up to `sampledUntil`) out of the unsampled suffix. */
function absorbSampledCharges(record: EndpointRecord): void {
  let first = record.firstUnsampled;
  while (first !== undefined && first.chargedAt <= record.sampledUntil) {
    first = first.nextCharge;
    record.unsampled--;
  }
  record.firstUnsampled = first;
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

/** The engine steps a prefill of `tokens` takes at `chunkTokens` a step: one at least. */
function stepsOf(tokens: number, chunkTokens: number): number {
  return tokens > chunkTokens && chunkTokens > 0 ? Math.ceil(tokens / chunkTokens) : 1;
}
