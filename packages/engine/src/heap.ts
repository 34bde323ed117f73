import type { EngineRequest, Sequence } from './sequence.js';

/** Indexed binary min-heap of running sequences by next event time (ties: admission order). */
export class SequenceHeap<R extends EngineRequest> {
  private readonly items: Sequence<R>[] = [];

  get size(): number {
    return this.items.length;
  }

  peek(): Sequence<R> | undefined {
    return this.items[0];
  }

  push(s: Sequence<R>): void {
    s._heapIndex = this.items.length;
    this.items.push(s);
    this.up(s._heapIndex);
  }

  pop(): Sequence<R> | undefined {
    const top = this.items[0];
    if (top) this.remove(top);
    return top;
  }

  remove(s: Sequence<R>): void {
    const i = s._heapIndex;
    if (i < 0) return;
    const last = this.items.pop() as Sequence<R>;
    s._heapIndex = -1;
    if (last === s) return;
    this.items[i] = last;
    last._heapIndex = i;
    this.up(i);
    this.down(last._heapIndex);
  }

  private less(a: Sequence<R>, b: Sequence<R>): boolean {
    return a._nextAt < b._nextAt || (a._nextAt === b._nextAt && a._order < b._order);
  }

  private up(i: number): void {
    const items = this.items;
    const s = items[i] as Sequence<R>;
    while (i > 0) {
      const p = (i - 1) >> 1;
      const parent = items[p] as Sequence<R>;
      if (!this.less(s, parent)) break;
      items[i] = parent;
      parent._heapIndex = i;
      i = p;
    }
    items[i] = s;
    s._heapIndex = i;
  }

  private down(i: number): void {
    const items = this.items;
    const n = items.length;
    const s = items[i] as Sequence<R>;
    for (;;) {
      const l = 2 * i + 1;
      if (l >= n) break;
      const r = l + 1;
      let c = l;
      if (r < n && this.less(items[r] as Sequence<R>, items[l] as Sequence<R>)) c = r;
      const child = items[c] as Sequence<R>;
      if (!this.less(child, s)) break;
      items[i] = child;
      child._heapIndex = i;
      i = c;
    }
    items[i] = s;
    s._heapIndex = i;
  }
}
