import { spawn } from 'node:child_process';
import type { ChildProcess } from 'node:child_process';
import { existsSync } from 'node:fs';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { afterEach, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { post } from './helpers.js';

const BIN = fileURLToPath(new URL('../bin/spillway-sim.js', import.meta.url));
const MAIN = fileURLToPath(new URL('../dist/main.js', import.meta.url));
const children: ChildProcess[] = [];

beforeAll(() => {
  if (!existsSync(MAIN)) throw new Error(`${MAIN} is missing: run \`npm run build\` (tsc -b) before this test`);
});
afterEach(() => {
  for (const c of children.splice(0)) if (c.exitCode === null && c.signalCode === null) c.kill('SIGKILL');
});

function run(args: string[], env: NodeJS.ProcessEnv = {}): ChildProcess {
  const child = spawn(process.execPath, [BIN, ...args], { env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
  children.push(child);
  return child;
}

function exited(child: ChildProcess): Promise<number | null> {
  if (child.exitCode !== null) return Promise.resolve(child.exitCode);
  return new Promise((resolve) => child.once('exit', (code) => resolve(code)));
}

/** The URL from the first JSON log line that has one, as a parent process would read it. */
async function boundUrl(child: ChildProcess): Promise<string> {
  const lines = createInterface({ input: child.stdout as NodeJS.ReadableStream });
  for await (const line of lines) {
    const parsed = z.object({ url: z.string() }).safeParse(JSON.parse(line));
    if (parsed.success) return parsed.data.url;
  }
  throw new Error('spillway-sim exited without logging its URL');
}

async function stderrOf(child: ChildProcess): Promise<string> {
  let text = '';
  for await (const chunk of child.stderr as AsyncIterable<Buffer>) text += chunk.toString();
  return text;
}

describe('spillway-sim binary', () => {
  it('starts on an ephemeral port, serves, and stops on SIGTERM', async () => {
    const child = run(['--port', '0', '--preset', 'test', '--lora', 'sql-lora'], { SPILLWAY_TIME_SCALE: '100' });
    const url = await boundUrl(child);
    expect(url).toMatch(/^http:\/\/127\.0\.0\.1:\d+$/);
    expect((await fetch(`${url}/health`)).status).toBe(200);
    const res = await post(`${url}/v1/completions`, { model: 'sql-lora', prompt: 'hello', max_tokens: 3 });
    expect(((await res.json()) as { usage: { completion_tokens: number } }).usage.completion_tokens).toBe(3);
    child.kill('SIGTERM');
    expect(await exited(child)).toBe(0);
  });

  it('exits non-zero naming a bad flag', async () => {
    const child = run(['--port', '0', '--max-num-seqs', 'lots']);
    const [code, err] = await Promise.all([exited(child), stderrOf(child)]);
    expect(code).toBe(2);
    expect(err).toMatch(/--max-num-seqs/);
  });

  it('crashes when told to', async () => {
    const child = run(['--port', '0', '--crash-after-ms', '100', '--log-level', 'silent']);
    expect(await exited(child)).toBe(70);
  });

  it('prints --help and exits 0', async () => {
    const child = run(['--help']);
    let out = '';
    for await (const chunk of child.stdout as AsyncIterable<Buffer>) out += chunk.toString();
    expect(await exited(child)).toBe(0);
    expect(out).toMatch(/--time-scale/);
  });
});
