import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';

// The repository carries its own contracts (docs/): no tracked file may point at design or
// reference files outside it. The patterns are assembled so this file does not match itself.
const root = join(import.meta.dirname, '..', '..');
// With its trailing slash: the EPP's own shared-state folder is not the outside one.
const FORBIDDEN = [
  ['..', '/shared/'].join(''),
  ['shared', '/reference'].join(''),
  ['DESIGN', '.md'].join(''),
  ['DESIGN', ' §'].join(''),
  ['reference-epp', '.md'].join(''),
  ['landscape', '.md'].join(''),
  ['envoy', '.md'].join(''),
  ['nats', '.md'].join(''),
];

function trackedFiles(): string[] {
  const out = execFileSync('git', ['ls-files', '-z'], { cwd: root, encoding: 'utf8', maxBuffer: 64 * 1024 * 1024 });
  return out.split('\0').filter((path) => path.length > 0 && path !== 'package-lock.json' && !/\.(png|jpg|gif|ico|woff2?)$/.test(path));
}

describe('the repository is self-contained', () => {
  it('no tracked file points at design or reference files outside the repository', () => {
    const files = trackedFiles();
    expect(files.length).toBeGreaterThan(100);
    const hits: string[] = [];
    for (const path of files) {
      let text: string;
      try {
        text = readFileSync(join(root, path), 'utf8');
      } catch {
        continue; // listed but not checked out (a sparse or partial tree)
      }
      text.split('\n').forEach((line, i) => {
        for (const pattern of FORBIDDEN) if (line.includes(pattern)) hits.push(`${path}:${i + 1}: ${line.trim().slice(0, 160)}`);
      });
    }
    expect(hits).toEqual([]);
  });
});
