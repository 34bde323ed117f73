import type { Rng } from '@spillway/engine';

/**
 * Time on the wire between zones. Every message — a metrics event, a KV batch, a shared-state
 * batch, a scrape, an EPP's answer, a request — takes at least half its zone pair's round trip,
 * plus the jitter of its own path. In-zone hops cost nothing beyond that jitter (the engine's
 * timing already includes them).
 */
export class Network {
  constructor(
    /** Round trips between zones (ms), `rttMs[from][to]`. */
    private readonly rttMs: readonly (readonly number[])[],
  ) {}

  rtt(from: number, to: number): number {
    return this.rttMs[from]?.[to] ?? 0;
  }

  oneWay(from: number, to: number): number {
    return this.rtt(from, to) / 2;
  }

  /** A message from zone `from` to zone `to` on a path whose own delay is uniform in `jitter` ms. */
  delay(from: number, to: number, jitter: readonly [number, number], rng: Rng): number {
    return this.oneWay(from, to) + jitter[0] + rng.next() * (jitter[1] - jitter[0]);
  }
}
