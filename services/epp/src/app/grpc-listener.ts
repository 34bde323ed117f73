import { createServer, type Server as NetServer, type Socket } from 'node:net';
import type { ConnectionInjector, Server, ServerCredentials } from '@grpc/grpc-js';

/**
 * The ext_proc port, as a TCP listener the EPP owns whose connections grpc-js serves (its
 * connection injector: the same HTTP/2 server, credentials, keepalive and handlers as a bound
 * port). Owning the listener is what a graceful stop needs and grpc-js does not expose: how many
 * connections are open (a gateway that health-checks the EPP keeps one), and stopping new
 * connections while the open ones finish their streams.
 */
export class GrpcListener {
  private readonly sockets = new Set<Socket>();
  private idleWaiters: (() => void)[] = [];

  private constructor(
    private readonly listener: NetServer,
    private readonly injector: ConnectionInjector,
    readonly port: number,
  ) {
    listener.on('connection', (socket: Socket) => {
      this.sockets.add(socket);
      socket.once('close', () => {
        this.sockets.delete(socket);
        if (this.sockets.size === 0) for (const wake of this.idleWaiters.splice(0)) wake();
      });
      injector.injectConnection(socket);
    });
  }

  /** Listens on `host:port` (0: a free port) and hands every connection to `server`. */
  static listen(server: Server, host: string, port: number, credentials: ServerCredentials): Promise<GrpcListener> {
    const injector = server.createConnectionInjector(credentials);
    const listener = createServer();
    return new Promise((resolve, reject) => {
      listener.once('error', (error) => {
        injector.destroy();
        const address = host.includes(':') ? `[${host}]:${port}` : `${host}:${port}`;
        reject(new Error(`cannot listen on ${address}: ${error.message}`));
      });
      listener.listen({ host, port }, () => {
        const bound = listener.address();
        resolve(new GrpcListener(listener, injector, typeof bound === 'object' && bound !== null ? bound.port : port));
      });
    });
  }

  /** Connections open now (gateways' ext_proc and health-check connections, whatever their state). */
  get connections(): number {
    return this.sockets.size;
  }

  /** Resolves once no connection is open, or after `ms`. */
  idle(ms: number): Promise<void> {
    if (this.sockets.size === 0) return Promise.resolve();
    return new Promise((resolve) => {
      const timer = setTimeout(done, ms);
      function done(): void {
        clearTimeout(timer);
        resolve();
      }
      this.idleWaiters.push(done);
    });
  }

  /**
   * Stops accepting connections and asks every open one to finish (HTTP/2 GOAWAY: streams in
   * flight complete, no new ones start); connections still open after `graceMs` are reset.
   * Resolves once none is open.
   */
  async drain(graceMs: number): Promise<void> {
    this.listener.close();
    this.injector.drain(graceMs);
    await this.idle(graceMs + 1000);
    this.destroy();
  }

  /** Closes the listener and every connection at once. */
  destroy(): void {
    this.listener.close();
    this.injector.destroy();
    for (const socket of this.sockets) socket.destroy();
  }
}
