import type { Logger } from 'pino';
import type { ReaderStatus } from '@spillway/bus';
import type { EppMetrics } from './metrics.js';

/** While the view is stale, one line at first and then one per interval, so an outage is visible but not noisy. */
const REPEAT_MS = 30_000;

/**
 * Logs the event view's age while it is stale (NATS unreachable, consumer lost, stream missing):
 * a line when it turns stale, one every 30 s while it stays so, and one when it is live again.
 * Readiness does not follow it: a picker with an aging view beats no picker.
 */
export class StaleViewLog {
  private staleSince: number | undefined;
  private lastLoggedAt = -Infinity;

  constructor(private readonly logger: Logger) {}

  /** `staleSince`: when the view stopped following the stream (ms), undefined while live. */
  update(staleSince: number | undefined, now: number, connection: string | undefined): void {
    if (staleSince === undefined) {
      if (this.staleSince !== undefined) this.logger.info({ staleForMs: now - this.staleSince }, 'event view is live again');
      this.staleSince = undefined;
      return;
    }
    if (this.staleSince === undefined) this.lastLoggedAt = -Infinity;
    this.staleSince = staleSince;
    if (now - this.lastLoggedAt < REPEAT_MS) return;
    this.lastLoggedAt = now;
    this.logger.warn({ staleForMs: now - staleSince, connection }, 'event view is stale; still picking from it');
  }
}

/**
 * The event view's state as metrics and log lines, from the event reader's status: connected,
 * caught up, and for how long the view has been stale.
 */
export class ViewStatus {
  private readonly staleLog: StaleViewLog;

  constructor(
    private readonly metrics: EppMetrics,
    logger: Logger,
  ) {
    this.staleLog = new StaleViewLog(logger);
  }

  /** `status` is undefined until NATS was first reached. */
  update(status: ReaderStatus | undefined, now: number): void {
    const staleFor = status?.staleSince === undefined ? 0 : now - status.staleSince;
    this.metrics.caughtUp.set(status?.caughtUp === true ? 1 : 0);
    this.metrics.natsConnected.set(status?.connection === 'connected' ? 1 : 0);
    this.metrics.viewStaleSeconds.set(staleFor / 1000);
    this.staleLog.update(status?.staleSince, now, status?.connection);
  }
}
