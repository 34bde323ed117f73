/**
 * The import rules of eslint.config.js reject what they should: each fixture in fixtures/ is linted
 * as if it stood at the path named in its `// lint as:` line, and must fail with every
 * `// expect:` message (or, with none, pass). The fixtures are not real code: ESLint ignores their
 * own folder and TypeScript does not compile them.
 */
import { readdirSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { ESLint } from 'eslint';
import { beforeAll, describe, expect, it } from 'vitest';

const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..', '..');
const FIXTURES = join(ROOT, 'test', 'lint', 'fixtures');

interface Fixture {
  file: string;
  code: string;
  lintAs: string;
  expected: string[];
}

function readFixture(file: string): Fixture {
  const code = readFileSync(join(FIXTURES, file), 'utf8');
  const lintAs = /^\/\/ lint as: (\S+)$/m.exec(code)?.[1];
  if (!lintAs) throw new Error(`${file}: no "// lint as:" line`);
  const expected = [...code.matchAll(/^\/\/ expect: (.+)$/gm)].map((m) => m[1]!);
  return { file, code, lintAs, expected };
}

const fixtures = readdirSync(FIXTURES)
  .filter((f) => f.endsWith('.fixture.ts'))
  .sort()
  .map(readFixture);

describe('import rules (eslint-plugin-boundaries)', () => {
  let eslint: ESLint;
  beforeAll(() => {
    // The fixtures are linted at paths no TypeScript project holds, so without type information:
    // the import rules need none, and the typed rules would refuse to parse them.
    eslint = new ESLint({
      cwd: ROOT,
      overrideConfig: {
        languageOptions: { parserOptions: { project: null, projectService: false } },
        rules: {
          '@typescript-eslint/no-floating-promises': 'off',
          '@typescript-eslint/no-misused-promises': 'off',
          '@typescript-eslint/await-thenable': 'off',
        },
      },
    });
  });

  const lint = async (fixture: Fixture) => {
    const [result] = await eslint.lintText(fixture.code, { filePath: join(ROOT, fixture.lintAs) });
    return (result?.messages ?? []).map((m) => `${m.ruleId ?? 'parse'}: ${m.message}`);
  };

  it('has fixtures that must fail and fixtures that must pass', () => {
    expect(fixtures.filter((f) => f.expected.length > 0).length).toBeGreaterThanOrEqual(8);
    expect(fixtures.filter((f) => f.expected.length === 0).length).toBeGreaterThanOrEqual(2);
  });

  for (const fixture of fixtures) {
    const what = fixture.expected.length > 0 ? 'is rejected' : 'is accepted';
    it(`${fixture.file} (as ${fixture.lintAs}) ${what}`, async () => {
      const messages = await lint(fixture);
      if (fixture.expected.length === 0) {
        expect(messages).toEqual([]);
        return;
      }
      for (const message of messages) expect(message).toMatch(/^boundaries\/dependencies: /);
      for (const expected of fixture.expected)
        expect(
          messages.some((m) => m.includes(expected)),
          `${expected}\nin ${messages.join('\n')}`,
        ).toBe(true);
    }, 60_000);
  }
});
