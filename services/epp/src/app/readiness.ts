import type { Logger } from 'pino';
import type { ReaderStatus } from '@spillway/bus';
import type { ViewStatus } from '../telemetry/view-staleness.js';
import type { HealthState } from './health.js';

/**
 * When the EPP reports ready (docs/hardening.md): SERVING once the first replay caught up and the
 * shared-state warm start is over (when sharing is on), and it stays so: a NATS outage never stops
 * picking, the EPP keeps serving its last view and exports and logs the view's age.
 */
export class Readiness {
  /** Resolves once the EPP reports ready. */
  readonly ready: Promise<void>;
  private markReady!: () => void;
  private warm: boolean;
  /** Set by drain(): never ready again. */
  private draining = false;

  constructor(
    private readonly health: HealthState,
    private readonly view: ViewStatus,
    private readonly logger: Logger,
    /** Whether readiness waits for a shared-state warm start (sharing on). */
    warmStart: boolean,
  ) {
    this.warm = !warmStart;
    this.ready = new Promise<void>((resolve) => (this.markReady = resolve));
  }

  /** Re-evaluated on a timer and at each step of the start; also refreshes the view's age. */
  evaluate(status: ReaderStatus | undefined): void {
    this.view.update(status, Date.now());
    if (status?.caughtUp === true && this.warm && !this.draining && !this.health.isReady) {
      this.logger.info('ready');
      this.health.setReady(true);
      this.markReady();
    }
  }

  /** The replay caught up: ready now rather than at the next tick (the time to SERVING is what a rollout waits on). */
  replayCaughtUp(status: ReaderStatus | undefined): void {
    if (this.warm) this.evaluate(status);
  }

  /** The shared-state warm start is over (peers answered, the deadline passed, or the EPP is alone). */
  warmStartOver(status: ReaderStatus | undefined): void {
    this.warm = true;
    this.evaluate(status);
  }

  /**
   * A graceful stop began: NOT_SERVING from now on (on both ports: they share the state), while
   * health Watch streams stay open to tell their watchers. Returns whether it was serving.
   */
  drain(): boolean {
    const wasReady = this.health.isReady;
    this.draining = true;
    this.health.setReady(false);
    return wasReady;
  }

  /** Shutdown: NOT_SERVING, and every health Watch stream ended so the servers can close. */
  close(): void {
    this.health.setReady(false);
    this.health.closeWatchers();
  }
}
