/** Reusable numeric scratch that grows by doubling, so steady-state picks allocate nothing. */
export class Scratch {
  scores = new Float64Array(64);
  scorer = new Float64Array(64);
  flags = new Uint8Array(64);

  ensure(count: number): void {
    if (count <= this.scores.length) return;
    let size = this.scores.length;
    while (size < count) size *= 2;
    this.scores = new Float64Array(size);
    this.scorer = new Float64Array(size);
    this.flags = new Uint8Array(size);
  }
}
