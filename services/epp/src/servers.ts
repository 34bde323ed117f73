import { readFileSync } from 'node:fs';
import { createServer as createHttpServer, type Server as HttpServer } from 'node:http';
import { Server, ServerCredentials } from '@grpc/grpc-js';
import type { Registry } from 'prom-client';
import type { EppFlagValues } from './config.js';

/** Plaintext unless --tls-cert/--tls-key are given; --tls-client-ca makes client certificates mandatory. */
export function grpcCredentials(flags: Pick<EppFlagValues, 'tlsCert' | 'tlsKey' | 'tlsClientCa'>): ServerCredentials {
  if (flags.tlsCert === undefined || flags.tlsKey === undefined) return ServerCredentials.createInsecure();
  const ca = flags.tlsClientCa === undefined ? null : readFileSync(flags.tlsClientCa);
  return ServerCredentials.createSsl(ca, [{ cert_chain: readFileSync(flags.tlsCert), private_key: readFileSync(flags.tlsKey) }], ca !== null);
}

export function newGrpcServer(): Server {
  return new Server({
    // Envoy keeps one HTTP/2 connection with many concurrent streams; do not cap them low.
    'grpc.max_concurrent_streams': 10_000,
    'grpc.keepalive_permit_without_calls': 1,
    'grpc.http2.min_ping_interval_without_data_ms': 5_000,
  });
}

export function bindGrpc(server: Server, host: string, port: number, credentials: ServerCredentials): Promise<number> {
  const address = host.includes(':') ? `[${host}]:${port}` : `${host}:${port}`;
  return new Promise((resolve, reject) => {
    server.bindAsync(address, credentials, (error, bound) => (error ? reject(new Error(`cannot listen on ${address}: ${error.message}`)) : resolve(bound)));
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
 * (`?limit=N`) the last decisions with each listed endpoint's cost components. Everything else is 404.
 */
export interface MetricsHooks {
  isReady(): boolean;
  /** Refreshes gauges derived from state just before they are read. */
  beforeScrape(): void;
  /** The most recent decisions, newest first. */
  recentDecisions(limit: number): unknown[];
}

export function startMetricsServer(registry: Registry, host: string, port: number, hooks: MetricsHooks): Promise<{ server: HttpServer; port: number }> {
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
    res.writeHead(404, { 'content-type': 'text/plain' });
    res.end('not found\n');
  });
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, host, () => {
      const address = server.address();
      resolve({ server, port: typeof address === 'object' && address ? address.port : port });
    });
  });
}
