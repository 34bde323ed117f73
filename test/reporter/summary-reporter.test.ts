/**
 * The plain summary line of test/summary-reporter.ts, from a real vitest run over fixture files:
 * a file that fails to load, or whose hook throws, counts as a failure and is named, so the line
 * never reads "0 failed" for a run that failed (a fresh machine without Chromium did).
 */
import { spawnSync } from 'node:child_process';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';

const ROOT = join(import.meta.dirname, '..', '..');
const CONFIG = join(import.meta.dirname, 'fixtures', 'vitest.config.ts');

function run(pattern: string): { status: number | null; summary: string } {
  const result = spawnSync(process.execPath, [join(ROOT, 'node_modules', 'vitest', 'vitest.mjs'), 'run', '--config', CONFIG], {
    cwd: ROOT,
    encoding: 'utf8',
    env: { ...process.env, SPILLWAY_REPORTER_FIXTURES: pattern, CI: '1' },
    timeout: 120_000,
  });
  const lines = result.stdout.split('\n').filter((line) => /^\d+ passed, \d+ failed, \d+ skipped/.test(line));
  expect(lines, result.stdout + result.stderr).toHaveLength(1);
  return { status: result.status, summary: lines[0] as string };
}

describe('the summary line', () => {
  it('counts a file whose hook threw, and one that failed to load, as failures and names them', () => {
    const { status, summary } = run('*.fixture.ts');
    expect(status).not.toBe(0);
    expect(summary).toMatch(/^1 passed, 2 failed, 3 skipped \(2 files failed outside their tests: /);
    expect(summary).toContain('hook-fails.fixture.ts');
    expect(summary).toContain('load-fails.fixture.ts');
  });

  it('reads as before for a run without such files', () => {
    const { status, summary } = run('passes.fixture.ts');
    expect(status).toBe(0);
    expect(summary).toBe('1 passed, 0 failed, 1 skipped');
  });
});
