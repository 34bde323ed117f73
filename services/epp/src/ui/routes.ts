import type { IncomingMessage, ServerResponse } from 'node:http';
import { ASSET_PATHS, type ViewAssets } from './assets.js';
import { buildState, parseStateQuery, stateQuerySchema, type StateSources } from './state.js';

/** Handles a request when its path belongs to the view; false leaves it to the server's other routes (or its 404). */
export type ViewRoutes = (req: IncomingMessage, res: ServerResponse) => boolean;

export const STATE_PATH = '/api/state';

/**
 * Every response of the view says: scripts, styles, images and fetches from this origin only, no
 * inline script or style, no plugin, no framing; no MIME sniffing; no referrer. Data from events
 * (pod names, zones) is put into the page as text by the script, so even a page that got markup
 * into the DOM could not run it.
 */
export const SECURITY_HEADERS: Readonly<Record<string, string>> = {
  'content-security-policy':
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
  'x-content-type-options': 'nosniff',
  'referrer-policy': 'no-referrer',
  'x-frame-options': 'DENY',
  'cross-origin-resource-policy': 'same-origin',
};

/**
 * The operators' view over HTTP, read-only: `GET /` the page, `GET /ui/*` its files, `GET
 * /api/state` the JSON behind it (HEAD too). Any other method on these paths is 405 with `Allow:
 * GET, HEAD`; every other path is not the view's (the server answers 404).
 */
export function viewRoutes(sources: StateSources, assets: ViewAssets, now: () => number = Date.now): ViewRoutes {
  const paths = new Set([...ASSET_PATHS, STATE_PATH]);
  const querySchema = stateQuerySchema(sources.decisions.capacity);
  return (req, res) => {
    const url = parseUrl(req.url);
    if (!paths.has(url.pathname)) return false;
    if (req.method !== 'GET' && req.method !== 'HEAD') {
      send(res, 405, 'text/plain; charset=utf-8', `${req.method ?? 'this method'} is not allowed: the view is read-only\n`, {
        allow: 'GET, HEAD',
        'cache-control': 'no-store',
      });
      return true;
    }
    if (url.pathname === STATE_PATH) {
      const query = parseStateQuery(url.searchParams, querySchema);
      if (!query.ok) {
        send(res, 400, 'application/json; charset=utf-8', JSON.stringify({ error: query.error }), { 'cache-control': 'no-store' });
        return true;
      }
      send(res, 200, 'application/json; charset=utf-8', JSON.stringify(buildState(sources, query.query, now())), {
        'cache-control': 'no-store',
      });
      return true;
    }
    const asset = assets.files.get(url.pathname);
    if (asset === undefined) {
      send(res, 500, 'text/plain; charset=utf-8', `${assets.missing.get(url.pathname) ?? 'not available'}\n`, {
        'cache-control': 'no-store',
      });
      return true;
    }
    // Paths carry no version, so browsers revalidate every time; an unchanged file costs a 304.
    const headers = { etag: asset.etag, 'cache-control': 'no-cache' };
    if (req.headers['if-none-match'] === asset.etag) send(res, 304, undefined, undefined, headers);
    else send(res, 200, asset.contentType, asset.body, headers);
    return true;
  };
}

/** The path and query of a request target; the path is taken as sent (no host, no dot segments resolved). */
function parseUrl(raw: string | undefined): { pathname: string; searchParams: URLSearchParams } {
  const target = raw ?? '/';
  const mark = target.indexOf('?');
  return mark < 0
    ? { pathname: target, searchParams: new URLSearchParams() }
    : { pathname: target.slice(0, mark), searchParams: new URLSearchParams(target.slice(mark + 1)) };
}

function send(
  res: ServerResponse,
  status: number,
  contentType: string | undefined,
  body: string | Buffer | undefined,
  headers: Record<string, string>,
): void {
  res.writeHead(status, { ...SECURITY_HEADERS, ...headers, ...(contentType === undefined ? {} : { 'content-type': contentType }) });
  res.end(body);
}
