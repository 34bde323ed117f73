import { createServer, type Server } from 'node:http';
import type { Logger } from 'pino';
import { loadViewAssets } from './assets.js';
import { SECURITY_HEADERS, viewRoutes, type ViewRoutes } from './routes.js';
import type { StateSources } from './state.js';

/** The view's routes over the EPP's sources; files that cannot be read are logged now, and 500 when asked for. */
export function createView(sources: StateSources, logger: Logger): ViewRoutes {
  const assets = loadViewAssets();
  for (const [path, reason] of assets.missing) logger.warn({ path }, `the operators' view is incomplete: ${reason}`);
  return viewRoutes(sources, assets);
}

/**
 * The view on a port of its own (`--ui-port`): its paths, and 404 for every other. Idle sockets
 * are closed after `silentMs`, as on the metrics port.
 */
export function startViewServer(
  routes: ViewRoutes,
  host: string,
  port: number,
  silentMs: number,
): Promise<{ server: Server; port: number }> {
  const server = createServer((req, res) => {
    if (routes(req, res)) return;
    res.writeHead(404, { ...SECURITY_HEADERS, 'content-type': 'text/plain; charset=utf-8' });
    res.end('not found\n');
  });
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
