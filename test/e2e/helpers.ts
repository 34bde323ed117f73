// Shared pieces of the end-to-end tests: a LocalSystem in a temporary directory, requests through a
// gateway, the EPP's Prometheus figures, bounded background traffic, and an extra gateway without a
// subset hint (so destination lists show the EPP's own view, not the gateway's health view).
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, beforeEach } from 'vitest';
import { freePort } from '@spillway/testkit';
import { httpOk, ManagedProcess, waitUntil } from '../../infra/demo/process.js';
import { LocalSystem, MODEL, type SystemOptions } from '../../infra/demo/system.js';

const ROOT = resolve(fileURLToPath(new URL('../..', import.meta.url)));

export interface E2eSystem {
  system: LocalSystem;
  dir: string;
  /** Stops everything; removes the directory unless `keepLogs` (a test failed). */
  stop(keepLogs: boolean): Promise<void>;
}

/**
 * The system of one test file: started before its tests, stopped after them (logs kept when a test
 * failed). Call inside the file's describe block; read `system` from the tests.
 */
export function useSystem(name: string, options: Omit<SystemOptions, 'dir'>): { readonly system: LocalSystem } {
  let e2e: E2eSystem | undefined;
  let failed = false;
  beforeAll(async () => {
    e2e = await startSystem(name, options);
  }, 300_000); // includes waiting for another e2e file's system to stop
  beforeEach(({ onTestFailed }) => onTestFailed(() => void (failed = true)));
  afterAll(async () => {
    await e2e?.stop(failed);
  }, 60_000);
  return {
    get system(): LocalSystem {
      if (!e2e) throw new Error(`the ${name} system did not start`);
      return e2e.system;
    },
  };
}

/**
 * Starts a LocalSystem with its files (logs in `dir/logs`) under a fresh temporary directory.
 * Systems of different test files start one after the other (a lock in the temp directory held
 * until `stop`), so on this small machine two systems never compete for the CPU.
 */
export async function startSystem(name: string, options: Omit<SystemOptions, 'dir'>): Promise<E2eSystem> {
  const release = await acquireLock(name);
  const extra: ManagedProcess[] = [];
  let system: LocalSystem | undefined;
  let dir = '';
  // Under heavy outside load the launcher's fixed readiness timeouts can expire; one retry.
  for (let attempt = 1; system === undefined; attempt++) {
    dir = mkdtempSync(join(tmpdir(), `spillway-e2e-${name}-`));
    try {
      system = await LocalSystem.start({ logLevel: 'info', ...options, dir });
    } catch (error) {
      // LocalSystem.start stops what it started when a step fails; this is a safety net for
      // anything it could not reach (a child that outlived its stop).
      killOwnChildren();
      if (attempt >= 2) {
        release();
        throw new Error(`system did not start (logs in ${dir}/logs): ${(error as Error).message}`);
      }
      console.error(`e2e ${name}: start failed (${(error as Error).message}); logs in ${dir}/logs; retrying once`);
    }
  }
  extras.set(system, extra);
  const started = system;
  const startedDir = dir;
  return {
    system: started,
    dir: startedDir,
    stop: async (keepLogs) => {
      try {
        await Promise.all(extra.map((p) => p.stop().catch(() => undefined)));
        extra.forEach((p) => p.close());
        await started.stop();
      } finally {
        release();
      }
      if (keepLogs || process.env['SPILLWAY_E2E_KEEP_LOGS']) console.error(`e2e ${name}: logs kept in ${startedDir}/logs`);
      else rmSync(startedDir, { recursive: true, force: true });
    },
  };
}

/** SIGKILLs this process's children that run a Spillway binary or nats-server (by pid, from /proc). */
function killOwnChildren(): void {
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const stat = readFileSync(`/proc/${entry}/stat`, 'utf8');
      const ppid = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
      if (ppid !== process.pid) continue;
      const cmdline = readFileSync(`/proc/${entry}/cmdline`, 'utf8');
      if (cmdline.includes('/services/') || cmdline.startsWith('nats-server')) process.kill(Number(entry), 'SIGKILL');
    } catch {
      // gone already
    }
  }
}

const LOCK = join(tmpdir(), 'spillway-e2e.lock');

