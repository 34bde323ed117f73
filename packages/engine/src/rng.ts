/**
 * Seeded pseudo-random numbers (mulberry32). The engine never touches Math.random, so a run is
 * reproducible from its seed in real and virtual time alike. 32 bits of state is plenty for
 * latency jitter and synthetic workloads; this is not for cryptography.
 */
export class Rng {
  private state: number;
  /** Box–Muller yields normals in pairs; the second one is kept for the next call. */
  private spare = Number.NaN;

  constructor(seed: number) {
    this.state = seed >>> 0;
  }

  /** Uniform in [0, 1). */
  next(): number {
    this.state = (this.state + 0x6d2b79f5) | 0;
    let t = this.state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  }

  /** Integer in [0, n). */
  int(n: number): number {
    return Math.floor(this.next() * n);
  }

  /** Standard normal sample. */
  gaussian(): number {
    if (!Number.isNaN(this.spare)) {
      const s = this.spare;
      this.spare = Number.NaN;
      return s;
    }
    // 1 - next() is in (0, 1], so the logarithm is finite.
    const r = Math.sqrt(-2 * Math.log(1 - this.next()));
    const theta = 2 * Math.PI * this.next();
    this.spare = r * Math.sin(theta);
    return r * Math.cos(theta);
  }
}
