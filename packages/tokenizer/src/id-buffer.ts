/**
 * The ids of one encoding as they are found, copied out once at the exact length. A `number[]` grown
 * by `push` reallocates as it doubles (8 bytes an id) and the EPP then copies it into a Uint32Array;
 * here the growth happens once per process and each encoding allocates only its result (4 bytes an
 * id). Bounded in bytes: a buffer grown past `keepBytes` by a huge prompt is dropped after that
 * encoding, so one outlier does not pin its size for the life of the process.
 */
const INITIAL_IDS = 4096;

export class IdBuffer {
  private ids: Uint32Array;
  private n = 0;

  constructor(private readonly keepBytes: number) {
    this.ids = new Uint32Array(Math.min(INITIAL_IDS, Math.max(1, keepBytes >>> 2)));
  }

  get length(): number {
    return this.n;
  }

  /** Starts a new encoding. */
  reset(): void {
    this.n = 0;
  }

  push(id: number): void {
    if (this.n === this.ids.length) this.grow(this.n + 1);
    this.ids[this.n++] = id;
  }

  pushAll(ids: ArrayLike<number>): void {
    const count = ids.length;
    if (this.n + count > this.ids.length) this.grow(this.n + count);
    for (let i = 0; i < count; i++) this.ids[this.n + i] = ids[i] as number;
    this.n += count;
  }

  /** The ids pushed since `reset`, as an array of their own. */
  take(): Uint32Array {
    const result = this.ids.slice(0, this.n);
    this.n = 0;
    if (this.ids.byteLength > this.keepBytes) this.ids = new Uint32Array(Math.min(INITIAL_IDS, Math.max(1, this.keepBytes >>> 2)));
    return result;
  }

  private grow(needed: number): void {
    let size = this.ids.length * 2;
    while (size < needed) size *= 2;
    const next = new Uint32Array(size);
    next.set(this.ids.subarray(0, this.n));
    this.ids = next;
  }
}
