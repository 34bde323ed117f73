import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client';

export type ScrapeFailureReason = 'timeout' | 'connect' | 'http-status' | 'too-large' | 'too-slow' | 'parse' | 'invalid' | 'unknown-engine';
export type EndpointState = 'ready' | 'not-ready' | 'unknown' | 'scrape-failing';

/** The collector's own Prometheus metrics, in a registry of its own (tests run several collectors). */
export class CollectorMetrics {
  readonly registry = new Registry();
  readonly scrapeDuration: Histogram<'engine'>;
  readonly scrapeFailures: Counter<'reason'>;
  readonly scrapesSkipped: Counter;
  readonly eventsPublished: Counter<'kind'>;
  readonly eventsDropped: Counter<'kind' | 'reason'>;
  readonly probeFailures: Counter<'reason'>;
  readonly endpoints: Gauge<'state'>;
  readonly sourceErrors: Counter<'source'>;
  readonly ratesOmitted: Counter<'reason'>;
  readonly kvBatchesReceived: Counter;
  readonly kvBatchesPublished: Counter;
  readonly kvEventsRelayed: Counter<'type'>;
  readonly kvDropped: Counter<'reason'>;
  readonly kvSkippedBlocks: Counter<'reason'>;
  readonly kvGaps: Counter<'handling'>;
  readonly kvSnapshots: Counter;
  readonly kvConnections: Counter<'event'>;
  readonly kvEndpoints: Gauge;
  readonly kvBlocks: Gauge;
  readonly kvMapBytes: Gauge;
  readonly kvPartialPods: Gauge;

  constructor(options: { defaultMetrics?: boolean } = {}) {
    const registers = [this.registry];
    this.scrapeDuration = new Histogram({
      name: 'spillway_collector_scrape_duration_seconds',
      help: 'Time from the start of a /metrics scrape to its event being handed to NATS (or rejected).',
      labelNames: ['engine'],
      buckets: [0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2],
      registers,
    });
    this.scrapeFailures = new Counter({
      name: 'spillway_collector_scrape_failures_total',
      help: 'Scrapes that produced no event, by reason (malformed expositions are parse or invalid; over the byte or CPU budget too-large or too-slow).',
      labelNames: ['reason'],
      registers,
    });
    this.scrapesSkipped = new Counter({
      name: 'spillway_collector_scrapes_skipped_total',
      help: 'Sample ticks skipped because the previous scrape of that endpoint was still running.',
      registers,
    });
    this.eventsPublished = new Counter({
      name: 'spillway_collector_events_published_total',
      help: 'Events handed to NATS, by kind.',
      labelNames: ['kind'],
      registers,
    });
    this.eventsDropped = new Counter({
      name: 'spillway_collector_events_dropped_total',
      help: 'Events not published, by kind and reason (disconnected, invalid, publish-failed).',
      labelNames: ['kind', 'reason'],
      registers,
    });
    this.probeFailures = new Counter({
      name: 'spillway_collector_probe_failures_total',
      help: 'Failed health probes, by reason.',
      labelNames: ['reason'],
      registers,
    });
    this.endpoints = new Gauge({
      name: 'spillway_collector_endpoints',
      help: 'Endpoints by state.',
      labelNames: ['state'],
      registers,
    });
    this.sourceErrors = new Counter({
      name: 'spillway_collector_source_errors_total',
      help: 'Errors reading a readiness source (endpoints file, Kubernetes watch).',
      labelNames: ['source'],
      registers,
    });
    this.ratesOmitted = new Counter({
      name: 'spillway_collector_rates_omitted_total',
      help: 'Samples published without service rates because of the counters: invalid-counter (NaN, Inf or negative), counter-reset (a server restart), out-of-range.',
      labelNames: ['reason'],
      registers,
    });
    this.kvBatchesReceived = new Counter({
      name: 'spillway_collector_kv_batches_received_total',
      help: 'KV-event batches received from model servers (ZeroMQ messages, TensorRT-LLM queue answers), before validation.',
      registers,
    });
    this.kvBatchesPublished = new Counter({
      name: 'spillway_collector_kv_batches_published_total',
      help: 'Relayed KV batches published on spillway.kv.<pool>.<zone>.<pod>.',
      registers,
    });
    this.kvEventsRelayed = new Counter({
      name: 'spillway_collector_kv_events_relayed_total',
      help: 'Events in relayed KV batches, by type (stored, removed, cleared).',
      labelNames: ['type'],
      registers,
    });
    this.kvDropped = new Counter({
      name: 'spillway_collector_kv_dropped_total',
      help: 'KV-event batches (or events, for unknown-tag) dropped, by reason: not-msgpack, not-json, too-complex (nested deeper or holding more values than any valid batch, refused before decoding), malformed, oversized, too-many-events, too-many-hashes, too-many-tokens, bad-frames, bad-seq, unknown-tag, nats-down.',
      labelNames: ['reason'],
      registers,
    });
    this.kvSkippedBlocks = new Counter({
      name: 'spillway_collector_kv_skipped_blocks_total',
      help: "Blocks of valid KV events not relayed as cached, by reason: orphan (parent unknown), token-mismatch, other-medium (CPU, disk or remote tiers), other-group (a hybrid model's sliding-window or Mamba group), extra-keys (multimodal or salted blocks no request can match), unnamed-lora, pod-overflow (forgotten at the per-pod byte bound).",
      labelNames: ['reason'],
      registers,
    });
    this.kvGaps = new Counter({
      name: 'spillway_collector_kv_gaps_total',
      help: 'KV-event sequence gaps and server restarts, by how they were handled: replay (recovered from the replay socket), replay-tail (the replay buffer no longer reached back: started afresh at its oldest batch and replayed from there), cleared (started afresh), restart (the server numbered from 0 again), reconnect (the connection dropped: started afresh).',
      labelNames: ['handling'],
      registers,
    });
    this.kvSnapshots = new Counter({
      name: 'spillway_collector_kv_snapshots_published_total',
      help: 'Per-pod KV snapshots published into the stream.',
      registers,
    });
    this.kvConnections = new Counter({
      name: 'spillway_collector_kv_connection_events_total',
      help: 'ZeroMQ connection events of the KV subscriptions: connect, disconnect, retry.',
      labelNames: ['event'],
      registers,
    });
    this.kvEndpoints = new Gauge({
      name: 'spillway_collector_kv_endpoints',
      help: 'Model servers whose KV events are followed.',
      registers,
    });
    this.kvBlocks = new Gauge({
      name: 'spillway_collector_kv_blocks',
      help: 'Blocks the KV relay maps (server hash to content key), over all pods.',
      registers,
    });
    this.kvMapBytes = new Gauge({
      name: 'spillway_collector_kv_map_bytes',
      help: 'Estimated bytes of the KV relay maps, over all pods (each bounded by --kv-max-bytes-per-pod).',
      registers,
    });
    this.kvPartialPods = new Gauge({
      name: 'spillway_collector_kv_partial_pods',
      help: 'Pods whose KV relay does not know every block the server holds (its view began after the server stored them; EPPs price them by both prefix indexes).',
      registers,
    });
    if (options.defaultMetrics) collectDefaultMetrics({ register: this.registry, prefix: 'spillway_collector_' });
  }
}
