import type { ReadinessEvent } from '@spillway/events';

/**
 * Publishes one pod's readiness events in order, newest wins. The stream keeps only the last
 * message per subject, so an older event whose retried publish lands after a newer one would
 * leave the wrong state behind; one publish at a time per pod prevents that, and while one is in
 * flight further events replace each other, so only the latest is sent next.
 */
export class LatestWinsQueue {
  private pending: ReadinessEvent | undefined;
  private running: Promise<void> | undefined;

  constructor(private readonly publish: (event: ReadinessEvent) => Promise<void>) {}

  push(event: ReadinessEvent): void {
    this.pending = event;
    this.running ??= this.drain();
  }

  get idle(): boolean {
    return this.running === undefined;
  }

  /** Resolves when nothing is queued or in flight. */
  async settled(): Promise<void> {
    while (this.running) await this.running;
  }

  private async drain(): Promise<void> {
    try {
      while (this.pending) {
        const next = this.pending;
        this.pending = undefined;
        await this.publish(next);
      }
    } finally {
      this.running = undefined;
    }
  }
}
