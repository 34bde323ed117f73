/**
 * Bytes of request bodies held by all open streams together. Each body is bounded by
 * --max-body-bytes, but a client that opens many streams and sends bodies slowly would otherwise
 * make the EPP hold streams × max body; past this budget a body that needs more is refused (503).
 */
export class BodyBudget {
  private held = 0;

  constructor(readonly limit: number) {}

  /** Takes `bytes` from the budget; false (nothing taken) when that would exceed it. */
  reserve(bytes: number): boolean {
    if (this.held + bytes > this.limit) return false;
    this.held += bytes;
    return true;
  }

  release(bytes: number): void {
    this.held = Math.max(0, this.held - bytes);
  }

  get used(): number {
    return this.held;
  }
}
