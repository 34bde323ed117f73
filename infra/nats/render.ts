/**
 * Rewrites the committed configs of infra/nats from topology.ts (the single source of truth):
 *   node --conditions=@spillway/source --import tsx infra/nats/render.ts
 * test/infra/nats-topology.test.ts fails when the committed files and the generator disagree.
 */
import { writeFile } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { defaultConfigFiles } from './topology.js';

const here = dirname(fileURLToPath(import.meta.url));
for (const [file, text] of Object.entries(defaultConfigFiles())) {
  await writeFile(join(here, file), text);
  console.log(`wrote infra/nats/${file}`);
}
