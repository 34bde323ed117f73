import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { fileURLToPath } from 'node:url';
import { ICON_SVG, PAGE_HTML } from './page.js';
import { STYLE_CSS } from './styles.js';

/** One file of the view, read once at start and served from memory. */
export interface Asset {
  readonly body: Buffer;
  readonly contentType: string;
  /** Strong validator of the body, for If-None-Match. */
  readonly etag: string;
}

export interface ViewAssets {
  /** By URL path. */
  readonly files: ReadonlyMap<string, Asset>;
  /** Files that could not be read, by URL path, with why: served as 500 with that message. */
  readonly missing: ReadonlyMap<string, string>;
}

const require = createRequire(import.meta.url);

/** The page's compiled script modules (web/*.ts built by tsc -b into dist/web), served as /ui/<name>.js. */
const SCRIPT_MODULES = ['app', 'dom', 'zones', 'pods', 'spill', 'decisions'] as const;
const SCRIPT_DIR = new URL('../../dist/web/', import.meta.url);

/**
 * Where the view's files come from. The page's scripts are compiled from services/epp/web into the
 * package's dist/web by the ordinary build, so they ship with dist/ like the rest; this module lives
 * in src/ui or dist/ui, two levels below the package either way. The chart library is a runtime
 * dependency, read from its package. The page, its style sheet and icon are strings here, so no
 * file besides the compiled output is needed at run time.
 */
const FILES: Record<string, { readonly contentType: string; read(): string | Buffer }> = {
  '/': { contentType: 'text/html; charset=utf-8', read: () => PAGE_HTML },
  '/ui/style.css': { contentType: 'text/css; charset=utf-8', read: () => STYLE_CSS },
  '/ui/icon.svg': { contentType: 'image/svg+xml', read: () => ICON_SVG },
  '/ui/uplot.js': {
    contentType: 'text/javascript; charset=utf-8',
    read: () => readFileSync(require.resolve('uplot/dist/uPlot.iife.min.js')),
  },
  '/ui/uplot.css': { contentType: 'text/css; charset=utf-8', read: () => readFileSync(require.resolve('uplot/dist/uPlot.min.css')) },
  ...Object.fromEntries(
    SCRIPT_MODULES.map((name) => [
      `/ui/${name}.js`,
      { contentType: 'text/javascript; charset=utf-8', read: () => readFileSync(fileURLToPath(new URL(`${name}.js`, SCRIPT_DIR))) },
    ]),
  ),
};

/** Reads every file of the view; a file that cannot be read is listed in `missing`, not thrown. */
export function loadViewAssets(): ViewAssets {
  const files = new Map<string, Asset>();
  const missing = new Map<string, string>();
  for (const [path, file] of Object.entries(FILES)) {
    try {
      const content = file.read();
      const body = typeof content === 'string' ? Buffer.from(content, 'utf8') : content;
      files.set(path, {
        body,
        contentType: file.contentType,
        etag: `"${createHash('sha256').update(body).digest('base64url').slice(0, 27)}"`,
      });
    } catch (error) {
      missing.set(
        path,
        `${path} cannot be read (${(error as Error).message}); the EPP package is incomplete: build it (npm run build) or reinstall it`,
      );
    }
  }
  return { files, missing };
}

/** The URL paths of the view's files. */
export const ASSET_PATHS: readonly string[] = Object.keys(FILES);
