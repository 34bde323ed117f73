/**
 * Request-phase deadlines for every open stream, checked by one timer instead of a timer per
 * stream (a Node timer costs a few microseconds to arm and disarm on the request path).
 * Resolution is the sweep interval: a deadline fires up to `sweepMs` late, which is fine for a
 * limit measured in tens of seconds.
 */
export interface Deadline {
  at: number;
  expire(): void;
}

export class DeadlineSweeper {
  private readonly pending = new Set<Deadline>();
  private readonly timer: NodeJS.Timeout;

  constructor(
    private readonly now: () => number = Date.now,
    sweepMs = 250,
  ) {
    this.timer = setInterval(() => this.sweep(), sweepMs);
    this.timer.unref();
  }

  add(deadline: Deadline): void {
    this.pending.add(deadline);
  }

  remove(deadline: Deadline): void {
    this.pending.delete(deadline);
  }

  get size(): number {
    return this.pending.size;
  }

  sweep(): void {
    const now = this.now();
    for (const deadline of this.pending) {
      if (deadline.at <= now) {
        this.pending.delete(deadline);
        deadline.expire();
      }
    }
  }

  close(): void {
    clearInterval(this.timer);
    this.pending.clear();
  }
}
