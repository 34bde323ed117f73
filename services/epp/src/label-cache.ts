/**
 * Prometheus label children by key, made once. Model names come from clients, so the cache is
 * bounded: past `limit` keys it starts over rather than grow without end (the registry itself
 * keeps the series either way).
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
