/**
 * spillway-xds's Prometheus metrics (docs/xds.md, "Metrics"). The hub and the view keep plain
 * counters; these read them when Prometheus scrapes, so nothing on the push path touches prom-client.
 */
import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client';
import type { Fleet } from '@spillway/fleet';
import type { ReaderStatus } from '@spillway/bus';
import type { XdsHub } from './hub.js';

export interface MetricSources {
  hub: XdsHub;
  fleet: Fleet;
  pool: string;
  reader(): ReaderStatus | undefined;
}

/** A prom-client counter advanced to an absolute count read elsewhere (labels from a small fixed set). */
function mirror(counter: Counter<string>, label: string): (counts: ReadonlyMap<string, number>) => void {
  const seen = new Map<string, number>();
  return (counts) => {
    for (const [key, value] of counts) {
      const delta = value - (seen.get(key) ?? 0);
      if (delta > 0) counter.inc({ [label]: key }, delta);
      seen.set(key, value);
    }
  };
}

export class XdsMetrics {
  readonly registry = new Registry();
  readonly pushSeconds: Histogram;

  constructor(sources: MetricSources) {
    const { hub, fleet } = sources;
    const registers = [this.registry];
    const responses = new Counter({
      name: 'spillway_xds_responses_total',
      help: 'Discovery responses sent, by resource type (eds, ecds, lds, rds, cds, other).',
      labelNames: ['type'],
      registers,
      collect: () => mirrorResponses(hub.counters.responses),
    });
    const mirrorResponses = mirror(responses, 'type');
    const acks = new Counter({
      name: 'spillway_xds_acks_total',
      help: 'Responses the nodes accepted (ACK), by resource type.',
      labelNames: ['type'],
      registers,
      collect: () => mirrorAcks(hub.counters.acks),
    });
    const mirrorAcks = mirror(acks, 'type');
    const nacks = new Counter({
      name: 'spillway_xds_nacks_total',
      help: 'Responses a node rejected (NACK; it keeps its last good version and the rejected one is not sent to it again), by resource type.',
      labelNames: ['type'],
      registers,
      collect: () => mirrorNacks(hub.counters.nacks),
    });
    const mirrorNacks = mirror(nacks, 'type');
    const refused = new Counter({
      name: 'spillway_xds_refused_streams_total',
      help: 'Streams ended by spillway-xds, by reason (unknown-zone, no-zone, no-node, capacity, node-bytes, ...).',
      labelNames: ['reason'],
      registers,
      collect: () => mirrorRefused(hub.counters.refused),
    });
    const mirrorRefused = mirror(refused, 'reason');
    let staleSeen = 0;
    new Counter({
      name: 'spillway_xds_stale_requests_total',
      help: 'Requests ignored because they answered a response older than the last one sent (normal while a push crosses a request).',
      registers,
      collect() {
        this.inc(hub.counters.stale - staleSeen);
        staleSeen = hub.counters.stale;
      },
    });
    new Gauge({
      name: 'spillway_xds_connected_nodes',
      help: 'Connected nodes by zone (nodes still waiting for the first replay to catch up are zone "").',
      labelNames: ['zone'],
      registers,
      collect() {
        this.reset();
        let placed = 0;
        for (const [zone, count] of hub.nodesByZone()) {
          this.set({ zone }, count);
          placed += count;
        }
        this.set({ zone: '' }, hub.nodeCount - placed);
      },
    });
    new Gauge({
      name: 'spillway_xds_state_bytes',
      help: "Accounted bytes of state: node = all nodes' subscriptions, node_max = the largest node's, resources = the encoded resources shared by each place (zone, stated region).",
      labelNames: ['part'],
      registers,
      collect() {
        const memory = hub.memory();
        this.set({ part: 'node' }, memory.nodeBytes);
        this.set({ part: 'node_max' }, memory.maxNodeBytes);
        this.set({ part: 'resources' }, memory.placeBytes);
      },
    });
    new Gauge({
      name: 'spillway_xds_view_ready_pods',
      help: 'Routable pods of the pool in the view.',
      registers,
      collect() {
        this.set(fleet.pool(sources.pool)?.readyCount ?? 0);
      },
    });
    new Gauge({
      name: 'spillway_xds_caught_up',
      help: '1 once the first replay of the stream has caught up (before that, requests are held).',
      registers,
      collect() {
        this.set(sources.reader()?.caughtUp === true ? 1 : 0);
      },
    });
    new Gauge({
      name: 'spillway_xds_nats_connected',
      help: '1 while connected to NATS (the view keeps serving while disconnected).',
      registers,
      collect() {
        this.set(sources.reader()?.connection === 'connected' ? 1 : 0);
      },
    });
    const events = new Counter({
      name: 'spillway_xds_events_total',
      help: 'Events read from the stream, by outcome (applied, ignored as old, rejected as malformed, future-dated, over capacity).',
      labelNames: ['outcome'],
      registers,
      collect: () =>
        mirrorEvents(
          new Map([
            ['applied', fleet.counters.applied],
            ['ignored', fleet.counters.ignored],
            ['rejected', fleet.counters.rejected],
            ['future', fleet.counters.future],
            ['over-capacity', fleet.counters.overCapacity],
          ]),
        ),
    });
    const mirrorEvents = mirror(events, 'outcome');
    this.pushSeconds = new Histogram({
      name: 'spillway_xds_push_seconds',
      help: 'From the first readiness change of a batch to the end of writing its responses (includes the --push-delay-ms wait).',
      buckets: [0.01, 0.025, 0.05, 0.1, 0.15, 0.2, 0.3, 0.5, 1, 2, 5],
      registers,
    });
    collectDefaultMetrics({ register: this.registry });
  }
}
