import { zoneFilter } from '@spillway/events';
import type { Server } from 'node:http';
import { pino, type Logger } from 'pino';
import { Collector } from './collector.js';
import type { CollectorConfig } from './config.js';
import { loadEndpointsFile, watchEndpointsFile, type EndpointsFileWatcher } from './endpoints-file.js';
import { createAgent } from './http-get.js';
import { startKubeSource, type KubeSource } from './kube-source.js';
import { startMetricsServer } from './metrics-server.js';
import { DEFAULT_VLLM_KV_LIMITS } from '@spillway/events';
import { KvRelay, type KvSink } from './kv-relay.js';
import { NatsSink } from './nats-sink.js';
import { CollectorMetrics } from './self-metrics.js';
import type { EventSink } from './sink.js';
import { readFile } from 'node:fs/promises';

export interface RunningCollector {
  collector: Collector;
  /** The KV-event relay (undefined when the sink cannot publish KV batches). */
  kvRelay: KvRelay | undefined;
  metrics: CollectorMetrics;
  /** The bound port of the collector's own /metrics (undefined when off). */
  metricsPort: number | undefined;
  stop(): Promise<void>;
}

export interface StartOptions {
  logger?: Logger;
  /** Use this sink instead of NATS (tests, benchmarks). */
  sink?: EventSink;
  /** Where relayed KV events go with a custom `sink` (default: the NATS sink; none with a custom sink). */
  kvSink?: KvSink;
  /** Register Node's default process metrics (the binary does; in-process tests do not). */
  defaultMetrics?: boolean;
  onMetricsPublished?: ConstructorParameters<typeof Collector>[0]['onMetricsPublished'];
}

/**
 * Wires a configured collector: its sink, its readiness sources and its own metrics endpoint.
 * A bad endpoints file at startup throws (the binary exits naming `--endpoints`); later bad edits
 * are logged and counted and the last good list stays.
 */
export async function startCollector(config: CollectorConfig, options: StartOptions = {}): Promise<RunningCollector> {
  const logger =
    options.logger ?? pino({ level: config.logLevel, base: { service: 'spillway-collector', pool: config.pool, zone: config.zone } });
  const metrics = new CollectorMetrics({ defaultMetrics: options.defaultMetrics ?? false });
  const defaults = { zone: config.zone, region: config.region };

  // Read the file first, so a bad one fails the start before anything is published.
  let initialText: string | undefined;
  let initial;
  if (config.endpointsFile !== undefined) {
    initial = await loadEndpointsFile(config.endpointsFile, defaults);
    initialText = await readFile(config.endpointsFile, 'utf8').catch(() => undefined);
  }

  const natsSink = options.sink
    ? undefined
    : new NatsSink({ settings: config.nats, stream: config.stream, requiredSubjects: [zoneFilter(config.pool, config.zone)], logger });
  const sink = options.sink ?? (natsSink as NatsSink);
  const kvSink = options.kvSink ?? natsSink;
  const dispatcher = createAgent();
  const kvRelay =
    kvSink &&
    new KvRelay({
      pool: config.pool,
      limits: { ...DEFAULT_VLLM_KV_LIMITS, maxPayloadBytes: config.kv.maxBatchBytes },
      maxBytesPerPod: config.kv.maxBytesPerPod,
      snapshotIntervalMs: config.kv.snapshotIntervalMs,
      replayTimeoutMs: config.kv.replayTimeoutMs,
      reconnectMs: 100,
      reconnectMaxMs: config.kv.reconnectMaxMs,
      topic: config.kv.topic,
      eventsPort: config.kv.eventsPort,
      replayPort: config.kv.replayPort,
      format: config.kv.format,
      dataParallelSize: config.kv.dataParallelSize,
      pollIntervalMs: config.kv.pollIntervalMs,
      dispatcher,
      sink: kvSink,
      logger,
      metrics,
    });
  const collector = new Collector({
    pool: config.pool,
    defaultEngine: config.engine,
    sampleIntervalMs: config.sampleIntervalMs,
    scrapeTimeoutMs: config.scrapeTimeoutMs,
    scrapeFailureThreshold: config.scrapeFailureThreshold,
    scrapeBackoffMaxMs: config.scrapeBackoffMaxMs,
    scrapeLimits: config.scrapeLimits,
    ratesWindowMs: config.ratesWindowMs,
    metricsPath: config.metricsPath,
    probe: config.probe,
    readinessRepublishMs: config.readinessRepublishMs,
    sink,
    dispatcher,
    logger,
    metrics,
    onMetricsPublished: options.onMetricsPublished,
    onEndpoints: kvRelay && ((endpoints) => kvRelay.setEndpoints(endpoints)),
    onCacheSize: kvRelay && ((pod, numBlocks) => kvRelay.setCacheBlocks(pod, numBlocks)),
  });
  collector.start();

  let watcher: EndpointsFileWatcher | undefined;
  if (config.endpointsFile !== undefined && initial) {
    collector.setEndpoints('file', initial);
    logger.info({ file: config.endpointsFile, endpoints: initial.length }, 'endpoints file loaded');
    watcher = watchEndpointsFile({
      path: config.endpointsFile,
      defaults,
      pollMs: config.endpointsPollMs,
      onChange: (endpoints) => {
        logger.info({ file: config.endpointsFile, endpoints: endpoints.length }, 'endpoints file changed');
        collector.setEndpoints('file', endpoints);
      },
      onError: (error) => {
        metrics.sourceErrors.inc({ source: 'file' });
        logger.error({ file: config.endpointsFile, error: error.message }, 'endpoints file rejected; keeping the last good list');
      },
      initialText,
    });
  }

  let kube: KubeSource | undefined;
  if (config.kube) {
    kube = await startKubeSource(
      {
        namespace: config.kube.namespace,
        labelSelector: config.kube.selector,
        kubeconfig: config.kube.kubeconfig,
        zone: config.zone,
        region: config.region,
        portName: config.kube.port,
        allZones: config.kube.allZones,
        kvEventsPortName: config.kv.kubeEventsPort,
        kvReplayPortName: config.kv.kubeReplayPort,
      },
      logger,
      (endpoints) => collector.setEndpoints('kube', endpoints),
      (error) => {
        metrics.sourceErrors.inc({ source: 'kube' });
        logger.warn({ error: error.message }, 'EndpointSlice watch failed; restarting');
      },
    );
  }

  let server: Server | undefined;
  let metricsPort: number | undefined;
  if (config.metricsPort > 0) {
    ({ server, port: metricsPort } = await startMetricsServer(metrics.registry, config.metricsPort, config.metricsHost));
    logger.info({ host: config.metricsHost, port: metricsPort }, 'collector metrics on /metrics');
  }

  return {
    collector,
    kvRelay,
    metrics,
    metricsPort,
    async stop() {
      watcher?.stop();
      await kube?.stop();
      kvRelay?.stop();
      // Probing stops at once; queued readiness publishes are waited for. While NATS is there they
      // go out; without it they could only wait (and retry) for a server that is gone, so the sink
      // closes first and they fail at once.
      const stopping = collector.stop();
      if (natsSink !== undefined && !natsSink.isConnected) await natsSink.close();
      await stopping;
      await sink.close();
      // destroy, not close: a scrape of a hung server must not hold up shutdown.
      await dispatcher.destroy();
      await new Promise<void>((resolve) => (server ? server.close(() => resolve()) : resolve()));
    },
  };
}
