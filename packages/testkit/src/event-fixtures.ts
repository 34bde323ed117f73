/**
 * Event fixtures for tests that need many pods' events (the bus, spillway-fleet): deterministic
 * pools of readiness and metrics events, and a publisher loop that sends them as a collector would.
 */
import type { EventPublisher } from '@spillway/bus';
import type { MetricsEvent, ReadinessEvent, SpillwayEvent } from '@spillway/events';

/** The zone of pod i in these fixtures' pools: zone-a, zone-b, zone-c by i mod 3. */
export function zoneOf(i: number): string {
  return `zone-${String.fromCharCode(97 + (i % 3))}`;
}

/** Pod i of a pool: zone by i mod zones, a distinct 10.x.y.z address. */
export function readiness(pool: string, i: number, observedAt: number, overrides: Partial<ReadinessEvent> = {}): ReadinessEvent {
  return {
    v: 1,
    kind: 'readiness',
    pool,
    zone: zoneOf(i),
    region: 'r1',
    pod: `vllm-${i}`,
    address: `10.${(i >> 16) & 255}.${(i >> 8) & 255}.${i & 255}:8000`,
    ready: true,
    engine: 'vllm',
    observedAt,
    ...overrides,
  };
}

export function metrics(pool: string, i: number, observedAt: number, overrides: Partial<MetricsEvent> = {}): MetricsEvent {
  return {
    v: 1,
    kind: 'metrics',
    pool,
    zone: zoneOf(i),
    pod: `vllm-${i}`,
    observedAt,
    waitingRequests: i % 7,
    runningRequests: i % 11,
    kvCacheUsage: (i % 100) / 100,
    ...overrides,
  };
}

/** Both events of pods [from, to). */
export function podEvents(pool: string, from: number, to: number, observedAt: number): SpillwayEvent[] {
  const out: SpillwayEvent[] = [];
  for (let i = from; i < to; i++) out.push(readiness(pool, i, observedAt), metrics(pool, i, observedAt));
  return out;
}

/** Publishes readiness acked (many in flight at once) and metrics as core publishes, then flushes. */
export async function publishAll(publisher: EventPublisher, events: readonly SpillwayEvent[], inFlight = 500): Promise<void> {
  let pending: Promise<unknown>[] = [];
  for (const event of events) {
    if (event.kind === 'readiness') {
      pending.push(publisher.publishReadiness(event));
      if (pending.length >= inFlight) {
        await Promise.all(pending);
        pending = [];
      }
    } else {
      void publisher.publish(event);
    }
  }
  await Promise.all(pending);
  await publisher.flush();
}
