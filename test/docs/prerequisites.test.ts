/**
 * A new user's two README commands (`npm ci && npm start`, `npm ci && npm test`) need programs
 * npm cannot install. Every program the code runs must be named in the README's prerequisites
 * table with how to install it, and `.ci/run` must install what the tests need: a fresh machine
 * once failed on Chromium, which the README did not name.
 */
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';

const root = join(import.meta.dirname, '..', '..');
/** Programs the code starts by a literal name, with spawn, spawnSync, execFile or execFileSync (node itself aside). */
const SPAWNED = /\b(?:spawn|spawnSync|execFile|execFileSync)\(\s*['"]([A-Za-z0-9_.-]+)['"]/g;
/** Programs started otherwise: Chromium through playwright-core's executablePath. */
const STARTED_OTHERWISE = ['chromium'];
/** The program of each Debian package .ci/run installs, for the tests' programs. */
const CI_PACKAGES: Record<string, string> = {
  'nats-server': 'nats-server',
  chromium: 'chromium',
  git: 'git',
  openssl: 'openssl',
  pgrep: 'procps',
};

function sourceFiles(): string[] {
  const out = execFileSync('git', ['ls-files', '-z', '--', '*.ts'], { cwd: root, encoding: 'utf8', maxBuffer: 64 * 1024 * 1024 });
  return out.split('\0').filter((path) => path.length > 0 && !path.includes('/fixtures/'));
}

function programsRun(): Map<string, string> {
  const found = new Map<string, string>();
  for (const path of sourceFiles()) {
    let text: string;
    try {
      text = readFileSync(join(root, path), 'utf8');
    } catch {
      continue;
    }
    for (const match of text.matchAll(SPAWNED)) {
      const program = match[1] as string;
      if (program !== 'node' && !found.has(program)) found.set(program, path);
    }
  }
  for (const program of STARTED_OTHERWISE) found.set(program, '(playwright-core)');
  return found;
}

function prerequisitesTable(): string {
  const readme = readFileSync(join(root, 'README.md'), 'utf8');
  const start = readme.indexOf('### Prerequisites');
  expect(start, 'README.md has a Prerequisites section').toBeGreaterThanOrEqual(0);
  const end = readme.indexOf('\n## ', start);
  return readme.slice(start, end < 0 ? undefined : end);
}

describe("the README's prerequisites", () => {
  it('name every program the code runs, each with an install command', () => {
    const table = prerequisitesTable();
    const programs = programsRun();
    expect([...programs.keys()]).toEqual(expect.arrayContaining(['nats-server', 'openssl', 'git', 'h2load', 'chromium']));
    const rows = table.split('\n').filter((line) => line.startsWith('| ') && !line.startsWith('| ---') && !line.startsWith('| program'));
    for (const [program, where] of programs) {
      const row = rows.find((line) => new RegExp(`\\b${program.replace(/[.-]/g, '\\$&')}\\b`, 'i').test(line.split('|')[1] ?? ''));
      expect(row, `${program} (run by ${where}) is in the README's prerequisites`).toBeDefined();
      expect(row, `${program}: how to install it`).toMatch(/apt-get install|snap install|nodejs\.org/);
    }
  });

  it('.ci/run installs what the tests need', () => {
    const script = readFileSync(join(root, '.ci', 'run'), 'utf8');
    for (const [program, pkg] of Object.entries(CI_PACKAGES)) expect(script, program).toMatch(new RegExp(`\\[${program}\\]=${pkg}\\b`));
    expect(script).toMatch(/\nnpm ci\nnpm test\n/);
  });
});
