// Flags: parsing and validation in-process, then the built binary (`npx tsc -b services/gateway`).
import { spawn } from 'node:child_process';
import type { ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { CliError } from '@spillway/cli';
import { afterEach, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { parseGatewayArgs } from '../src/index.js';
import { completion, fakeEpp, post, sim } from './fixtures.js';

const BIN = fileURLToPath(new URL('../bin/spillway-gateway.js', import.meta.url));
const MAIN = fileURLToPath(new URL('../dist/main.js', import.meta.url));
const dir = mkdtempSync(join(tmpdir(), 'spillway-gateway-'));
const children: ChildProcess[] = [];

function file(name: string, text: string): string {
  const path = join(dir, name);
  writeFileSync(path, text);
  return path;
}

afterEach(() => {
  for (const child of children.splice(0)) if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
});

function run(args: string[], env: NodeJS.ProcessEnv = {}): ChildProcess {
  const child = spawn(process.execPath, [BIN, ...args], { env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
  children.push(child);
  return child;
}

async function finished(child: ChildProcess): Promise<{ code: number | null; stdout: string; stderr: string }> {
  let stdout = '';
  let stderr = '';
  child.stdout?.on('data', (d: Buffer) => (stdout += d.toString()));
  child.stderr?.on('data', (d: Buffer) => (stderr += d.toString()));
  const code = child.exitCode ?? (await new Promise<number | null>((resolve) => child.once('exit', (c) => resolve(c))));
  return { code, stdout, stderr };
}

async function boundUrl(child: ChildProcess): Promise<string> {
  for await (const line of createInterface({ input: child.stdout as NodeJS.ReadableStream })) {
    const parsed = z.object({ msg: z.literal('listening'), url: z.string() }).safeParse(JSON.parse(line));
    if (parsed.success) return parsed.data.url;
  }
  throw new Error('spillway-gateway exited without logging its URL');
}

describe('parseGatewayArgs', () => {
  const endpoints = file('endpoints.yaml', '- { address: 10.0.0.1:8000, zone: a }\n- address: "[::1]:8001"\n  pod: p\n');

  it('reads flags, environment and the endpoints file', () => {
    const parsed = parseGatewayArgs(['--epp', 'localhost:9002', '--endpoints', endpoints, '--zone', 'a', '--subset-hint', 'off'], {
      SPILLWAY_RETRIES: '4',
    });
    if (parsed.help) throw new Error('unexpected help');
    expect(parsed.options).toMatchObject({
      epp: 'localhost:9002',
      zone: 'a',
      subsetHint: false,
      retries: 4,
      port: 8080,
      host: '127.0.0.1',
    });
    expect(parsed.options.endpoints).toEqual([{ address: '10.0.0.1:8000', zone: 'a' }, { address: '[::1]:8001' }]);
    expect(parsed.options.eppTls).toBeUndefined();
  });

  it("defaults to the shipped Envoy config's ext_proc behaviour and reads the flags that change it", () => {
    const base = ['--epp', 'h:1', '--endpoints', endpoints];
    const defaults = parseGatewayArgs(base, {});
    if (defaults.help) throw new Error('unexpected help');
    expect(defaults.options).toMatchObject({
      requestBodyMode: 'full-duplex',
      requestTrailerMode: 'send',
      responseHeaderMode: 'send',
      responseBodyMode: 'none',
      responseTrailerMode: 'skip',
      streamCloseOptimization: true,
      failureModeAllow: false,
      statusOnError: 500,
      eppTimeoutMs: 30_000,
      retryOn: ['5xx', 'reset', 'connect-failure'],
    });
    const changed = parseGatewayArgs(
      [
        ...base,
        '--response-body-mode',
        'full-duplex',
        '--response-trailer-mode',
        'send',
        '--ext-proc-stream-close',
        'off',
        '--failure-mode-allow',
        '--status-on-error',
        '503',
        '--retry-on',
        'gateway-error',
        '--epp-healthy-panic-threshold',
        '0',
      ],
      { SPILLWAY_REQUEST_BODY_MODE: 'buffered' },
    );
    if (changed.help) throw new Error('unexpected help');
    expect(changed.options).toMatchObject({
      requestBodyMode: 'buffered',
      responseBodyMode: 'full-duplex',
      responseTrailerMode: 'send',
      streamCloseOptimization: false,
      failureModeAllow: true,
      statusOnError: 503,
      retryOn: ['gateway-error'],
      eppHealthyPanicThreshold: 0,
    });
  });

  const bad: Array<[string[], RegExp]> = [
    [['--epp', 'nope', '--endpoints', endpoints], /--epp: must be HOST:PORT/],
    [['--epp', 'h:1', '--endpoints', endpoints, '--retries', '-1'], /--retries/],
    [['--epp', 'h:1', '--endpoints', endpoints, '--subset-hint', 'maybe'], /--subset-hint/],
    [['--epp', 'h:1', '--endpoints', endpoints, '--port', '70000'], /--port/],
    [['--epp', 'h:1'], /--endpoints: required/],
    [['--endpoints', endpoints], /--epp.*required/],
    [['--epp', 'h:1', '--endpoints', join(dir, 'missing.yaml')], /--endpoints: .*cannot read/],
    [['--epp', 'h:1', '--endpoints', file('bad.yaml', '- address: 10.0.0.1\n')], /--endpoints: .*0\.address: must be ip:port/],
    [['--epp', 'h:1', '--endpoints', endpoints, '--epp-tls-cert', endpoints], /--epp-tls-cert and --epp-tls-key/],
    [['--epp', 'h:1', '--endpoints', endpoints, '--bogus'], /bogus/],
    [['--epp', 'h:1', '--endpoints', endpoints, '--response-body-mode', 'full-duplex'], /--response-trailer-mode: must be send/],
    [['--epp', 'h:1', '--endpoints', endpoints, '--request-trailer-mode', 'skip'], /--request-trailer-mode: must be send/],
    [['--epp', 'h:1', '--endpoints', endpoints, '--response-body-mode', 'buffered'], /--response-body-mode/],
    [['--epp', 'h:1', '--endpoints', endpoints, '--retry-on', '5xx,often'], /--retry-on: unknown retry_on condition "often"/],
    [['--epp', 'h:1', '--endpoints', endpoints, '--status-on-error', '99'], /--status-on-error/],
    [['--epp', 'h:1', '--endpoints', endpoints, '--epp-healthy-panic-threshold', '101'], /--epp-healthy-panic-threshold/],
  ];
  for (const [args, message] of bad) {
    it(`rejects ${args.join(' ')}`, () => {
      expect(() => parseGatewayArgs(args, {})).toThrow(CliError);
      expect(() => parseGatewayArgs(args, {})).toThrow(message);
    });
  }

  it('names the environment variable when that is where the bad value came from', () => {
    expect(() => parseGatewayArgs(['--epp', 'h:1', '--endpoints', endpoints], { SPILLWAY_HEALTH_INTERVAL_MS: 'soon' })).toThrow(
      /SPILLWAY_HEALTH_INTERVAL_MS/,
    );
  });
});

describe('spillway-gateway binary', () => {
  beforeAll(() => {
    if (!existsSync(MAIN)) throw new Error(`${MAIN} is missing: run \`npx tsc -b services/gateway\` before this test`);
  });

  it('prints help listing its flags and environment variables', async () => {
    const result = await finished(run(['--help']));
    expect(result.code).toBe(0);
    for (const flag of [
      '--epp',
      '--endpoints',
      '--zone',
      '--retries',
      '--subset-hint',
      '--health-interval-ms',
      '--request-timeout-ms',
      '--log-level',
      'SPILLWAY_EPP',
    ]) {
      expect(result.stdout).toContain(flag);
    }
    expect(result.stdout).toMatch(/development/i);
  });

  it('exits 2 naming a bad flag', async () => {
    const result = await finished(run(['--epp', '127.0.0.1:1', '--passthrough', '--retries', 'many']));
    expect(result.code).toBe(2);
    expect(result.stderr).toContain('--retries');
  });

  it('exits 2 naming a bad environment variable', async () => {
    const result = await finished(run(['--epp', '127.0.0.1:1', '--passthrough'], { SPILLWAY_SUBSET_HINT: 'sometimes' }));
    expect(result.code).toBe(2);
    expect(result.stderr).toContain('SPILLWAY_SUBSET_HINT');
  });

  it('starts on port 0, logs its URL, serves through the EPP and stops on SIGTERM', async () => {
    const upstream = await sim();
    const epp = await fakeEpp(() => ({ destination: upstream.address }));
    const endpoints = file('live.json', JSON.stringify({ endpoints: [{ address: upstream.address, zone: 'z' }] }));
    const child = run(['--port', '0', '--epp', epp.address, '--endpoints', endpoints, '--zone', 'z'], { SPILLWAY_HEALTH_INTERVAL_MS: '0' });
    const url = await boundUrl(child);
    expect(url).toMatch(/^http:\/\/127\.0\.0\.1:\d+$/);
    const res = await post(`${url}/v1/completions`, completion());
    expect(res.status).toBe(200);
    expect(res.headers.get('x-spillway-served-endpoint')).toBe(upstream.address);
    await res.text();
    const stats = (await (await fetch(`${url}/gateway/stats`)).json()) as { byStatus: Record<string, number> };
    expect(stats.byStatus).toEqual({ '200': 1 });
    child.kill('SIGTERM');
    expect((await finished(child)).code).toBe(0);
  });
});
