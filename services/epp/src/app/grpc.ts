import { isIP } from 'node:net';
import { Server, type ServerCredentials } from '@grpc/grpc-js';

/**
 * A gRPC server. `silentMs` bounds how long a connection that says nothing stays open: the server
 * pings every connection that has been quiet for `silentMs` and closes it when no ack arrives
 * within `silentMs` more. Envoy (any HTTP/2 peer) acks pings at once, so only dead peers and bare
 * TCP connections that never speak HTTP/2 are closed. (A TLS port also drops connections that
 * never finish the handshake, after Node's 120 s handshake timeout.)
 */
export function newGrpcServer(silentMs: number): Server {
  return new Server({
    // Envoy keeps one HTTP/2 connection with many concurrent streams; do not cap them low.
    'grpc.max_concurrent_streams': 10_000,
    'grpc.keepalive_permit_without_calls': 1,
    'grpc.http2.min_ping_interval_without_data_ms': 5_000,
    'grpc.keepalive_time_ms': silentMs,
    'grpc.keepalive_timeout_ms': silentMs,
  });
}

/** True for addresses only this machine can reach (127.0.0.0/8, ::1, localhost). */
export function isLoopback(host: string): boolean {
  if (host === 'localhost') return true;
  if (isIP(host) === 4) return host.startsWith('127.');
  const bare = host.replace(/^\[|\]$/g, '').toLowerCase();
  return bare === '::1' || bare === '0:0:0:0:0:0:0:1' || bare.startsWith('::ffff:127.');
}

export function bindGrpc(server: Server, host: string, port: number, credentials: ServerCredentials): Promise<number> {
  const address = host.includes(':') ? `[${host}]:${port}` : `${host}:${port}`;
  return new Promise((resolve, reject) => {
    server.bindAsync(address, credentials, (error, bound) =>
      error ? reject(new Error(`cannot listen on ${address}: ${error.message}`)) : resolve(bound),
    );
  });
}

export function shutdownGrpc(server: Server, graceMs: number): Promise<void> {
  return new Promise((resolve) => {
    const force = setTimeout(() => {
      server.forceShutdown();
      resolve();
    }, graceMs);
    force.unref();
    server.tryShutdown(() => {
      clearTimeout(force);
      resolve();
    });
  });
}
