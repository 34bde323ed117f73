/**
 * Fan-out of status snapshots to any number of async iterators. Each subscriber gets every value
 * published after it subscribed, in order (status changes are rare, so queues stay short); a
 * subscriber that stops iterating is dropped.
 */
export class Notifier<T> {
  private readonly subscribers = new Set<Subscriber<T>>();
  private ended = false;

  publish(value: T): void {
    for (const s of this.subscribers) s.push(value);
  }

  end(): void {
    this.ended = true;
    for (const s of this.subscribers) s.finish();
    this.subscribers.clear();
  }

  /** An iterator starting with `initial`. */
  subscribe(initial: T): AsyncIterable<T> {
    const subscriber = new Subscriber<T>(() => this.subscribers.delete(subscriber));
    subscriber.push(initial);
    if (this.ended) subscriber.finish();
    else this.subscribers.add(subscriber);
    return subscriber;
  }
}

class Subscriber<T> implements AsyncIterable<T> {
  private readonly queue: T[] = [];
  private waiting: ((result: IteratorResult<T>) => void) | undefined;
  private done = false;

  constructor(private readonly detach: () => void) {}

  push(value: T): void {
    if (this.done) return;
    const wake = this.waiting;
    if (wake) {
      this.waiting = undefined;
      wake({ value, done: false });
    } else {
      this.queue.push(value);
    }
  }

  finish(): void {
    this.done = true;
    const wake = this.waiting;
    this.waiting = undefined;
    wake?.({ value: undefined, done: true });
  }

  [Symbol.asyncIterator](): AsyncIterator<T> {
    return {
      next: () => {
        if (this.queue.length > 0) return Promise.resolve({ value: this.queue.shift() as T, done: false });
        if (this.done) return Promise.resolve({ value: undefined, done: true });
        return new Promise((resolve) => (this.waiting = resolve));
      },
      return: () => {
        this.finish();
        this.detach();
        return Promise.resolve({ value: undefined, done: true });
      },
    };
  }
}
