import { Fleet } from '@spillway/fleet';
import type { MetricsEvent } from '@spillway/events';

export const POOL = 'llama';
export const T0 = 1_764_420_000_000;

/** One pod of a test fleet. Loads default to idle; metrics are fresh unless `metricsAge` says otherwise. */
export interface PodSpec {
  pod: string;
  zone: string;
  region?: string;
  address: string;
  ready?: boolean;
  deleted?: boolean;
  waiting?: number;
  running?: number;
  kv?: number;
  lora?: MetricsEvent['lora'];
  cache?: MetricsEvent['cache'];
  rates?: MetricsEvent['rates'];
  /**
   * A pod with requests waiting has had them for two samples by default (a backlog, not requests
   * caught between two steps); false applies one sample only.
   */
  backlogged?: boolean;
  /** Milliseconds between the readiness event's arrival and `now` (default 5000). */
  readinessAge?: number;
  /** Milliseconds between the sample's arrival and `now`; undefined = no metrics at all when `noMetrics`. */
  metricsAge?: number;
  noMetrics?: boolean;
}

/** Region of the test zones unless a pod says otherwise: a and b share r1, c is r2. */
export const REGIONS: Record<string, string> = { a: 'r1', b: 'r1', c: 'r2', d: 'r2' };

export function applyPod(fleet: Fleet, spec: PodSpec, now: number): void {
  fleet.apply(
    {
      v: 1,
      kind: 'readiness',
      pool: POOL,
      zone: spec.zone,
      region: spec.region ?? REGIONS[spec.zone],
      pod: spec.pod,
      address: spec.address,
      ready: spec.ready ?? true,
      deleted: spec.deleted,
      observedAt: now - (spec.readinessAge ?? 5000),
    },
    now - (spec.readinessAge ?? 5000),
  );
  if (spec.noMetrics) return;
  const at = now - (spec.metricsAge ?? 0);
  if ((spec.waiting ?? 0) > 0 && spec.backlogged !== false) sample(fleet, spec, at - 100);
  sample(fleet, spec, at);
}

export function buildFleet(pods: readonly PodSpec[], now = T0): Fleet {
  const fleet = new Fleet();
  for (const pod of pods) applyPod(fleet, pod, now);
  return fleet;
}

/** A fresh metrics sample for a pod: absorbs the picks it has seen. */
export function sample(fleet: Fleet, spec: PodSpec, now: number): void {
  fleet.apply(
    {
      v: 1,
      kind: 'metrics',
      pool: POOL,
      zone: spec.zone,
      pod: spec.pod,
      observedAt: now,
      waitingRequests: spec.waiting ?? 0,
      runningRequests: spec.running ?? 0,
      kvCacheUsage: spec.kv ?? 0.1,
      lora: spec.lora,
      cache: spec.cache,
      rates: spec.rates,
    },
    now,
  );
}

/** The standard three-zone pool: a (local, r1) a0..a2, b (r1) b0..b1, c (r2) c0..c1; waiting grows with the index. */
export function threeZones(overrides: Partial<Record<string, Partial<PodSpec>>> = {}): PodSpec[] {
  const base: PodSpec[] = [
    { pod: 'a0', zone: 'a', address: '10.0.0.1:8000', waiting: 0 },
    { pod: 'a1', zone: 'a', address: '10.0.0.2:8000', waiting: 1 },
    { pod: 'a2', zone: 'a', address: '10.0.0.3:8000', waiting: 2 },
    { pod: 'b0', zone: 'b', address: '10.0.1.1:8000', waiting: 0 },
    { pod: 'b1', zone: 'b', address: '10.0.1.2:8000', waiting: 1 },
    { pod: 'c0', zone: 'c', address: '10.0.2.1:8000', waiting: 0 },
    { pod: 'c1', zone: 'c', address: '10.0.2.2:8000', waiting: 1 },
  ];
  return base.map((spec) => ({ ...spec, ...overrides[spec.pod] }));
}

/** Marks every pod of the given zones saturated by queue. */
export function saturate(pods: PodSpec[], zones: readonly string[]): PodSpec[] {
  return pods.map((p) => (zones.includes(p.zone) ? { ...p, waiting: 5 + (p.waiting ?? 0) } : p));
}
