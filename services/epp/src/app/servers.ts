import { createServer as createHttpServer, type IncomingMessage, type Server as HttpServer, type ServerResponse } from 'node:http';
import { isIP } from 'node:net';
import { Server, ServerCredentials } from '@grpc/grpc-js';
import type { Registry } from 'prom-client';
import type { ServerTls } from '../config/config.js';

/** Plaintext without TLS material; with a client CA, client certificates are mandatory (mTLS). */
export function grpcCredentials(tls: ServerTls | undefined): ServerCredentials {
  if (tls === undefined) return ServerCredentials.createInsecure();
  const ca = tls.clientCa ?? null;
  return ServerCredentials.createSsl(ca, [{ cert_chain: tls.cert, private_key: tls.key }], ca !== null);
}

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

/**
 * `/metrics` for Prometheus; `/healthz` and `/readyz` for plain HTTP probes; `/debug/decisions`
 * (`?limit=N`) the last decisions with each listed endpoint's cost components; then `routes` (the
 * operators' view, when on this port). Everything else is 404.
 */
export interface MetricsHooks {
  isReady(): boolean;
  /** Refreshes gauges derived from state just before they are read. */
  beforeScrape(): void;
  /** The most recent decisions, newest first. */
  recentDecisions(limit: number): unknown[];
  /** Further read-only routes on this port (the operators' view); true when it handled the request. */
  routes?: ((req: IncomingMessage, res: ServerResponse) => boolean) | undefined;
}

export function startMetricsServer(
  registry: Registry,
  host: string,
  port: number,
  hooks: MetricsHooks,
  silentMs: number,
): Promise<{ server: HttpServer; port: number }> {
  const server = createHttpServer((req, res) => {
    const [path, query] = (req.url ?? '/').split('?', 2);
    if (req.method === 'GET' && path === '/metrics') {
      hooks.beforeScrape();
      registry
        .metrics()
        .then((text) => {
          res.writeHead(200, { 'content-type': registry.contentType });
          res.end(text);
        })
        .catch((error: unknown) => {
          res.writeHead(500, { 'content-type': 'text/plain' });
          res.end(String(error));
        });
      return;
    }
    if (req.method === 'GET' && (path === '/healthz' || path === '/readyz')) {
      const ok = path === '/healthz' || hooks.isReady();
      res.writeHead(ok ? 200 : 503, { 'content-type': 'text/plain' });
      res.end(ok ? 'ok\n' : 'not ready\n');
      return;
    }
    if (req.method === 'GET' && path === '/debug/decisions') {
      const limit = Number(new URLSearchParams(query ?? '').get('limit') ?? '20');
      const body = JSON.stringify({ decisions: hooks.recentDecisions(Number.isInteger(limit) && limit > 0 ? limit : 20) });
      res.writeHead(200, { 'content-type': 'application/json', 'cache-control': 'no-store' });
      res.end(body);
      return;
    }
    if (hooks.routes?.(req, res)) return;
    res.writeHead(404, { 'content-type': 'text/plain' });
    res.end('not found\n');
  });
  // A socket idle this long is destroyed, whether it ever sent a request or not; a request's
  // headers must arrive within it too. Prometheus and probes send theirs at once.
  server.timeout = silentMs;
  server.headersTimeout = silentMs;
  server.requestTimeout = silentMs;
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, host, () => {
      const address = server.address();
      resolve({ server, port: typeof address === 'object' && address ? address.port : port });
    });
  });
}
