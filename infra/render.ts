/**
 * `npm run render`: renders everything that names zones from the topology (infra/topology.yaml):
 * the NATS configs for a laptop (infra/nats/*.conf), one Envoy config per zone
 * (infra/envoy/envoy-<zone>.yaml) and the Kubernetes manifests (infra/k8s/*.yaml).
 *
 *   npm run render                               rewrite the committed files
 *   npm run render -- --check                    exit 1 when a committed file differs
 *   npm run render -- --topology my.yaml --out deploy/   render your own deployment elsewhere
 *   npm run render -- --topology my.yaml --secrets       print a Secret with random NATS passwords
 */
import { randomBytes } from 'node:crypto';
import { mkdir, readFile, writeFile } from 'node:fs/promises';
import { dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { stringify } from 'yaml';
import { z } from 'zod';
import { CliError, parseCommandLine, renderHelp } from '@spillway/cli';
import { envoyFileOf, renderEnvoyConfig } from './envoy/render.js';
import { credentialsSecret, kustomization, manifestFiles, type ManifestFile } from './k8s/manifests.js';
import { defaultConfigFiles } from './nats/topology.js';
import { loadTopology, TOPOLOGY_FILE, type Topology } from './topology.js';

const INFRA = dirname(fileURLToPath(import.meta.url));

const FLAGS = {
  topology: { description: 'the topology file (default infra/topology.yaml)', schema: z.string().min(1).optional(), placeholder: 'FILE' },
  out: {
    description: 'write into DIR/{k8s,envoy,nats} instead of the repository (default: infra/)',
    schema: z.string().min(1).optional(),
    placeholder: 'DIR',
  },
  check: {
    description: 'compare instead of writing; exit 1 naming the files that differ',
    schema: z.boolean().default(false),
    boolean: true,
  },
  secrets: {
    description: 'print the NATS credentials Secret with fresh random passwords to stdout (and write nothing else)',
    schema: z.boolean().default(false),
    boolean: true,
  },
};

const SUMMARY = 'Renders the NATS configs, the per-zone Envoy configs and the Kubernetes manifests from one topology file.';

const GENERATED = (what: string) =>
  `# Generated from infra/topology.yaml by infra/render.ts (npm run render); do not edit by hand.\n${what}`;

function comment(text: string): string {
  return text
    .split('\n')
    .map((line) => `# ${line}`.trimEnd())
    .join('\n');
}

/** One manifest file as YAML: the header, then one document per object. */
export function manifestText(file: ManifestFile): string {
  const docs = file.objects.map((o) => stringify(o, { lineWidth: 0 }).trimEnd());
  return `${GENERATED(comment(file.header))}\n---\n${docs.join('\n---\n')}\n`;
}

/** Relative path (from the output root) -> contents, for everything rendered from `topology`. */
export function renderAll(topology: Topology, options: { laptopNats: boolean }): Map<string, string> {
  const out = new Map<string, string>();
  const files = manifestFiles(topology);
  for (const file of files) out.set(join('k8s', file.file), manifestText(file));
  out.set(
    join('k8s', 'kustomization.yaml'),
    `${GENERATED('# kubectl apply -k <this folder>: everything but the credentials (docs/deploy.md).')}\n${stringify(kustomization(files), { lineWidth: 0 })}`,
  );
  for (const zone of topology.zones) out.set(join('envoy', envoyFileOf(zone.name)), renderEnvoyConfig(topology, zone.name));
  // The laptop configs (loopback, fixed ports) are the demo's and the tests'; only the committed
  // topology renders them.
  if (options.laptopNats) for (const [file, text] of Object.entries(defaultConfigFiles())) out.set(join('nats', file), text);
  return out;
}

/** A random password nats-server and a URL both take as is: a letter, then base64url. */
export function randomPassword(): string {
  return `p${randomBytes(24).toString('base64url')}`;
}

async function main(): Promise<number> {
  let flags;
  try {
    const parsed = parseCommandLine(FLAGS, process.argv.slice(2), process.env);
    if (parsed.help) {
      process.stdout.write(renderHelp('npm run render --', SUMMARY, FLAGS));
      return 0;
    }
    flags = parsed.values;
  } catch (error) {
    if (error instanceof CliError) {
      process.stderr.write(`error: ${error.message}\n`);
      return 2;
    }
    throw error;
  }
  const topologyPath = resolve(flags.topology ?? TOPOLOGY_FILE);
  const topology = loadTopology(topologyPath);
  if (flags.secrets) {
    process.stdout.write(
      `# NATS passwords for the topology of ${relative(process.cwd(), topologyPath) || topologyPath}. A SECRET: keep it out of git.\n`,
    );
    process.stdout.write(stringify(credentialsSecret(topology, randomPassword), { lineWidth: 0 }));
    return 0;
  }
  const root = flags.out === undefined ? INFRA : resolve(flags.out);
  const rendered = renderAll(topology, { laptopNats: topologyPath === TOPOLOGY_FILE });
  const differing: string[] = [];
  for (const [path, text] of rendered) {
    const target = join(root, path);
    if (flags.check) {
      const current = await readFile(target, 'utf8').catch(() => undefined);
      if (current !== text) differing.push(relative(process.cwd(), target));
      continue;
    }
    await mkdir(dirname(target), { recursive: true });
    await writeFile(target, text);
    process.stdout.write(`wrote ${relative(process.cwd(), target)}\n`);
  }
  if (differing.length > 0) {
    process.stderr.write(`out of date (run npm run render):\n${differing.map((f) => `  ${f}`).join('\n')}\n`);
    return 1;
  }
  if (flags.check) process.stdout.write(`${rendered.size} files match the topology\n`);
  return 0;
}

// Run only as a script, so the tests can import renderAll.
if (process.argv[1] !== undefined && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  main().then(
    (code) => process.exit(code),
    (error: unknown) => {
      process.stderr.write(`error: ${error instanceof Error ? error.message : String(error)}\n`);
      process.exit(1);
    },
  );
}
