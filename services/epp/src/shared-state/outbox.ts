import { STATE_PICK, STATE_PLACEMENT, type StateEntry } from '@spillway/events';
import type { SharedStateOutbox } from '@spillway/scheduler';

/**
 * This EPP's entries on their way to its peers. The request path only appends here (the
 * scheduler's commit, release and outcome reports call `push`); batches leave on a timer or once
 * enough entries wait, never inside a request. Bounded in entries and estimated bytes: when the
 * channel cannot keep up (NATS slow or down), new entries are dropped and counted, and peers see
 * the gap in sequence numbers.
 */
export interface OutboxLimits {
  batchMs: number;
  batchEntries: number;
  maxBufferedEntries: number;
  maxBufferedBytes: number;
}

/** An entry's wire size, roughly: the tuple, names and times, and 9 bytes per block hash (msgpack uint64). */
export function entryBytes(entry: StateEntry): number {
  if (entry[0] === STATE_PICK) return 48 + entry[2].length + entry[3].length + 9 * entry[5].length;
  if (entry[0] === STATE_PLACEMENT) return 48 + entry[1].length + entry[2].length + 9 * entry[3].length;
  return 48;
}

export class StateOutbox implements SharedStateOutbox {
  private entries: StateEntry[] = [];
  private bytes = 0;
  private timer: NodeJS.Timeout | undefined;
  private immediate: NodeJS.Immediate | undefined;
  private closed = false;
  /** Entries dropped because the buffer was full. */
  dropped = 0;
  /** Called (off the request path) when a batch is due; takes the entries with `take`. Until set, due entries are dropped. */
  onDue: (() => void) | undefined;

  constructor(private readonly limits: OutboxLimits) {}

  push(entry: StateEntry): void {
    if (this.closed) return;
    const size = entryBytes(entry);
    if (this.entries.length >= this.limits.maxBufferedEntries || this.bytes + size > this.limits.maxBufferedBytes) {
      this.dropped++;
      return;
    }
    this.entries.push(entry);
    this.bytes += size;
    if (this.entries.length >= this.limits.batchEntries) {
      if (this.immediate === undefined) this.immediate = setImmediate(this.fire);
    } else if (this.timer === undefined) {
      this.timer = setTimeout(this.fire, this.limits.batchMs);
      this.timer.unref();
    }
  }

  get size(): number {
    return this.entries.length;
  }

  /** Every waiting entry, oldest first; the buffer is empty afterwards. */
  take(): StateEntry[] {
    const taken = this.entries;
    this.entries = [];
    this.bytes = 0;
    return taken;
  }

  /** Stops taking entries (the EPP is closing); what waits is left for a last `take`. */
  close(): void {
    this.closed = true;
    this.clearTimers();
  }

  private readonly fire = (): void => {
    this.clearTimers();
    if (this.onDue !== undefined) return this.onDue();
    // No channel yet (NATS not connected, replay not caught up): old entries are worth nothing later.
    this.dropped += this.take().length;
  };

  private clearTimers(): void {
    if (this.timer !== undefined) clearTimeout(this.timer);
    if (this.immediate !== undefined) clearImmediate(this.immediate);
    this.timer = undefined;
    this.immediate = undefined;
  }
}
