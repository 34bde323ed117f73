/**
 * The simulation's event queue: a binary min-heap on (time, insertion order), so events due at the
 * same instant run in the order they were scheduled and a run is reproducible. Each entry wraps
 * the event (any plain object) with its time and insertion order.
 */
export interface Scheduled<E> {
  readonly at: number;
  readonly event: E;
  /** Insertion order, the tie-break. */
  readonly order: number;
}

export class EventQueue<E> {
  private readonly heap: Scheduled<E>[] = [];
  private counter = 0;

  get size(): number {
    return this.heap.length;
  }

  push(at: number, event: E): void {
    const entry: Scheduled<E> = { at, event, order: this.counter++ };
    const heap = this.heap;
    let i = heap.length;
    heap.push(entry);
    while (i > 0) {
      const parent = (i - 1) >> 1;
      const p = heap[parent] as Scheduled<E>;
      if (!before(entry, p)) break;
      heap[i] = p;
      i = parent;
    }
    heap[i] = entry;
  }

  peek(): Scheduled<E> | undefined {
    return this.heap[0];
  }

  pop(): Scheduled<E> | undefined {
    const heap = this.heap;
    const top = heap[0];
    const last = heap.pop();
    if (top === undefined || last === undefined || heap.length === 0) return top;
    const n = heap.length;
    let i = 0;
    for (;;) {
      const l = 2 * i + 1;
      if (l >= n) break;
      const r = l + 1;
      const child = r < n && before(heap[r] as Scheduled<E>, heap[l] as Scheduled<E>) ? r : l;
      const c = heap[child] as Scheduled<E>;
      if (!before(c, last)) break;
      heap[i] = c;
      i = child;
    }
    heap[i] = last;
    return top;
  }
}

function before<E>(a: Scheduled<E>, b: Scheduled<E>): boolean {
  return a.at < b.at || (a.at === b.at && a.order < b.order);
}
