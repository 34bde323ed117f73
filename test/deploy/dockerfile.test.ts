/**
 * The Dockerfile's structure, read with a Dockerfile parser (dockerfile-ast), since no image can be
 * built here: a build stage that runs `npm ci` then `npm prune --omit=dev` and gathers only what
 * runs; a Node 20 runtime stage that copies that alone, runs as a numeric non-root user, and
 * starts whichever binary the command names. The checks can fail: each is tried on a broken copy.
 */
import { readFileSync, readdirSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { DockerfileParser, type Copy, type Instruction } from 'dockerfile-ast';
import { describe, expect, it } from 'vitest';
import { loadTopology } from '../../infra/topology.js';

const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..', '..');
const DOCKERFILE = readFileSync(join(ROOT, 'Dockerfile'), 'utf8');
const DOCKERIGNORE = readFileSync(join(ROOT, '.dockerignore'), 'utf8')
  .split('\n')
  .map((l) => l.trim())
  .filter((l) => l.length > 0 && !l.startsWith('#'));

/** Every binary the workspaces declare. */
const BINARIES = ['packages', 'services'].flatMap((group) =>
  readdirSync(join(ROOT, group)).flatMap((name) => {
    const pkg = JSON.parse(readFileSync(join(ROOT, group, name, 'package.json'), 'utf8')) as { bin?: Record<string, string> };
    return Object.keys(pkg.bin ?? {});
  }),
);

/** Problems with a Dockerfile's structure; empty when it follows the rules above. */
function dockerfileProblems(text: string): string[] {
  const problems: string[] = [];
  const dockerfile = DockerfileParser.parse(text);
  const instructions = dockerfile.getInstructions();
  const froms = dockerfile.getFROMs();
  if (froms.length !== 2) return [`expected two stages (build, runtime), found ${froms.length}`];
  const [build, runtime] = froms as [(typeof froms)[number], (typeof froms)[number]];
  const args = new Map(dockerfile.getARGs().map((a) => [a.getProperty()?.getName(), a.getProperty()?.getValue()]));
  const baseOf = (from: (typeof froms)[number]) =>
    (from.getImage() ?? '').replace(/^\$\{?(\w+)\}?$/, (_, name: string) => args.get(name) ?? '');
  for (const from of froms) {
    if (!/^node:20[.\w-]*$/.test(baseOf(from)))
      problems.push(`stage ${from.getBuildStage() ?? '?'}: base image ${baseOf(from)} is not Node 20`);
  }
  if (build.getBuildStage() !== 'build') problems.push('the first stage is not named build');
  const line = (i: Instruction) => i.getRange().start.line;
  const stageOf = (i: Instruction) => (line(i) < line(runtime) ? 'build' : 'runtime');
  const runs = instructions.filter((i) => i.getKeyword() === 'RUN');
  const buildRuns = runs.filter((i) => stageOf(i) === 'build').map((i) => i.getArgumentsContent() ?? '');
  const ci = buildRuns.findIndex((r) => /^npm ci\b/.test(r));
  const prune = buildRuns.findIndex((r) => /^npm prune --omit=dev\b/.test(r));
  if (ci < 0) problems.push('the build stage does not run npm ci');
  if (prune < 0) problems.push('the build stage does not run npm prune --omit=dev');
  if (ci >= 0 && prune >= 0 && prune < ci) problems.push('npm prune runs before npm ci');
  const gather = buildRuns.find((r) => r.includes('/out'));
  if (!gather || !/\bdist\b/.test(gather) || !/package\.json/.test(gather) || /\bsrc\b/.test(gather))
    problems.push('the build stage does not gather package.json and dist/ (and no src/) into /out');
  if (runs.some((i) => stageOf(i) === 'runtime')) problems.push('the runtime stage runs commands (it should only copy)');
  const runtimeCopies = instructions.filter((i) => ['COPY', 'ADD'].includes(i.getKeyword()) && stageOf(i) === 'runtime');
  if (runtimeCopies.length === 0) problems.push('the runtime stage copies nothing');
  for (const copy of runtimeCopies) {
    const from = (copy as Partial<Pick<Copy, 'getFlags'>>)
      .getFlags?.()
      .find((f) => f.getName() === 'from')
      ?.getValue();
    const source = copy.getArguments()[0]?.getValue();
    if (from !== 'build' || !['/out', '/out/'].includes(source ?? '')) {
      problems.push(
        `runtime copies something other than the build stage's /out: ${copy.getKeyword()} ${copy.getArgumentsContent() ?? ''} (from ${from ?? 'the context'})`,
      );
    }
  }
  const users = instructions.filter((i) => i.getKeyword() === 'USER' && stageOf(i) === 'runtime');
  const user = users.at(-1)?.getArgumentsContent() ?? '';
  const uid = /^(\d+)(:\d+)?$/.exec(user)?.[1];
  if (uid === undefined) problems.push(`the runtime USER must be numeric (runAsNonRoot checks it), found "${user}"`);
  else if (Number(uid) === 0) problems.push('the runtime USER is root');
  const env = instructions
    .filter((i) => i.getKeyword() === 'ENV' && stageOf(i) === 'runtime')
    .map((i) => i.getArgumentsContent() ?? '')
    .join('\n');
  if (!/NODE_ENV=production/.test(env)) problems.push('NODE_ENV=production is not set');
  if (!/PATH=\/app\/node_modules\/\.bin:/.test(env)) problems.push('the binaries are not on PATH (the command names one)');
  for (const keyword of ['CMD', 'ENTRYPOINT']) {
    const found = instructions.filter((i) => i.getKeyword() === keyword).at(-1);
    if (found && !(found.getArgumentsContent() ?? '').trim().startsWith('[')) problems.push(`${keyword} is not in exec (JSON) form`);
  }
  const cmd = instructions.filter((i) => i.getKeyword() === 'CMD').at(-1);
  const program = /^\s*\["([^"]+)"/.exec(cmd?.getArgumentsContent() ?? '')?.[1];
  if (program === undefined || !BINARIES.includes(program)) problems.push(`the default command ${program} is not one of the binaries`);
  if (/\bVOLUME\b/.test(text)) problems.push('VOLUME would need a writable filesystem');
  return problems;
}

