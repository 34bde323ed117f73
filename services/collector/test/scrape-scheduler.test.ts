import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { ScrapeScheduler, type SchedulerClock } from '../src/scrape-scheduler.js';

/**
 * The scheduler on a virtual clock: `advance` moves time on and runs what falls due, in order,
 * with `stall` holding the event loop (nothing runs while it is held, as under a long GC pause).
 */
class VirtualClock implements SchedulerClock {
  time = 0;
  private pending: { at: number; seq: number; fn: () => void }[] = [];
  private seq = 0;

  now(): number {
    return this.time;
  }

  wakeUps = 0;

  later(fn: () => void, ms: number): () => void {
    this.wakeUps++;
    const entry = { at: this.time + ms, seq: this.seq++, fn };
    this.pending.push(entry);
    return () => {
      this.pending = this.pending.filter((e) => e !== entry);
    };
  }

  /** Runs everything due up to `until`, in time order. */
  advance(until: number): void {
    for (;;) {
      this.pending.sort((a, b) => a.at - b.at || a.seq - b.seq);
      const first = this.pending[0];
      if (first === undefined || first.at > until) break;
      this.pending.shift();
      this.time = Math.max(this.time, first.at);
      first.fn();
    }
    this.time = until;
  }

  /** One turn of the event loop: what is due now runs; what that schedules waits for the next turn. */
  turn(): void {
    const due = this.pending.filter((e) => e.at <= this.time).sort((a, b) => a.at - b.at || a.seq - b.seq);
    this.pending = this.pending.filter((e) => e.at > this.time);
    for (const entry of due) entry.fn();
  }

  /** The loop is held for `ms`: time passes, nothing runs. */
  stall(ms: number): void {
    this.time += ms;
  }

  get waiting(): number {
    return this.pending.length;
  }
}

function setup(
  intervalMs: number,
  jobs: number,
): { clock: VirtualClock; scheduler: ScrapeScheduler; runs: number[][]; removers: (() => void)[] } {
  const clock = new VirtualClock();
  const scheduler = new ScrapeScheduler(intervalMs, clock);
  const runs: number[][] = Array.from({ length: jobs }, () => []);
  const removers = runs.map((times) => scheduler.add(() => times.push(clock.now())));
  return { clock, scheduler, runs, removers };
}

describe('ScrapeScheduler', () => {
  it('runs every scraper once per interval, spread evenly over it', () => {
    fc.assert(
      fc.property(fc.integer({ min: 1, max: 600 }), fc.constantFrom(100, 250, 1000, 50, 7), (jobs, intervalMs) => {
        const { clock, runs } = setup(intervalMs, jobs);
        const rounds = 5;
        clock.advance(rounds * intervalMs - 1e-9);
        for (const times of runs) {
          expect(times.length).toBe(rounds);
          // Each scraper keeps its phase: exactly one interval between its runs.
          for (let i = 1; i < times.length; i++) expect((times[i] as number) - (times[i - 1] as number)).toBeCloseTo(intervalMs, 6);
        }
        // Even: the starts of one interval, per millisecond slot, differ by at most one.
        const perSlot = new Map<number, number>();
        for (const times of runs) {
          const slot = Math.round(((times[0] as number) / intervalMs) * Math.min(100, Math.floor(intervalMs)));
          perSlot.set(slot, (perSlot.get(slot) ?? 0) + 1);
        }
        const counts = [...perSlot.values()];
        const slots = Math.min(100, Math.floor(intervalMs), jobs);
        expect(perSlot.size).toBe(slots);
        expect(Math.max(...counts) - Math.min(...counts)).toBeLessThanOrEqual(1);
      }),
      { numRuns: 60, seed: 37 },
    );
  });

  it('after a stall, catches up one slot per turn and never runs a scraper twice for one interval', () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 1, max: 300 }),
        fc.integer({ min: 1, max: 450 }),
        fc.integer({ min: 0, max: 99 }),
        (jobs, stallMs, stallAt) => {
          const { clock, runs } = setup(100, jobs);
          clock.advance(stallAt);
          clock.stall(stallMs);
          // One turn of the loop: at most one slot's scrapers start in it.
          const before = runs.map((t) => t.length);
          clock.turn();
          const started = runs.filter((t, i) => t.length > (before[i] as number)).length;
          expect(started).toBeLessThanOrEqual(Math.ceil(jobs / 100));
          const end = clock.now() + 1_000;
          clock.advance(end);
          // Over [0, end] each scraper ran at most once per interval it spanned, and was not starved.
          for (const times of runs) {
            for (let i = 1; i < times.length; i++) expect((times[i] as number) - (times[i - 1] as number)).toBeGreaterThan(0);
            expect(times.length).toBeLessThanOrEqual(Math.ceil(end / 100) + 1);
            expect(times.length).toBeGreaterThanOrEqual(Math.floor((end - stallAt - stallMs) / 100) - 1);
          }
        },
      ),
      { numRuns: 200, seed: 38 },
    );
  });

  it('a removed scraper never runs again; with none left the timer stops, and one added later starts it again', () => {
    const { clock, scheduler, runs, removers } = setup(100, 3);
    clock.advance(150);
    const counts = runs.map((t) => t.length);
    removers[1]?.();
    clock.advance(1_000);
    expect(runs[1]?.length).toBe(counts[1]);
    expect(runs[0]?.length).toBeGreaterThan(counts[0] as number);
    removers[0]?.();
    removers[2]?.();
    removers[2]?.();
    expect(clock.waiting).toBe(0);
    const later: number[] = [];
    scheduler.add(() => later.push(clock.now()));
    clock.advance(2_000);
    expect(later.length).toBe(10);
    scheduler.stop();
    clock.advance(3_000);
    expect(later.length).toBe(10);
    expect(clock.waiting).toBe(0);
    // Added after stop: never runs.
    scheduler.add(() => later.push(clock.now()));
    clock.advance(4_000);
    expect(later.length).toBe(10);
  });

  it('wakes only for slots that hold a scraper', () => {
    const { clock, runs } = setup(100, 3);
    clock.advance(1_000 - 1e-9);
    expect(runs.map((t) => t.length)).toEqual([10, 10, 10]);
    expect(clock.wakeUps).toBeLessThanOrEqual(31);
  });
});
