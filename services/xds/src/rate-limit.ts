/**
 * Once per key per interval: what a thousand nodes rejecting the same push, or reconnecting with
 * the same bad zone, may write to the log. The keys held are bounded: past `maxKeys` the memory
 * starts over (a few repeated lines, never unbounded growth).
 */
export class RateLimiter {
  private readonly last = new Map<string, number>();

  constructor(
    private readonly intervalMs: number,
    private readonly maxKeys = 1024,
  ) {}

  /** True when `key` was not let through in the last interval (and records it now). */
  allow(key: string, now: number): boolean {
    const previous = this.last.get(key);
    if (previous !== undefined && now - previous < this.intervalMs) return false;
    if (this.last.size >= this.maxKeys) this.last.clear();
    this.last.set(key, now);
    return true;
  }
}
