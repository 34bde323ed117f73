/** A fleet view built from readiness events, as the stream would deliver them. */
import type { ReadinessEvent } from '@spillway/events';
import { Fleet } from '@spillway/fleet';

export const POOL = 'llama';
export const CLUSTER = 'model-servers';

export interface PodSpec {
  pod: string;
  zone: string;
  region?: string;
  address: string;
  ready?: boolean;
  deleted?: boolean;
}

export function readinessOf(spec: PodSpec, observedAt: number): ReadinessEvent {
  return {
    v: 1,
    kind: 'readiness',
    pool: POOL,
    zone: spec.zone,
    pod: spec.pod,
    address: spec.address,
    ready: spec.ready ?? true,
    observedAt,
    ...(spec.region === undefined ? {} : { region: spec.region }),
    ...(spec.deleted === undefined ? {} : { deleted: spec.deleted }),
  };
}

export function fleetOf(specs: readonly PodSpec[], at = 1_000): Fleet {
  const fleet = new Fleet();
  for (const spec of specs) fleet.apply(readinessOf(spec, at), at);
  return fleet;
}

/** Three zones: a and b in region r1, c in r2; two pods each in a and b, one in c. */
export const THREE_ZONES: PodSpec[] = [
  { pod: 'a-0', zone: 'zone-a', region: 'r1', address: '10.0.1.5:8000' },
  { pod: 'a-1', zone: 'zone-a', region: 'r1', address: '10.0.1.6:8000' },
  { pod: 'b-0', zone: 'zone-b', region: 'r1', address: '10.0.2.5:8000' },
  { pod: 'b-1', zone: 'zone-b', region: 'r1', address: '10.0.2.6:8000' },
  { pod: 'c-0', zone: 'zone-c', region: 'r2', address: '10.0.3.5:8000' },
];
