/** The clock and timers a ScrapeScheduler runs on (real ones by default; tests pass virtual ones). */
export interface SchedulerClock {
  now(): number;
  /** Calls `fn` after `ms` (0: as soon as pending I/O has been handled). */
  later(fn: () => void, ms: number): () => void;
}

const realClock: SchedulerClock = {
  now: () => performance.now(),
  later: (fn, ms) => {
    if (ms <= 0) {
      const immediate = setImmediate(fn);
      return () => clearImmediate(immediate);
    }
    const timer = setTimeout(fn, ms);
    return () => clearTimeout(timer);
  },
};

/** How many slots an interval is cut into at most (a 100 ms interval: one slot a millisecond). */
const MAX_SLOTS = 100;

/**
 * Runs every scraper's tick once per interval from one timer, the scrapers spread evenly over the
 * interval. Why: with a timer per scraper at a random phase, the starts clump (random phases are
 * uneven), and whenever the event loop was held up — a GC pause, a burst of answers — every timer
 * that fell due in the meantime fired in the same turn, so hundreds of requests went out together
 * and their answers queued behind each other: the lag from a scrape's start to its event grew with
 * the burst. Here the interval is cut into slots (one per millisecond at 100 ms), each scraper is
 * put in the emptiest slot, and the slots run in order, one slot per turn of the event loop: a
 * late loop catches up slot by slot, with the answers of one slot handled before the next starts,
 * rather than all at once. A scraper whose slot is missed by a whole interval or more runs once,
 * not once per interval missed (as a late setInterval).
 */
export class ScrapeScheduler {
  private readonly slots: Set<() => void>[];
  private readonly slotMs: number;
  private jobs = 0;
  /** The number of the next slot to run, counted from `epoch` (slot n runs at epoch + n × slotMs). */
  private next = 0;
  private epoch = 0;
  private cancel: (() => void) | undefined;
  private stopped = false;

  constructor(
    intervalMs: number,
    private readonly clock: SchedulerClock = realClock,
  ) {
    const count = Math.max(1, Math.min(MAX_SLOTS, Math.floor(intervalMs)));
    this.slots = Array.from({ length: count }, () => new Set());
    this.slotMs = intervalMs / count;
  }

  /** Runs `tick` once per interval from now on, in the emptiest slot; returns what stops it. */
  add(tick: () => void): () => void {
    if (this.stopped) return () => undefined;
    let slot = this.slots[this.next % this.slots.length] as Set<() => void>;
    // The emptiest slot, searched from the next one to run, so a new scraper starts soon.
    for (let i = 0; i < this.slots.length; i++) {
      const candidate = this.slots[(this.next + i) % this.slots.length] as Set<() => void>;
      if (candidate.size < slot.size) slot = candidate;
    }
    // Each call is its own job, even for the same function.
    const job = (): void => tick();
    slot.add(job);
    this.jobs++;
    if (this.cancel === undefined) this.resume();
    return () => {
      if (!slot.delete(job)) return;
      this.jobs--;
      if (this.jobs === 0) this.pause();
    };
  }

  /** Stops for good: nothing runs after this, and nothing added later ever will. */
  stop(): void {
    this.stopped = true;
    this.pause();
  }

  private resume(): void {
    this.epoch = this.clock.now();
    this.next = 0;
    this.schedule();
  }

  private pause(): void {
    this.cancel?.();
    this.cancel = undefined;
  }

  private schedule(): void {
    // No wake-up for a slot with nothing in it (a handful of endpoints need not cost 1000 timers a second).
    const count = this.slots.length;
    for (let i = 0; i < count && (this.slots[this.next % count] as Set<() => void>).size === 0; i++) this.next++;
    const wait = this.epoch + this.next * this.slotMs - this.clock.now();
    this.cancel = this.clock.later(() => this.run(), Math.max(0, Math.ceil(wait)));
  }

  private run(): void {
    this.cancel = undefined;
    const due = Math.floor((this.clock.now() - this.epoch) / this.slotMs);
    // More than a whole interval behind: the missed rounds are dropped, each scraper runs once.
    if (due - this.next >= this.slots.length) this.next = due - this.slots.length + 1;
    if (this.next <= due) {
      const slot = this.slots[this.next % this.slots.length] as Set<() => void>;
      this.next++;
      for (const job of slot) job();
    }
    if (this.jobs > 0 && this.cancel === undefined && !this.stopped) this.schedule();
  }
}
