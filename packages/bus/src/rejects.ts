import type { DecodeErrorReason } from '@spillway/events';
import type { Logger } from './logger.js';

/**
 * Why a message never reached the view: a decode failure, the sink threw while applying it, or
 * the sink refused a valid event (`future`: dated too far ahead of its receive time;
 * `over-capacity`: a new pod in a zone that holds the most pods allowed; `too-many-zones`: a pod of
 * a new zone in a pool that holds the most zones allowed).
 */
export type RejectReason = DecodeErrorReason | 'apply-failed' | SinkRefusal;

/** The refusals a sink (the Fleet) reports as its apply outcome; the reader logs and counts them. */
export type SinkRefusal = 'future' | 'over-capacity' | 'too-many-zones';

/**
 * What a sink applied but wants an operator to see (the reader logs it like a refusal, and does not
 * count it as rejected): `address-conflict`, pods of more than one zone claim one address.
 */
export type SinkNotice = 'address-conflict';

export function isSinkRefusal(outcome: unknown): outcome is SinkRefusal {
  return outcome === 'future' || outcome === 'over-capacity' || outcome === 'too-many-zones';
}

export function isSinkNotice(outcome: unknown): outcome is SinkNotice {
  return outcome === 'address-conflict';
}

const LOG_INTERVAL_MS = 60_000;
/** Past this many remembered subjects, entries older than the interval are pruned. */
const MAX_REMEMBERED = 10_000;
/**
 * Lines per interval over all subjects: a publisher naming 100,000 pods must not write 100,000
 * lines a minute. Past it, lines are counted and one summary line says how many were left out.
 */
const MAX_LINES_PER_INTERVAL = 500;

/**
 * Counts dropped messages by reason and logs each subject at most once per minute, and
 * at most MAX_LINES_PER_INTERVAL lines a minute in all: a broken publisher re-sends every
 * interval, and one log line per sample would drown the logs.
 */
export class RejectLog {
  readonly byReason: Partial<Record<RejectReason, number>> = {};
  total = 0;
  private readonly lastLogged = new Map<string, number>();
  private windowStart = -Infinity;
  private linesInWindow = 0;
  private suppressed = 0;

  constructor(
    private readonly logger: Logger | undefined,
    private readonly pool: string,
  ) {}

  record(subject: string, reason: RejectReason, message: string, now: number): void {
    this.total++;
    this.byReason[reason] = (this.byReason[reason] ?? 0) + 1;
    this.log(subject, reason, message, now);
  }

  /** Logs (rate-limited like a rejection) an event that was applied but needs an operator's eye. */
  notice(subject: string, reason: SinkNotice, message: string, now: number): void {
    this.log(subject, reason, message, now);
  }

  private log(subject: string, reason: RejectReason | SinkNotice, message: string, now: number): void {
    if (!this.logger) return;
    const last = this.lastLogged.get(subject);
    if (last !== undefined && now - last < LOG_INTERVAL_MS) return;
    if (now - this.windowStart >= LOG_INTERVAL_MS) this.openWindow(now);
    if (this.linesInWindow >= MAX_LINES_PER_INTERVAL) {
      this.suppressed++;
      return;
    }
    this.linesInWindow++;
    if (this.lastLogged.size >= MAX_REMEMBERED) this.prune(now);
    this.lastLogged.set(subject, now);
    const headline = isSinkNotice(reason)
      ? 'applied an event with a conflict'
      : isSinkRefusal(reason)
        ? 'refused an event'
        : 'dropped a malformed event';
    this.logger.warn({ pool: this.pool, subject, reason, detail: message.slice(0, 500) }, headline);
  }

  private openWindow(now: number): void {
    if (this.suppressed > 0) {
      this.logger?.warn(
        { pool: this.pool, suppressed: this.suppressed, intervalMs: LOG_INTERVAL_MS },
        'more dropped events than log lines allowed; the rest were counted, not logged',
      );
    }
    this.windowStart = now;
    this.linesInWindow = 0;
    this.suppressed = 0;
  }

  private prune(now: number): void {
    for (const [subject, at] of this.lastLogged) {
      if (now - at >= LOG_INTERVAL_MS) this.lastLogged.delete(subject);
    }
    // Still full (every entry is recent): forget the lot rather than grow without bound.
    if (this.lastLogged.size >= MAX_REMEMBERED) this.lastLogged.clear();
  }
}
