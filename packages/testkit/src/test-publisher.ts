import { connect, type NatsConnection } from '@nats-io/transport-node';
import { EventPublisher } from '@spillway/bus';
import type { MetricsEvent, ReadinessEvent } from '@spillway/events';

/** The pool every test publisher speaks for. */
export const POOL = 'llama';

export interface PodSpec {
  pod: string;
  zone: string;
  address: string;
  region?: string;
  waiting?: number;
  running?: number;
  kv?: number;
  ready?: boolean;
}

/**
 * Publishes readiness and a fresh metrics sample for each pod, as a collector would. Samples
 * published without a time are dated by a clock that never repeats: two samples within one
 * millisecond would otherwise tie, and the view settles a tie by payload (the later sample could
 * lose), where a collector's successive scrapes are always later than the one before.
 */
export class TestPublisher {
  private lastAt = 0;

  private constructor(
    readonly nc: NatsConnection,
    readonly publisher: EventPublisher,
  ) {}

  static async connect(url: string): Promise<TestPublisher> {
    const nc = await connect({ servers: url });
    return new TestPublisher(nc, new EventPublisher(nc));
  }

  async pods(specs: PodSpec[], at = this.now()): Promise<void> {
    for (const spec of specs) {
      const readiness: ReadinessEvent = {
        v: 1,
        kind: 'readiness',
        pool: POOL,
        zone: spec.zone,
        pod: spec.pod,
        address: spec.address,
        ready: spec.ready ?? true,
        observedAt: at,
        ...(spec.region ? { region: spec.region } : {}),
      };
      await this.publisher.publishReadiness(readiness);
      this.metrics(spec, at);
    }
    await this.nc.flush();
  }

  metrics(spec: PodSpec, at = this.now()): void {
    const event: MetricsEvent = {
      v: 1,
      kind: 'metrics',
      pool: POOL,
      zone: spec.zone,
      pod: spec.pod,
      observedAt: at,
      waitingRequests: spec.waiting ?? 0,
      runningRequests: spec.running ?? 0,
      kvCacheUsage: spec.kv ?? 0,
    };
    this.publisher.publishMetrics(event);
  }

  /** Now, or a millisecond after the last time this clock gave, whichever is later. */
  now(): number {
    this.lastAt = Math.max(Date.now(), this.lastAt + 1);
    return this.lastAt;
  }

  async close(): Promise<void> {
    await this.nc.close();
  }
}
