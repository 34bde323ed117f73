import type { NatsConnection } from '@nats-io/transport-node';
import { Notifier } from './notifier.js';

export type ConnectionState = 'connected' | 'disconnected' | 'reconnecting' | 'closed';

export interface ConnectionStatus {
  readonly state: ConnectionState;
  /** When the connection was last lost (ms, injected clock); undefined while connected. */
  readonly disconnectedSince: number | undefined;
  /** Successful reconnects since start. */
  readonly reconnects: number;
  /** Disconnects since start. */
  readonly disconnects: number;
  /** The server currently connected to, when connected. */
  readonly server: string | undefined;
}

/**
 * Follows `nc.status()` and keeps a synchronous snapshot of the connection, so health checks and
 * metric scrapes read it without awaiting; `changes()` yields each new snapshot.
 */
export class ConnectionTracker {
  private current: ConnectionStatus;
  private readonly notifier = new Notifier<ConnectionStatus>();
  private readonly done: Promise<void>;

  constructor(
    nc: NatsConnection,
    private readonly now: () => number = Date.now,
  ) {
    this.current = {
      state: nc.isClosed() ? 'closed' : 'connected',
      disconnectedSince: undefined,
      reconnects: 0,
      disconnects: 0,
      server: nc.getServer(),
    };
    this.done = this.follow(nc);
    void nc.closed().then(() => this.set({ state: 'closed', server: undefined }));
  }

  get status(): ConnectionStatus {
    return this.current;
  }

  /** Snapshots as they change (the current one first). Ends when the connection closes. */
  changes(): AsyncIterable<ConnectionStatus> {
    return this.notifier.subscribe(this.current);
  }

  /** Resolves once the status loop has ended (the connection closed). */
  finished(): Promise<void> {
    return this.done;
  }

  private async follow(nc: NatsConnection): Promise<void> {
    for await (const s of nc.status()) {
      switch (s.type) {
        case 'disconnect':
          this.set({
            state: 'disconnected',
            disconnectedSince: this.current.disconnectedSince ?? this.now(),
            disconnects: this.current.disconnects + 1,
            server: undefined,
          });
          break;
        case 'reconnecting':
          this.set({ state: 'reconnecting', disconnectedSince: this.current.disconnectedSince ?? this.now() });
          break;
        case 'reconnect':
          this.set({ state: 'connected', disconnectedSince: undefined, reconnects: this.current.reconnects + 1, server: nc.getServer() });
          break;
        case 'close':
          this.set({ state: 'closed', server: undefined });
          break;
        default:
          break;
      }
    }
    this.notifier.end();
  }

  private set(change: Partial<ConnectionStatus>): void {
    const next = { ...this.current, ...change };
    if (next.state === this.current.state && next.reconnects === this.current.reconnects && next.disconnects === this.current.disconnects)
      return;
    this.current = next;
    this.notifier.publish(next);
  }
}
