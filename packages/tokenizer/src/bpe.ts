/**
 * Byte-level BPE in id space, for a pre-token the cache has not seen. Same result as the library's
 * `BPE.bpe` (heap of candidate pairs, lowest merge rank first, leftmost first among equal ranks: its
 * tie-break adds position / length to the rank): here the lowest-ranked adjacent pair is found by a
 * scan and merged until none is left. Symbols start as the ids of the pre-token's UTF-8 bytes (the
 * ByteLevel characters' ids, looked up once at load), so no string is built; pairs live in an
 * open-addressing table of typed arrays (no objects, no string keys). Pre-tokens are short (at
 * most `MAX_KEY_CHARS` characters are cached; longer ones are rare), so the quadratic scan costs
 * less than a heap's allocations; above LONG_WORD_CHARS the library's BPE is used.
 */
import { BYTE_CHAR, utf8 } from './byte-level.js';

const ID_LIMIT = 2 ** 24;
/**
 * Longer pre-tokens go to the library's BPE: the scan here is quadratic in the word's length (a
 * 20,000-letter run would take seconds), the library's heap is not; such words are rare in text.
 */
const LONG_WORD_CHARS = 512;

/** (left id, right id) → (rank, merged id), open addressing with linear probing. */
class PairTable {
  private readonly left: Int32Array;
  private readonly right: Int32Array;
  private readonly rank: Int32Array;
  private readonly merged: Int32Array;
  private readonly mask: number;

  constructor(capacity: number) {
    let size = 16;
    while (size < capacity * 2) size *= 2;
    this.left = new Int32Array(size).fill(-1);
    this.right = new Int32Array(size);
    this.rank = new Int32Array(size);
    this.merged = new Int32Array(size);
    this.mask = size - 1;
  }

  private slot(l: number, r: number): number {
    let i = (Math.imul(l, 0x9e3779b1) ^ Math.imul(r + 0x7f4a7c15, 0x85ebca77)) & this.mask;
    while (this.left[i] !== -1 && (this.left[i] !== l || this.right[i] !== r)) i = (i + 1) & this.mask;
    return i;
  }

  set(l: number, r: number, rank: number, merged: number): void {
    const i = this.slot(l, r);
    this.left[i] = l;
    this.right[i] = r;
    this.rank[i] = rank;
    this.merged[i] = merged;
  }

  /** The rank of the pair (-1: no such merge); `mergedAt` of the same slot gives the merged id. */
  find(l: number, r: number): number {
    return this.slot(l, r);
  }
  rankAt(slot: number): number {
    return this.left[slot] === -1 ? -1 : (this.rank[slot] as number);
  }
  mergedAt(slot: number): number {
    return this.merged[slot] as number;
  }
}

export class IdBpe {
  private constructor(
    private readonly pairs: PairTable,
    /** The id of each byte's ByteLevel character (-1: none, or one the merges use for another string). */
    private readonly byteIds: Int32Array,
    private readonly idOf: (token: string) => number | undefined,
    private readonly ignoreMerges: boolean,
  ) {}

  /**
   * From the library model's merges (in rank order) and its vocabulary. Undefined (use the
   * library) when ids cannot stand for the strings: a merge whose parts or result have no id, ids of
   * 2^24 or more, or two strings with one id.
   */
  static create(
    merges: ReadonlyArray<readonly [string, string]>,
    idOf: (token: string) => number | undefined,
    ignoreMerges: boolean,
  ): IdBpe | undefined {
    const pairs = new PairTable(merges.length);
    const stringOf = new Map<number, string>();
    const id = (s: string): number | undefined => {
      const v = idOf(s);
      if (v === undefined || v < 0 || v >= ID_LIMIT || !Number.isInteger(v)) return undefined;
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
      pairs.set(left, right, rank, merged);
    }
    const byteIds = new Int32Array(256);
    for (let b = 0; b < 256; b++) byteIds[b] = id(BYTE_CHAR[b] as string) ?? -1;
    return new IdBpe(pairs, byteIds, idOf, ignoreMerges);
  }

  /**
   * The ids of one pre-token (before ByteLevel), or undefined when a byte has no id or the word is
   * longer than LONG_WORD_CHARS (the library decides: its heap does not grow quadratically).
   */
  encode(word: string): number[] | undefined {
    if (word.length === 0) return [];
    if (word.length > LONG_WORD_CHARS) return undefined;
    if (this.ignoreMerges) {
      const whole = this.idOf(mapBytes(utf8(word)));
      if (whole !== undefined) return [whole];
    }
    const ids: number[] = [];
    for (let i = 0; i < word.length; i++) {
      const c = word.charCodeAt(i);
      if (c >= 0x80) return this.symbols(utf8(word));
      const id = this.byteIds[c] as number;
      if (id < 0) return undefined;
      ids.push(id);
    }
    return this.merge(ids);
  }

  private symbols(bytes: Uint8Array): number[] | undefined {
    const ids: number[] = new Array<number>(bytes.length);
    for (let i = 0; i < bytes.length; i++) {
      const id = this.byteIds[bytes[i] as number] as number;
      if (id < 0) return undefined;
      ids[i] = id;
    }
    return this.merge(ids);
  }

  private merge(ids: number[]): number[] {
    const { pairs } = this;
    for (;;) {
      let best = Infinity;
      let at = -1;
      let bestSlot = -1;
      for (let i = 0; i + 1 < ids.length; i++) {
        const slot = pairs.find(ids[i] as number, ids[i + 1] as number);
        const rank = pairs.rankAt(slot);
        if (rank >= 0 && rank < best) {
          best = rank;
          at = i;
          bestSlot = slot;
        }
      }
      if (at < 0) return ids;
      ids[at] = pairs.mergedAt(bestSlot);
      ids.splice(at + 1, 1);
    }
  }
}

function mapBytes(bytes: Uint8Array): string {
  let out = '';
  for (let i = 0; i < bytes.length; i++) out += BYTE_CHAR[bytes[i] as number];
  return out;
}
