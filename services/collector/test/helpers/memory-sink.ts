import type { MetricsEvent, ReadinessEvent } from '@spillway/events';
import type { EventSink } from '../../src/sink.js';

/** An in-memory EventSink that can pretend to be disconnected. */
export class MemorySink implements EventSink {
  readonly readiness: ReadinessEvent[] = [];
  readonly metrics: MetricsEvent[] = [];
  connected = true;
  private readonly listeners: (() => void)[] = [];

  publishReadiness(event: ReadinessEvent): Promise<void> {
    if (!this.connected) return Promise.reject(new Error('disconnected'));
    this.readiness.push(event);
    return Promise.resolve();
  }

  publishMetrics(event: MetricsEvent): boolean {
    if (!this.connected) return false;
    this.metrics.push(event);
    return true;
  }

  onReconnect(listener: () => void): void {
    this.listeners.push(listener);
  }

  reconnect(): void {
    this.connected = true;
    for (const l of this.listeners) l();
  }

  close(): Promise<void> {
    return Promise.resolve();
  }

  metricsOf(pod: string): MetricsEvent[] {
    return this.metrics.filter((e) => e.pod === pod);
  }

  lastReadiness(pod: string): ReadinessEvent | undefined {
    return this.readiness.filter((e) => e.pod === pod).at(-1);
  }
}
