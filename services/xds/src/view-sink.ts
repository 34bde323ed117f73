/**
 * The reader's sink: events go into the Fleet exactly as in the EPP (the same view, the same rules:
 * newest observedAt wins, future-dated and over-capacity events refused), and a readiness event
 * that changes what a gateway is told (whether the pod is routable, its address, its zone's
 * region) is reported, so the service can push. Metrics samples never change the resources.
 */
import type { ReaderSink } from '@spillway/bus';
import type { SpillwayEvent } from '@spillway/events';
import type { Endpoint, Fleet } from '@spillway/fleet';

function routingOf(endpoint: Endpoint | undefined): string {
  if (endpoint === undefined) return '';
  const routable = endpoint.ready && !endpoint.deleted && endpoint.address !== undefined;
  return `${routable ? 1 : 0}|${endpoint.address ?? ''}|${endpoint.region ?? ''}`;
}

export class RoutingChangeSink implements ReaderSink {
  constructor(
    private readonly fleet: Fleet,
    private readonly onChange: () => void,
  ) {}

  apply(event: SpillwayEvent, receivedAt: number): unknown {
    if (event.kind !== 'readiness') return this.fleet.apply(event, receivedAt);
    const before = routingOf(this.fleet.get(event.pool, event.zone, event.pod));
    const outcome = this.fleet.apply(event, receivedAt);
    if (outcome === 'applied' && routingOf(this.fleet.get(event.pool, event.zone, event.pod)) !== before) this.onChange();
    return outcome;
  }

  recordRejected(): void {
    this.fleet.recordRejected();
  }
}
