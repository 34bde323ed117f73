/**
 * Prometheus label children by key, made once, for labels whose values come from a fixed set (the
 * destination-entry reasons). Bounded all the same: past `limit` keys it starts over rather than
 * grow. Client-chosen values never reach a label directly: model names go through ModelLabels
 * (configured models, else `other`).
 */
export class LabelCache<T> {
  private readonly children = new Map<string, T>();

  constructor(
    private readonly make: (key: string) => T,
    private readonly limit = 1024,
  ) {}

  get(key: string): T {
    let child = this.children.get(key);
    if (child === undefined) {
      if (this.children.size >= this.limit) this.children.clear();
      child = this.make(key);
      this.children.set(key, child);
    }
    return child;
  }
}
