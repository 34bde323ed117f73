/**
 * Byte-pair merging in id space, for a pre-token the cache has not seen. Same result as the
 * library's `BPE.bpe` (heap of candidate pairs, lowest merge rank first, leftmost first among equal
 * ranks: its tie-break adds position / length to the rank): here the lowest-ranked adjacent pair is
 * found by a scan and merged until none is left. A pair is a number (left id · 2^20 + right id) and
 * its value (rank · 2^20 + merged id) orders by rank, so one Map lookup per pair and no strings.
 * Pre-tokens are short (at most `MAX_KEY_CHARS` characters are cached; longer ones are rare), so the
 * quadratic scan costs less than a heap's allocations.
 */
const ID_BITS = 2 ** 20;

export class IdBpe {
  private constructor(
    private readonly pairs: Map<number, number>,
    private readonly idOf: (token: string) => number | undefined,
    private readonly ignoreMerges: boolean,
    /** Id → the string it stands for, for every string a merge involves. */
    private readonly stringOf: ReadonlyMap<number, string>,
  ) {}

  /**
   * From the library model's merges (in rank order) and the id mapping the library applies to its
   * output. Undefined (use the library) when the ids cannot stand for the strings: a merge whose
   * parts or result have no id, ids of 2^20 or more, or two strings with one id.
   */
  static create(merges: ReadonlyArray<readonly [string, string]>, idOf: (token: string) => number | undefined, ignoreMerges: boolean): IdBpe | undefined {
    const pairs = new Map<number, number>();
    const stringOf = new Map<number, string>();
    const id = (s: string): number | undefined => {
      const v = idOf(s);
      if (v === undefined || v < 0 || v >= ID_BITS || !Number.isInteger(v)) return undefined;
      const seen = stringOf.get(v);
      if (seen === undefined) stringOf.set(v, s);
      else if (seen !== s) return undefined;
      return v;
    };
    for (let rank = 0; rank < merges.length; rank++) {
      const [a, b] = merges[rank] as readonly [string, string];
      const left = id(a);
      const right = id(b);
      const merged = id(a + b);
      if (left === undefined || right === undefined || merged === undefined) return undefined;
      // A repeated merge: the library's rank map keeps the last one.
      pairs.set(left * ID_BITS + right, rank * ID_BITS + merged);
    }
    return new IdBpe(pairs, idOf, ignoreMerges, stringOf);
  }

  /** The ids of one byte-level pre-token, or undefined when a character has no id (the library decides). */
  encode(word: string): number[] | undefined {
    if (word.length === 0) return [];
    if (this.ignoreMerges) {
      const whole = this.idOf(word);
      if (whole !== undefined) return [whole];
    }
    const ids: number[] = [];
    for (const ch of word) {
      const id = this.idOf(ch);
      if (id === undefined) return undefined;
      const known = this.stringOf.get(id);
      if (known !== undefined && known !== ch) return undefined;
      ids.push(id);
    }
    const { pairs } = this;
    for (;;) {
      let best = Infinity;
      let at = -1;
      for (let i = 0; i + 1 < ids.length; i++) {
        const value = pairs.get((ids[i] as number) * ID_BITS + (ids[i + 1] as number));
        if (value !== undefined && value < best) {
          best = value;
          at = i;
        }
      }
      if (at < 0) return ids;
      ids[at] = best % ID_BITS;
      ids.splice(at + 1, 1);
    }
  }
}
