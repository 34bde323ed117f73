import type { MetricsEvent, ReadinessEvent } from '@spillway/events';

/**
 * Where the collector's events go. The NATS implementation is `nats-sink.ts`; tests may use any
 * other. The collector validates every event before handing it over.
 */
export interface EventSink {
  /** Resolves once the stream has stored the event; rejects when it could not be published. */
  publishReadiness(event: ReadinessEvent): Promise<void>;
  /**
   * Fire and forget. Returns false when the sample was dropped because the connection is down:
   * samples are never queued, since a sample is worthless once the next one is taken.
   */
  publishMetrics(event: MetricsEvent): boolean;
  /** Called after the connection comes back, so the collector can re-publish readiness. */
  onReconnect(listener: () => void): void;
  close(): Promise<void>;
}