async function acquireLock(name: string, timeoutMs = 600_000): Promise<() => void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    try {
      mkdirSync(LOCK);
      writeFileSync(join(LOCK, 'owner'), `${process.pid} ${name}`);
      let released = false;
      return () => {
        if (released) return;
        released = true;
        rmSync(LOCK, { recursive: true, force: true });
      };
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== 'EEXIST') throw error;
    }
    // A lock whose owner is gone (a crashed run) is taken over.
    let owner = NaN;
    try {
      owner = Number(readFileSync(join(LOCK, 'owner'), 'utf8').split(' ')[0]);
    } catch {
      // being written or removed right now
    }
    if (Number.isInteger(owner) && !alive(owner)) rmSync(LOCK, { recursive: true, force: true });
    if (Date.now() > deadline) throw new Error(`e2e ${name}: another e2e system held ${LOCK} for ${timeoutMs} ms`);
    await sleep(250);
  }
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === 'EPERM';
  }
}

const extras = new WeakMap<LocalSystem, ManagedProcess[]>();

/**
 * A second gateway for `zone` that sends no subset hint (like Istio): the EPP then picks from its
 * own view only, so its destination lists show what the EPP believes is ready.
 */
export async function startHintlessGateway(system: LocalSystem, zone: string): Promise<string> {
  const z = system.zone(zone);
  const dir = system.options.dir;
  const port = await freePort();
  const gateway = new ManagedProcess({
    name: `gateway-${zone}-nohint`,
    command: process.execPath,
    args: [
      join(ROOT, 'services', 'gateway', 'bin', 'spillway-gateway.js'),
      '--epp',
      `127.0.0.1:${z.eppPorts.grpc}`,
      '--zone',
      zone,
      '--endpoints',
      join(dir, 'endpoints-all.json'),
      '--port',
      String(port),
      '--subset-hint',
      'off',
      '--log-level',
      'info',
    ],
    logFile: join(dir, 'logs', `gateway-${zone}-nohint.log`),
    ready: () => waitUntil(`gateway-${zone}-nohint`, () => httpOk(`http://127.0.0.1:${port}/gateway/stats`), 20_000),
  });
  extras.get(system)?.push(gateway);
  await gateway.start();
  return `http://127.0.0.1:${port}`;
}

export interface Completion {
  status: number;
  /** x-spillway-served-endpoint */
  served: string | undefined;
  /** Zone of the served endpoint. */
  zone: string | undefined;
  /** x-spillway-attempts */
  attempts: number;
  /** x-spillway-destination, split. */
  destination: string[];
  /** The client-side error when there was no HTTP response at all. */
  error?: string;
  body: string;
}

export interface CompletionOptions {
  maxTokens?: number;
  prompt?: string;
  timeoutMs?: number;
}

let counter = 0;

