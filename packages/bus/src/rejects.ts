import type { DecodeErrorReason } from '@spillway/events';
import type { Logger } from './logger.js';

/** Why a message never reached the view: a decode failure, or the sink threw while applying it. */
export type RejectReason = DecodeErrorReason | 'apply-failed';

const LOG_INTERVAL_MS = 60_000;
/** Past this many remembered subjects, entries older than the interval are pruned. */
const MAX_REMEMBERED = 10_000;

/**
 * Counts malformed messages by reason and logs each subject at most once per minute (DESIGN §3):
 * a broken publisher re-sends every interval, and one log line per sample would drown the logs.
 */
export class RejectLog {
  readonly byReason: Partial<Record<RejectReason, number>> = {};
  total = 0;
  private readonly lastLogged = new Map<string, number>();

  constructor(
    private readonly logger: Logger | undefined,
    private readonly pool: string,
  ) {}

  record(subject: string, reason: RejectReason, message: string, now: number): void {
    this.total++;
    this.byReason[reason] = (this.byReason[reason] ?? 0) + 1;
    if (!this.logger) return;
    const last = this.lastLogged.get(subject);
    if (last !== undefined && now - last < LOG_INTERVAL_MS) return;
    if (this.lastLogged.size >= MAX_REMEMBERED) this.prune(now);
    this.lastLogged.set(subject, now);
    this.logger.warn({ pool: this.pool, subject, reason, detail: message.slice(0, 500) }, 'dropped a malformed event');
  }

  private prune(now: number): void {
    for (const [subject, at] of this.lastLogged) {
      if (now - at >= LOG_INTERVAL_MS) this.lastLogged.delete(subject);
    }
    // Still full (every entry is recent): forget the lot rather than grow without bound.
    if (this.lastLogged.size >= MAX_REMEMBERED) this.lastLogged.clear();
  }
}
