import type { Rng } from './rng.js';

/**
 * Keeps the k best (highest key) of a stream of candidate indexes, in order — a partial selection,
 * O(n·k) with k ≤ a handful, instead of sorting the group. Equal keys are ordered by random tie
 * keys drawn lazily, only when two equal keys meet: the draws are independent of the scores, so
 * every ordering of equals stays equally likely while distinct scores cost no random numbers.
 */
export class TopK {
  index: Int32Array;
  key: Float64Array;
  private tie: Float64Array;
  size = 0;
  private limit = 0;

  constructor(capacity = 8) {
    this.index = new Int32Array(capacity);
    this.key = new Float64Array(capacity);
    this.tie = new Float64Array(capacity);
  }

  reset(limit: number): void {
    if (limit > this.index.length) {
      this.index = new Int32Array(limit);
      this.key = new Float64Array(limit);
      this.tie = new Float64Array(limit);
    }
    this.limit = limit;
    this.size = 0;
  }

  offer(candidate: number, key: number, rng: Rng): void {
    const limit = this.limit;
    if (limit === 0) return;
    let tie = Number.NaN;
    let pos = this.size;
    // Walk up from the end while the candidate beats the entry above.
    while (pos > 0) {
      const above = pos - 1;
      const aboveKey = this.key[above] as number;
      if (key < aboveKey) break;
      if (key === aboveKey) {
        if (Number.isNaN(tie)) tie = rng();
        let aboveTie = this.tie[above] as number;
        if (Number.isNaN(aboveTie)) {
          aboveTie = rng();
          this.tie[above] = aboveTie;
        }
        if (tie <= aboveTie) break;
      }
      pos = above;
    }
    if (pos >= limit) return;
    const last = this.size < limit ? this.size : limit - 1;
    for (let i = last; i > pos; i--) {
      this.index[i] = this.index[i - 1] as number;
      this.key[i] = this.key[i - 1] as number;
      this.tie[i] = this.tie[i - 1] as number;
    }
    this.index[pos] = candidate;
    this.key[pos] = key;
    this.tie[pos] = tie;
    if (this.size < limit) this.size++;
  }
}