/** One non-streaming completion through a gateway; never throws (a failure is a Completion too). */
export async function complete(system: LocalSystem, gatewayUrl: string, options: CompletionOptions = {}): Promise<Completion> {
  const prompt = options.prompt ?? `e2e request ${++counter}: tell me about spillways and zones`;
  try {
    const response = await fetch(`${gatewayUrl}/v1/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: MODEL, prompt, max_tokens: options.maxTokens ?? 16 }),
      signal: AbortSignal.timeout(options.timeoutMs ?? 60_000),
    });
    const body = await response.text();
    const served = response.headers.get('x-spillway-served-endpoint') ?? undefined;
    const destination = response.headers.get('x-spillway-destination');
    return {
      status: response.status,
      served,
      zone: served === undefined ? undefined : system.zoneOfAddress(served),
      attempts: Number(response.headers.get('x-spillway-attempts') ?? 0),
      destination: destination ? destination.split(',') : [],
      body,
    };
  } catch (error) {
    return { status: 0, served: undefined, zone: undefined, attempts: 0, destination: [], error: String(error), body: '' };
  }
}

/** Compact description of results for assertion messages. */
export function summarize(results: Completion[]): string {
  const byKey = new Map<string, number>();
  for (const r of results) {
    const key = `${r.status} ${r.zone ?? '-'}${r.attempts > 1 ? ` attempts=${r.attempts}` : ''}${r.error ? ` ${r.error}` : ''}${r.status !== 200 ? ` ${r.body.slice(0, 160)}` : ''}`;
    byKey.set(key, (byKey.get(key) ?? 0) + 1);
  }
  return [...byKey].map(([k, n]) => `${n}× ${k}`).join('; ');
}

/**
 * Background traffic: `workers` loops of sequential requests through one gateway, each pausing
 * `pauseMs` between requests, until stopped or `maxRequests` were sent in total.
 */
export class Traffic {
  readonly results: Completion[] = [];
  #stopped = false;
  #sent = 0;
  readonly #max: number;
  readonly #loops: Promise<void>[];

  constructor(
    system: LocalSystem,
    gatewayUrl: string,
    options: { workers: number; maxRequests: number; pauseMs?: number; maxTokens?: number },
  ) {
    this.#max = options.maxRequests;
    const loop = async () => {
      while (!this.#stopped && this.#sent < options.maxRequests) {
        this.#sent++;
        this.results.push(await complete(system, gatewayUrl, { maxTokens: options.maxTokens }));
        await sleep(options.pauseMs ?? 50);
      }
    };
    this.#loops = Array.from({ length: options.workers }, loop);
  }

  get sent(): number {
    return this.#sent;
  }

  /** Waits until `n` more requests have completed than when called (or the budget ran out). */
  async more(n: number, timeoutMs = 60_000): Promise<void> {
    const target = this.results.length + n;
    const deadline = Date.now() + timeoutMs;
    while (this.results.length < target && !this.#stopped && this.results.length < this.#max && Date.now() < deadline) await sleep(20);
  }

  async stop(): Promise<Completion[]> {
    this.#stopped = true;
    await Promise.all(this.#loops);
    return this.results;
  }
}

/** One request every 50 ms whatever the answers: 20 requests a second. */
const INTERVAL_MS = 50;

/** A request of an open loop, with when it was sent (ms since the epoch). */
export type SentCompletion = Completion & { readonly sentAt: number };

/** Requests at a fixed rate (20 a second) until stopped, each answer kept. */
export class OpenLoop {
  readonly results: SentCompletion[] = [];
  readonly #pending = new Set<Promise<void>>();
  readonly #timer: NodeJS.Timeout;

  constructor(send: () => Promise<Completion>) {
    this.#timer = setInterval(() => {
      const sentAt = Date.now();
      const request = send().then((result) => void this.results.push({ ...result, sentAt }));
      this.#pending.add(request);
      void request.finally(() => this.#pending.delete(request));
    }, INTERVAL_MS);
  }

  async stop(): Promise<SentCompletion[]> {
    clearInterval(this.#timer);
    await Promise.all(this.#pending);
    return this.results;
  }
}

export function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}

// ---- Prometheus ----------------------------------------------------------------------------

export type Samples = Map<string, number>;

/** The EPP's /metrics as `name{label="value",...}` (labels sorted) -> value. */
export async function scrape(port: number): Promise<Samples> {
  const response = await fetch(`http://127.0.0.1:${port}/metrics`, { signal: AbortSignal.timeout(5_000) });
  if (!response.ok) throw new Error(`/metrics answered ${response.status}`);
  return parseExposition(await response.text());
}

export function parseExposition(text: string): Samples {
  const samples: Samples = new Map();
  for (const line of text.split('\n')) {
    if (line === '' || line.startsWith('#')) continue;
    const match = /^([A-Za-z_:][A-Za-z0-9_:]*)(\{(.*)\})?\s+(\S+)/.exec(line);
    if (!match) continue;
    const labels = [...(match[3] ?? '').matchAll(/([A-Za-z_][A-Za-z0-9_]*)="((?:[^"\\]|\\.)*)"/g)].map((m) => `${m[1]}="${m[2]}"`).sort();
    samples.set(key(match[1] as string, labels), Number(match[4]));
  }
  return samples;
}

function key(name: string, labels: string[]): string {
  return labels.length === 0 ? name : `${name}{${labels.join(',')}}`;
}

/** One sample; undefined when absent. */
export function sample(samples: Samples, name: string, labels: Record<string, string> = {}): number | undefined {
  return samples.get(
    key(
      name,
      Object.entries(labels)
        .map(([k, v]) => `${k}="${v}"`)
        .sort(),
    ),
  );
}

/** One sample from a live EPP; absent counts as 0 (per-zone gauges are reset before each scrape). */
export async function eppMetric(port: number, name: string, labels: Record<string, string> = {}): Promise<number> {
  return sample(await scrape(port), name, labels) ?? 0;
}

export async function readyz(port: number): Promise<number> {
  try {
    const response = await fetch(`http://127.0.0.1:${port}/readyz`, { signal: AbortSignal.timeout(2_000) });
    await response.arrayBuffer();
    return response.status;
  } catch {
    return 0;
  }
}
