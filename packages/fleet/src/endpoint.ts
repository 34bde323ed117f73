import type { Engine, MetricsEvent, ReadinessEvent } from '@spillway/events';
import type { Charge } from './charge.js';

/** MetricsSample as the fleet writes it. */
export type MutableSample = { -readonly [K in keyof MetricsSample]: MetricsSample[K] };

/**
 * The last metrics sample of a pod, with when this EPP received it (its clock, or the stream time on
 * replay). One object per pod, updated in place by each sample: read it when you need it, copy what
 * you keep (a new object per sample would outlive the young generation and churn the old one).
 */
export interface MetricsSample {
  readonly observedAt: number;
  readonly receivedAt: number;
  readonly waitingRequests: number;
  readonly runningRequests: number;
  readonly kvCacheUsage: number;
  readonly lora: MetricsEvent['lora'];
  readonly cache: MetricsEvent['cache'];
  /** Service rates measured at the source (optional field of the metrics event). */
  readonly rates: MetricsEvent['rates'];
}

/**
 * One pod of a pool as this EPP sees it. Read-only to everyone but the fleet. The scheduler holds
 * these objects directly (no copies on the hot path) and keys its own per-endpoint state by them.
 */
export interface Endpoint {
  readonly pool: string;
  /**
   * The zone of the subjects this pod's events arrive on: part of its identity (pool, zone, pod),
   * so an event can only ever speak for a pod of its own zone.
   */
  readonly zone: string;
  readonly pod: string;
  /** From the latest readiness event; undefined while only metrics have been seen. */
  readonly region: string | undefined;
  /** Canonical `ip:port` (IPv6 bracketed); undefined while only metrics have been seen. */
  readonly address: string | undefined;
  readonly ip: string | undefined;
  readonly ready: boolean;
  readonly deleted: boolean;
  /**
   * Ready at an address that ready pods of another zone claim too. An address belongs to one zone:
   * a view held for a zone (FleetOptions.localZone) routes only that zone's claimants, or none
   * (docs/events.md, "The view"). Cleared when the conflict ends.
   */
  readonly addressConflict: boolean;
  readonly engine: Engine | undefined;
  readonly labels: Readonly<Record<string, string>> | undefined;
  readonly metrics: MetricsSample | undefined;
  /**
   * Requests charged here (this EPP's and, with sharing, its peers') whose charge has not ended:
   * picked and not yet released, or started and not yet completed, accounted for by samples or
   * past their bound (docs/picking.md, "A request's charge").
   */
  readonly inFlight: number;
  /** Of `inFlight`, the requests whose response has begun (started): they end without a stream to say so. */
  readonly startedInFlight: number;
  /**
   * Requests charged here that the latest metrics sample cannot have seen yet (charged after it):
   * the load the sample under-reports. The scheduler adds it to the sample so a burst spreads
   * between samples.
   */
  readonly unsampledPicks: number;
  /**
   * Requests charged here before the latest sample (so the sample counted them) that a real signal
   * said finished since it (a completion, or a release before any response): the load the sample
   * over-reports. A charge ended without such a signal (by samples, at its bound) is never counted
   * here. With unsampledPicks it turns an old sample into an estimate of the load now
   * (docs/picking.md, "Event gaps are not overload").
   */
  readonly releasedSinceSample: number;
  /** When the latest applied readiness event was received (EPP clock, or stream time on replay); -Infinity before any. */
  readonly readinessReceivedAt: number;
  /**
   * Consecutive samples, up to the latest, that showed requests waiting. A server lists requests
   * that arrived during a step as waiting until the next step admits them, so one sample with a
   * short queue says little; a queue that persists over samples means the batch (or the KV cache)
   * is full and requests wait for others to finish.
   */
  readonly queuedSamples: number;
  /** The most requests any sample of the pod showed running. */
  readonly maxRunningSeen: number;
  /**
   * How many requests the pod runs at once when full: the running count of a sample taken while its
   * queue persisted (queuedSamples ≥ 2) with as many running as it was ever seen running — a full
   * batch, not requests caught between two steps. Raised whenever a later sample shows more
   * running. Undefined until the pod has been seen full.
   */
  readonly batchCapacity: number | undefined;
}

/** Internal mutable record behind an Endpoint. */
export class EndpointRecord implements Endpoint {
  region: string | undefined = undefined;
  address: string | undefined = undefined;
  ip: string | undefined = undefined;
  ready = false;
  deleted = false;
  addressConflict = false;
  /** Not routable for a conflict over its address (only in a view held for a zone). */
  addressRefused = false;
  engine: Engine | undefined = undefined;
  labels: Readonly<Record<string, string>> | undefined = undefined;
  metrics: MutableSample | undefined = undefined;
  inFlight = 0;
  startedInFlight = 0;
  releasedSinceSample = 0;
  queuedSamples = 0;
  maxRunningSeen = 0;
  batchCapacity: number | undefined = undefined;
  readinessReceivedAt = Number.NEGATIVE_INFINITY;
  /** In the pool's routing indexes (routable, ready sets, by address and IP). */
  indexed = false;

  /**
   * observedAt per kind, and the applied readiness event, for ordering and tie-breaks (the applied
   * metrics event is rebuilt from the sample when a tie needs it: see Fleet.appliedMetrics). Plain
   * fields, not WeakMaps keyed by the record: a WeakMap entry per pod taxes every garbage collection.
   */
  readinessAt = -1;
  lastReadiness: ReadinessEvent | undefined = undefined;
  metricsAt = -1;

  /** Requests charged (or started) up to this time (EPP clock) are covered by the latest sample; -Infinity before any. */
  sampledUntil = Number.NEGATIVE_INFINITY;
  /**
   * The charges, oldest `chargedAt` first: an intrusive list through the charges themselves. Those
   * charged after `sampledUntil` are a suffix of it, from `firstUnsampled` on (`unsampled` of them).
   */
  firstCharge: Charge | undefined = undefined;
  lastCharge: Charge | undefined = undefined;
  firstUnsampled: Charge | undefined = undefined;
  unsampled = 0;

  constructor(
    readonly pool: string,
    readonly zone: string,
    readonly pod: string,
  ) {}

  get unsampledPicks(): number {
    return this.unsampled;
  }

  /** Ready at an address by its own readiness: it claims the address, whether or not another zone's pod does too. */
  get claimsAddress(): boolean {
    return this.ready && !this.deleted && this.address !== undefined;
  }

  /** True when the pod may receive traffic by the view alone (passive health is the scheduler's). */
  get routable(): boolean {
    return this.claimsAddress && !this.addressRefused;
  }

  applyReadiness(event: ReadinessEvent, address: { ip: string; key: string }): void {
    this.region = event.region;
    this.address = address.key;
    this.ip = address.ip;
    this.deleted = event.deleted === true;
    this.ready = event.ready && !this.deleted;
    this.engine = event.engine;
    this.labels = event.labels;
  }
}
