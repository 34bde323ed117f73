import { createRequire } from 'node:module';
import { z } from 'zod';

/**
 * What this build is, for `inference_extension_info` and the start log line: the version from the
 * EPP's package.json (next to both src/ and dist/, and shipped in the image), and the source
 * commit when the build recorded one in SPILLWAY_BUILD_COMMIT (e.g. an image build argument).
 */
const packageJson = z.object({ name: z.string(), version: z.string() }).parse(createRequire(import.meta.url)('../../package.json'));

export const BUILD = {
  name: packageJson.name,
  version: packageJson.version,
  ref: `v${packageJson.version}`,
  commit: /^[0-9a-f]{7,40}$/i.test(process.env['SPILLWAY_BUILD_COMMIT'] ?? '')
    ? (process.env['SPILLWAY_BUILD_COMMIT'] as string)
    : 'unknown',
} as const;
