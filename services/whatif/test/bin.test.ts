import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { smallScenario } from './helpers.js';

const BIN = fileURLToPath(new URL('../bin/spillway-whatif.js', import.meta.url));
const MAIN = fileURLToPath(new URL('../dist/main.js', import.meta.url));
let dir: string;
/** Whole runs of the binary (several simulations each): generous, as a busy machine stretches them. */
const RUN_TIMEOUT_MS = 180_000;

beforeAll(() => {
  if (!existsSync(MAIN)) throw new Error(`${MAIN} is missing: run \`npm run build\` (tsc -b) before this test`);
  dir = mkdtempSync(join(tmpdir(), 'whatif-bin-'));
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

function run(args: string[]): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [BIN, ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
    child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    child.on('error', reject);
    child.on('close', (code) => resolve({ code, stdout, stderr }));
  });
}

function file(name: string, content: unknown): string {
  const path = join(dir, name);
  writeFileSync(path, typeof content === 'string' ? content : JSON.stringify(content));
  return path;
}

describe('spillway-whatif binary', () => {
  it(
    'prints the per-strategy table with a progress line, and writes the JSON',
    async () => {
      const scenario = file(
        'ok.json',
        smallScenario({
          durationS: 8,
          strategies: ['random', 'zone-local', 'spillway'],
          faults: [{ atS: 4, kind: 'collector-down', zone: 'zone-b' }],
        }),
      );
      const json = join(dir, 'out.json');
      const r = await run(['--scenario', scenario, '--json', json, '--workers', '2']);
      expect(r.stderr).toMatch(/\[3\/3\] /);
      expect(r.code).toBe(0);
      expect(r.stdout).toMatch(/^strategy +TTFT p50 \(ms\) +p90 +p99/m);
      for (const s of ['random', 'zone-local', 'spillway']) expect(r.stdout).toMatch(new RegExp(`^${s} `, 'm'));
      expect(r.stdout).toMatch(/picks uniformly over every ready replica/);
      expect(r.stdout).toMatch(/collector-down zone-b, 4–8 s/);
      const report = JSON.parse(readFileSync(json, 'utf8')) as {
        scenario: string;
        seeds: number[];
        overflowShare: number;
        results: { strategy: string; seed: number; windows: unknown[] }[];
      };
      expect(report.scenario).toBe('small');
      expect(report.results.map((x) => x.strategy)).toEqual(['random', 'zone-local', 'spillway']);
      expect(report.results[0]?.windows).toHaveLength(1);

      // Worker threads or not, the same JSON.
      const json0 = join(dir, 'out0.json');
      expect((await run(['--scenario', scenario, '--json', json0, '--workers', '0', '--quiet'])).code).toBe(0);
      expect(readFileSync(json0, 'utf8')).toBe(readFileSync(json, 'utf8'));
    },
    RUN_TIMEOUT_MS,
  );

  it(
    '--load, --seeds and --strategies override the file',
    async () => {
      const scenario = file('ok2.json', smallScenario({ durationS: 6 }));
      const json = join(dir, 'out2.json');
      const r = await run([
        '--scenario',
        scenario,
        '--load',
        '0.3',
        '--seeds',
        '1,2',
        '--strategies',
        'spillway',
        '--json',
        json,
        '--quiet',
      ]);
      expect(r.code).toBe(0);
      const report = JSON.parse(readFileSync(json, 'utf8')) as {
        load: number;
        seeds: number[];
        results: { strategy: string; seed: number }[];
      };
      expect(report.load).toBe(0.3);
      expect(report.results.map((x) => `${x.strategy}/${x.seed}`)).toEqual(['spillway/1', 'spillway/2']);
    },
    RUN_TIMEOUT_MS,
  );

  const bad: [string, string[], RegExp][] = [
    ['a bad field', ['--scenario', 'BAD'], /BAD: zones\.0\.replicas: /],
    ['a missing file', ['--scenario', '/nonexistent/scenario.yaml'], /cannot read/],
    ['no --scenario', [], /--scenario/],
    ['an unknown strategy', ['--scenario', 'OK', '--strategies', 'magic'], /--strategies: magic not in the scenario/],
    ['a bad --load', ['--scenario', 'OK', '--load', '-1'], /--load/],
    ['a --sweep without values', ['--scenario', 'OK', '--sweep', 'zoneBiasMs'], /--sweep: .*FIELD=v1,v2/],
    ['a --sweep of words', ['--scenario', 'OK', '--sweep', 'zoneBiasMs=low,high'], /--sweep/],
    ['a --sweep of an unknown field', ['--scenario', 'OK', '--sweep', 'zoneBais=0,8'], /--sweep: zoneBais=0: .*zoneBais/],
  ];
  it.each(bad)('exits 2 with a clear message on %s', async (_title, args, pattern) => {
    const badFile = file(
      'bad.yaml',
      'name: bad\ndurationS: 10\nzones:\n  - { zone: a, region: r, replicas: 0 }\nworkload: { kind: sharegpt }\nload: { clusterFraction: 0.5 }\n',
    );
    const okFile = file('ok3.json', smallScenario());
    const r = await run(args.map((a) => (a === 'BAD' ? badFile : a === 'OK' ? okFile : a)));
    expect(r.code).toBe(2);
    expect(r.stderr.replace(badFile, 'BAD')).toMatch(pattern);
    expect(r.stdout).toBe('');
  });

  it(
    '--sweep prints the latency / cross-zone curve beside every other strategy',
    async () => {
      const scenario = file('ok4.json', smallScenario({ durationS: 6, strategies: ['random', 'spillway'] }));
      const r = await run(['--scenario', scenario, '--sweep', 'zoneBiasMs=0,32', '--quiet', '--workers', '0']);
      expect(r.code).toBe(0);
      expect(r.stdout).toMatch(/spillway: the latency \/ cross-zone curve over zoneBiasMs/);
      expect(r.stdout).toMatch(/spillway zoneBiasMs=0 +\d+/);
      expect(r.stdout).toMatch(/spillway zoneBiasMs=32 +\d+/);
    },
    RUN_TIMEOUT_MS,
  );

  it('answers --help', async () => {
    const r = await run(['--help']);
    expect(r.code).toBe(0);
    expect(r.stdout).toMatch(/--scenario FILE/);
    expect(r.stdout).toMatch(/SPILLWAY_SEEDS/);
    expect(r.stdout).toMatch(/--sweep FIELD=a,b/);
  });
});
