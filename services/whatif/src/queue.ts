/**
 * The simulation's event queue: a binary min-heap on (time, insertion order), so events due at the
 * same instant run in the order they were scheduled and a run is reproducible. Events are small
 * plain objects; the heap is an array of them.
 */
export interface SimEvent<K extends string = string> {
  readonly at: number;
  readonly kind: K;
  /** Replica, zone or fleet index, by kind. */
  readonly target: number;
  readonly payload?: unknown;
  /** Insertion order, the tie-break. Set by the queue. */
  order: number;
}

export class EventQueue<K extends string = string> {
  private readonly heap: SimEvent<K>[] = [];
  private counter = 0;

  get size(): number {
    return this.heap.length;
  }

  push(at: number, kind: K, target: number, payload?: unknown): void {
    const event: SimEvent<K> = { at, kind, target, payload, order: this.counter++ };
    const heap = this.heap;
    let i = heap.length;
    heap.push(event);
    while (i > 0) {
      const parent = (i - 1) >> 1;
      const p = heap[parent] as SimEvent<K>;
      if (!before(event, p)) break;
      heap[i] = p;
      i = parent;
    }
    heap[i] = event;
  }

  peek(): SimEvent<K> | undefined {
    return this.heap[0];
  }

  pop(): SimEvent<K> | undefined {
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
      const child = r < n && before(heap[r] as SimEvent<K>, heap[l] as SimEvent<K>) ? r : l;
      const c = heap[child] as SimEvent<K>;
      if (!before(c, last)) break;
      heap[i] = c;
      i = child;
    }
    heap[i] = last;
    return top;
  }
}

function before(a: SimEvent, b: SimEvent): boolean {
  return a.at < b.at || (a.at === b.at && a.order < b.order);
}
