import type { Rng } from './rng.js';
import { TopK } from './top-k.js';

/**
 * Step 2 of a pick, the one ranking function: the cheapest few candidates overall, the cheapest
 * remote ones and the cheapest local ones, in one pass over the keys (lower is better). Equal keys
 * are ordered at random (anti-herding); distinct keys cost no random numbers.
 */
export class Ranking {
  readonly overall = new TopK();
  readonly remote = new TopK();
  readonly local = new TopK();

  rank(keys: Float64Array, tiers: Uint8Array, count: number, sizes: { overall: number; remote: number; local: number }, rng: Rng): void {
    this.overall.reset(sizes.overall);
    this.remote.reset(sizes.remote);
    this.local.reset(sizes.local);
    for (let i = 0; i < count; i++) {
      // TopK keeps the highest keys: offer the negated cost.
      const key = -(keys[i] as number);
      this.overall.offer(i, key, rng);
      if (tiers[i] === 0) this.local.offer(i, key, rng);
      else this.remote.offer(i, key, rng);
    }
  }
}
