import { createServer as createHttpServer, type IncomingMessage, type Server as HttpServer, type ServerResponse } from 'node:http';
import type { Registry } from 'prom-client';

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

export function closeHttp(server: HttpServer): Promise<void> {
  return new Promise((resolve) => {
    server.closeAllConnections();
    server.close(() => resolve());
  });
}
