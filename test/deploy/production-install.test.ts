/**
 * A production install works: the repository's tracked files are copied into a temporary
 * directory, built with `npm ci`, stripped with `npm prune --omit=dev` (as the Dockerfile does),
 * and then every binary answers `--help`, every import a built workspace makes is one of its own
 * declared dependencies and resolves, and `spillway-epp` starts against a private nats-server and
 * reports SERVING. A runtime dependency declared only among devDependencies fails here.
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { cpSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { builtinModules } from 'node:module';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ServingStatus } from '@spillway/protocol';
import { eventually, freePort, healthStatus, startNatsServer, type NatsServerHandle } from '@spillway/testkit';

const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..', '..');
const INSTALL_TIMEOUT_MS = 9 * 60_000;

interface Workspace {
  dir: string;
  name: string;
  bin: Record<string, string>;
  dependencies: Record<string, string>;
}

function run(command: string, args: string[], cwd: string, timeout = INSTALL_TIMEOUT_MS): string {
  const result = spawnSync(command, args, { cwd, encoding: 'utf8', timeout, env: { ...process.env, npm_config_update_notifier: 'false' } });
  if (result.status !== 0)
    throw new Error(
      `${command} ${args.join(' ')} failed (${result.status ?? result.signal}):\n${result.stdout}\n${result.stderr}`.slice(-4000),
    );
  return result.stdout;
}

function workspacesOf(root: string): Workspace[] {
  return ['packages', 'services'].flatMap((group) =>
    readdirSync(join(root, group)).map((name) => {
      const dir = join(root, group, name);
      const pkg = JSON.parse(readFileSync(join(dir, 'package.json'), 'utf8')) as {
        name: string;
        bin?: Record<string, string>;
        dependencies?: Record<string, string>;
      };
      return { dir, name: pkg.name, bin: pkg.bin ?? {}, dependencies: pkg.dependencies ?? {} };
    }),
  );
}

/** Bare import specifiers of the compiled JavaScript of a workspace (static and dynamic). */
function importsOf(dist: string): Set<string> {
  const found = new Set<string>();
  const walk = (dir: string) => {
    for (const entry of readdirSync(dir, { withFileTypes: true })) {
      const path = join(dir, entry.name);
      if (entry.isDirectory()) walk(path);
      else if (entry.name.endsWith('.js')) {
        const text = readFileSync(path, 'utf8');
        for (const m of text.matchAll(/(?:\bfrom\s*|\bimport\s*\(\s*|^\s*import\s+)['"]([^'"./][^'"]*)['"]/gm)) found.add(m[1]!);
      }
    }
  };
  walk(dist);
  return found;
}

const packageName = (specifier: string) =>
  specifier.startsWith('@') ? specifier.split('/').slice(0, 2).join('/') : specifier.split('/')[0]!;
const BUILTIN = new Set(builtinModules);

describe('production install (npm ci, npm prune --omit=dev)', () => {
  let copy: string;
  let workspaces: Workspace[];
  let nats: NatsServerHandle | undefined;
  let epp: ChildProcess | undefined;

  beforeAll(() => {
    copy = mkdtempSync(join(tmpdir(), 'spillway-prod-'));
    const tracked = run('git', ['ls-files', '-z'], ROOT, 60_000)
      .split('\0')
      .filter((f) => f.length > 0);
    for (const file of tracked) {
      if (!existsSync(join(ROOT, file))) continue; // deleted in the work tree, not yet committed
      mkdirSync(dirname(join(copy, file)), { recursive: true });
      cpSync(join(ROOT, file), join(copy, file));
    }
    run('npm', ['ci', '--no-audit', '--no-fund', '--prefer-offline'], copy);
    expect(existsSync(join(copy, 'node_modules', 'typescript')), 'npm ci installs the dev tools').toBe(true);
    run('npm', ['prune', '--omit=dev', '--no-audit', '--no-fund'], copy);
    workspaces = workspacesOf(copy);
  }, INSTALL_TIMEOUT_MS * 2);

  // Removing a full install (node_modules included) can take over 30 s on a busy disk.
  afterAll(async () => {
    epp?.kill('SIGKILL');
    await nats?.stop();
    if (copy) rmSync(copy, { recursive: true, force: true });
  }, 5 * 60_000);

  it('drops the dev dependencies and keeps the built workspaces', () => {
    for (const dev of ['typescript', 'vitest', 'eslint', 'tsx', 'kubernetes-models'])
      expect(existsSync(join(copy, 'node_modules', dev)), dev).toBe(false);
    for (const w of workspaces) expect(existsSync(join(w.dir, 'dist', 'index.js')), `${w.name} is built`).toBe(true);
  });

  it('every import of the built code is a declared dependency of its workspace, and resolves', () => {
    for (const w of workspaces) {
      if (w.name === '@spillway/testkit') continue; // tests only; never in the image
      for (const specifier of importsOf(join(w.dir, 'dist'))) {
        const name = packageName(specifier);
        if (specifier.startsWith('node:') || BUILTIN.has(name) || name === w.name) continue;
        expect(Object.keys(w.dependencies), `${w.name} imports ${specifier}`).toContain(name);
        const resolved = spawnSync(process.execPath, ['--input-type=module', '-e', `await import(${JSON.stringify(specifier)})`], {
          cwd: w.dir,
          encoding: 'utf8',
        });
        expect(resolved.status, `${w.name}: import ${specifier}\n${resolved.stderr}`).toBe(0);
      }
    }
  }, 120_000);

  it('every binary answers --help', () => {
    const bins = workspaces.flatMap((w) => Object.keys(w.bin));
    expect(bins).toEqual(
      expect.arrayContaining([
        'spillway-epp',
        'spillway-collector',
        'spillway-sim',
        'spillway-gateway',
        'spillway-fleet',
        'spillway-provision',
      ]),
    );
    for (const bin of bins) {
      const result = spawnSync(join(copy, 'node_modules', '.bin', bin), ['--help'], { cwd: copy, encoding: 'utf8', timeout: 60_000 });
      expect(result.status, `${bin} --help: ${result.stderr}`).toBe(0);
      expect(result.stdout, bin).toMatch(new RegExp(`^Usage: ${bin} `));
    }
  }, 120_000);

  it('spillway-epp starts against NATS and reports SERVING', async () => {
    nats = await startNatsServer({ forcePrivate: true });
    const [grpc, health, metrics] = [await freePort(), await freePort(), await freePort()];
    let output = '';
    const child = spawn(
      join(copy, 'node_modules', '.bin', 'spillway-epp'),
      [
        '--pool',
        'llama',
        '--zone',
        'zone-a',
        '--nats',
        nats.url,
        '--host',
        '127.0.0.1',
        '--grpc-port',
        String(grpc),
        '--health-port',
        String(health),
        '--metrics-port',
        String(metrics),
      ],
      { cwd: copy, stdio: ['ignore', 'pipe', 'pipe'] },
    );
    epp = child;
    child.stdout?.on('data', (c: Buffer) => (output = (output + c.toString()).slice(-4000)));
    child.stderr?.on('data', (c: Buffer) => (output = (output + c.toString()).slice(-4000)));
    await eventually(
      async () => {
        if (child.exitCode !== null) throw new Error(`spillway-epp exited (${child.exitCode}):\n${output}`);
        expect(await healthStatus(health, 'readiness')).toBe(ServingStatus.SERVING);
      },
      60_000,
      200,
    );
    // The operators' view ships too: its compiled scripts (dist/) and its chart library (a runtime dependency).
    for (const path of ['/', '/ui/app.js', '/ui/uplot.js', '/api/state']) {
      expect((await fetch(`http://127.0.0.1:${metrics}${path}`)).status, path).toBe(200);
    }
    const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
    child.kill('SIGTERM');
    expect(await exited, output).toBe(0);
  }, 90_000);
});