describe('Dockerfile', () => {
  it('follows the structure: npm ci, prune, copy only what runs, Node 20, non-root, command picks the binary', () => {
    expect(dockerfileProblems(DOCKERFILE)).toEqual([]);
  });

  it('the checks fail on broken variants', () => {
    const broken = (from: string | RegExp, to: string) => dockerfileProblems(DOCKERFILE.replace(from, to)).join('\n');
    expect(broken('USER 1000:1000', 'USER node')).toMatch(/must be numeric/);
    expect(broken('USER 1000:1000', 'USER 0')).toMatch(/is root/);
    expect(broken('RUN npm prune --omit=dev', 'RUN true')).toMatch(/does not run npm prune/);
    expect(broken('RUN npm ci', 'RUN npm install')).toMatch(/does not run npm ci/);
    expect(broken('COPY --from=build --chown=0:0 /out/ /app/', 'COPY --from=build /src /app')).toMatch(
      /other than the build stage's \/out/,
    );
    expect(broken('ARG NODE_IMAGE=node:20-bookworm-slim', 'ARG NODE_IMAGE=node:22-bookworm-slim')).toMatch(/not Node 20/);
    expect(broken('CMD ["spillway-epp", "--help"]', 'CMD spillway-epp --help')).toMatch(/exec \(JSON\) form/);
    expect(broken('CMD ["spillway-epp", "--help"]', 'CMD ["spillway-nope"]')).toMatch(/not one of the binaries/);
    expect(broken('ENV NODE_ENV=production', 'RUN echo hi')).toMatch(/runs commands/);
  });

  it('.dockerignore keeps host builds and unneeded trees out, and the workspaces and lockfile in', () => {
    for (const excluded of ['.git', '**/node_modules', '**/dist', 'test', 'docs']) expect(DOCKERIGNORE).toContain(excluded);
    for (const needed of ['packages', 'services', 'package.json', 'package-lock.json', 'tsconfig.json', 'tsconfig.base.json']) {
      expect(
        DOCKERIGNORE.some((pattern) => pattern === needed || pattern === `${needed}/` || pattern === '*'),
        needed,
      ).toBe(false);
    }
  });

  it('the Kubernetes manifests run this one image, each container naming one of its binaries', () => {
    const topology = loadTopology();
    const manifests = readdirSync(join(ROOT, 'infra', 'k8s'))
      .filter((f) => f.endsWith('.yaml'))
      .map((f) => readFileSync(join(ROOT, 'infra', 'k8s', f), 'utf8'))
      .join('\n');
    const commands = [...manifests.matchAll(/image: (\S+)\n\s+command:\n\s+- (\S+)/g)]
      .filter(([, image]) => image === topology.image)
      .map(([, , command]) => command!);
    expect(new Set(commands)).toEqual(
      new Set(['spillway-epp', 'spillway-xds', 'spillway-collector', 'spillway-sim', 'spillway-provision']),
    );
    for (const command of commands) expect(BINARIES).toContain(command);
  });
});
