/**
 * `npm start` end to end: the demo launcher as a child process, as a user runs it. One bounded run
 * (`--duration 20`) plays the whole scenario on real processes; the checks are on what it prints,
 * on the live view of the overloaded zone while it runs, and on what it leaves behind. Needs
 * nats-server on PATH or NATS_URL (README, Quick start).
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { INSTALL_HINT, natsServerAvailable } from '@spillway/testkit';

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '..', '..');
const START = ['--conditions=@spillway/source', '--import', 'tsx', 'infra/demo/start.ts'];
const PHASES = ['balanced', 'overload', 'zone-down', 'recovery'];
const ZONES = ['zone-a', 'zone-b', 'zone-c'];

interface Run {
  code: number | null;
  signal: NodeJS.Signals | null;
  stdout: string;
  stderr: string;
  /** Every descendant process seen while the demo ran (pid -> command line). */
  descendants: Map<number, string>;
}

function childrenOf(pid: number): number[] {
  const out = spawnSync('pgrep', ['-P', String(pid)], { encoding: 'utf8' }).stdout;
  return out.split('\n').filter(Boolean).map(Number);
}

function commandLine(pid: number): string | undefined {
  try {
    return readFileSync(`/proc/${pid}/cmdline`, 'utf8').replace(/\0/g, ' ').trim();
  } catch {
    return undefined;
  }
}

/** Runs the demo to its end, noting its descendants every 250 ms; SIGKILLs it after `limitMs`. `onStdout` sees the output so far. */
function runDemo(args: string[], env: NodeJS.ProcessEnv, limitMs: number, onStdout?: (stdout: string) => void): Promise<Run> {
  return new Promise((resolveRun) => {
    const child: ChildProcess = spawn(process.execPath, [...START, ...args], { cwd: ROOT, env, stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout?.on('data', (c: Buffer) => {
      stdout += c.toString();
      onStdout?.(stdout);
    });
    child.stderr?.on('data', (c: Buffer) => (stderr += c.toString()));
    const descendants = new Map<number, string>();
    const survey = () => {
      const queue = child.pid === undefined ? [] : childrenOf(child.pid);
      while (queue.length > 0) {
        const pid = queue.pop() as number;
        const cmd = commandLine(pid);
        if (cmd !== undefined && !descendants.has(pid)) descendants.set(pid, cmd);
        queue.push(...childrenOf(pid));
      }
    };
    const surveyor = setInterval(survey, 250);
    const limit = setTimeout(() => child.kill('SIGKILL'), limitMs);
    child.on('exit', (code, signal) => {
      clearInterval(surveyor);
      clearTimeout(limit);
      resolveRun({ code, signal, stdout, stderr, descendants });
    });
  });
}

/** Descendants still alive (same pid, same command line) after the demo exited. */
function survivors(run: Run): string[] {
  return [...run.descendants].filter(([pid, cmd]) => commandLine(pid) === cmd).map(([pid, cmd]) => `${pid} ${cmd}`);
}

/** Per-zone rows of the per-second tables: [t, phase, zone, req/s, ..., spilled, ...]. */
function tickRows(stdout: string): Array<{ t: number; phase: string; zone: string; cells: string[] }> {
  const rows: Array<{ t: number; phase: string; zone: string; cells: string[] }> = [];
  let t = -1;
  let phase = '';
  for (const line of stdout.split('\n')) {
    const first = /^\s*(\d+) (\S+)\s+(zone-\w+)\s+(.*)$/.exec(line);
    const next = /^\s{10,}(zone-\w+)\s+(.*)$/.exec(line);
    if (first) {
      t = Number(first[1]);
      phase = first[2] as string;
      rows.push({ t, phase, zone: first[3] as string, cells: (first[4] as string).trim().split(/\s+/) });
    } else if (next && t >= 0) {
      rows.push({ t, phase, zone: next[1] as string, cells: (next[2] as string).trim().split(/\s+/) });
    }
  }
  return rows;
}

const env = (): NodeJS.ProcessEnv => {
  const copy = { ...process.env };
  for (const key of Object.keys(copy)) if (key.startsWith('SPILLWAY_')) delete copy[key];
  delete copy['NO_COLOR'];
  return copy;
};

/**
 * Follows the overloaded zone's live view while the demo runs, as a person with a browser would:
 * polls its /api/state once the demo has printed its URL, keeping the most requests per second it
 * showed leaving zone-a, and whether its page answered.
 */
class ViewWatcher {
  url: string | undefined;
  pageOk = false;
  maxSpillPerS = 0;
  private stopped = false;
  private following: Promise<void> | undefined;

  onStdout(stdout: string): void {
    if (this.url !== undefined) return;
    this.url = /^ {2}zone-a: (http:\/\/127\.0\.0\.1:\d+\/)$/m.exec(stdout)?.[1];
    if (this.url !== undefined) this.following = this.follow();
  }

  async stop(): Promise<void> {
    this.stopped = true;
    await this.following;
  }

  /** One request at a time, with a generous timeout: the machine may be busy with other tests. */
  private async follow(): Promise<void> {
    while (!this.stopped) {
      await this.poll();
      await new Promise((r) => setTimeout(r, 500));
    }
  }

  private async poll(): Promise<void> {
    try {
      if (!this.pageOk) this.pageOk = (await fetch(this.url as string, { signal: AbortSignal.timeout(5000) })).ok;
      const state = (await (await fetch(`${this.url}api/state?limit=0`, { signal: AbortSignal.timeout(5000) })).json()) as {
        spill: { zones: string[]; perS: number[][] };
      };
      const from = state.spill.zones.indexOf('zone-a');
      const spilled = (state.spill.perS[from] ?? []).reduce((sum, perS, to) => sum + (state.spill.zones[to] === 'zone-a' ? 0 : perS), 0);
      this.maxSpillPerS = Math.max(this.maxSpillPerS, spilled);
    } catch {
      // The EPP is starting, stopping or slow to answer: the next poll tries again.
    }
  }
}

/** A node as spillway-xds's /debug/nodes lists it. */
interface XdsNode {
  id: string;
  zone: string;
  types: Record<string, { acked?: string }>;
}

/**
 * Reads each zone's spillway-xds node list while the demo runs (the demo prints where): the
 * gateways the demo runs must be its nodes, having ACKed EDS and ECDS, which is how they got
 * their model servers and subsets.
 */
class XdsWatcher {
  readonly nodes = new Map<string, XdsNode[]>();
  private readonly urls = new Map<string, string>();
  private stopped = false;
  private following: Promise<void> | undefined;

  onStdout(stdout: string): void {
    for (const [, zone, url] of stdout.matchAll(/^ {2}(zone-\w+) xds: (http:\/\/127\.0\.0\.1:\d+\/debug\/nodes)$/gm))
      this.urls.set(zone as string, url as string);
    if (this.following === undefined && this.urls.size === ZONES.length) this.following = this.follow();
  }

  async stop(): Promise<void> {
    this.stopped = true;
    await this.following;
  }

  private async follow(): Promise<void> {
    while (!this.stopped && this.nodes.size < ZONES.length) {
      for (const [zone, url] of this.urls) {
        if (this.nodes.has(zone)) continue;
        try {
          const body = (await (await fetch(url, { signal: AbortSignal.timeout(5000) })).json()) as { nodes: XdsNode[] };
          if (body.nodes.some((n) => n.types['eds']?.acked && n.types['ecds']?.acked)) this.nodes.set(zone, body.nodes);
        } catch {
          // Starting or busy: the next round asks again.
        }
      }
      await new Promise((r) => setTimeout(r, 500));
    }
  }
}

describe('npm start (the local demo)', () => {
  let dir: string;
  let run: Run;
  const view = new ViewWatcher();
  const xds = new XdsWatcher();

  beforeAll(async () => {
    if (!process.env['NATS_URL'] && !natsServerAvailable()) throw new Error(INSTALL_HINT);
    dir = mkdtempSync(join(tmpdir(), 'spillway-demo-'));
    try {
      run = await runDemo(['--duration', '20', '--dir', dir], env(), 150_000, (stdout) => {
        view.onStdout(stdout);
        xds.onStdout(stdout);
      });
    } finally {
      await Promise.all([view.stop(), xds.stop()]);
    }
  }, 160_000);

  afterAll(() => {
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  it('runs the scenario and exits 0 by itself', () => {
    expect(run.signal, run.stderr).toBeNull();
    expect(run.code, `${run.stdout}\n${run.stderr}`).toBe(0);
    expect(run.stdout).toMatch(/^ {2}zone-a \(region r1\): 3 servers, ~\d+ req\/s$/m);
  });

  it('prints a per-zone table every second through every phase, plain text when not a terminal', () => {
    const rows = tickRows(run.stdout);
    for (const zone of ZONES) expect(rows.filter((r) => r.zone === zone).length).toBeGreaterThanOrEqual(15);
    expect(new Set(rows.map((r) => r.phase))).toEqual(new Set(PHASES));
    expect(run.stdout).not.toContain('\x1b[');
    for (const line of run.stdout.split('\n').filter((l) => /^\s*\d+ \S+\s+zone-/.test(l) || /^\s{10,}zone-/.test(l))) {
      expect(line.length).toBeLessThanOrEqual(100);
    }
  });

  it('ends with a summary naming every phase for every zone', () => {
    const summary = run.stdout.slice(run.stdout.indexOf('Summary'));
    expect(summary).toContain('served a/b/c');
    for (const phase of PHASES) expect(summary).toMatch(new RegExp(`^${phase}\\s+zone-a\\s`, 'm'));
    expect(summary.split('\n').filter((l) => /^\S*\s+zone-[abc]\s+\d+/.test(l))).toHaveLength(PHASES.length * ZONES.length);
    expect(summary).toMatch(/^Total: \d+ requests/m);
    // The model servers' own prefix-cache hit rate, routed without KV events.
    expect(summary).toMatch(/^Prefix cache \(the model servers' own counters\): (\d+\.\d%|n\/a) .*\(approximate\)/m);
  });

  it("spills zone-a's requests to other zones while it is overloaded", () => {
    const summary = run.stdout.slice(run.stdout.indexOf('Summary'));
    const overloadA = /^overload\s+zone-a\s+(.*)$/m.exec(summary)?.[1]?.trim().split(/\s+/) ?? [];
    // reqs req/s ok p50 p99 in-zone spilled ...
    expect(Number(overloadA[6]), summary).toBeGreaterThan(0);
  });

  it("prints each zone's live view, whose state shows zone-a spilling while it happens", () => {
    for (const zone of ZONES) expect(run.stdout).toMatch(new RegExp(`^ {2}${zone}: http://127\\.0\\.0\\.1:\\d+/$`, 'm'));
    expect(view.pageOk).toBe(true);
    expect(view.maxSpillPerS).toBeGreaterThan(0);
  });

  it("runs each zone's gateway on its zone's spillway-xds: endpoints by EDS, subset and zone by ECDS", () => {
    for (const zone of ZONES) {
      const nodes = xds.nodes.get(zone) ?? [];
      // The zone's gateway is a node of the zone's spillway-xds, and ACKed both resources.
      const gateway = nodes.find((n) => n.id.startsWith(`spillway-gateway-${zone}-`));
      expect(gateway, `${zone}: ${JSON.stringify(nodes)}`).toBeDefined();
      expect(gateway?.zone).toBe(zone);
      expect(gateway?.types['eds']?.acked).toMatch(/^[0-9a-f]+$/);
      expect(gateway?.types['ecds']?.acked).toMatch(/^[0-9a-f]+$/);
    }
    for (const gateway of [...run.descendants.values()].filter((c) => c.includes('spillway-gateway'))) {
      expect(gateway).toMatch(/--xds 127\.0\.0\.1:\d+ --region r\d/);
      expect(gateway).not.toContain('--endpoints');
    }
  });

  it('leaves no process behind', () => {
    // The survey must have seen the system: NATS, 8 simulators, and per zone a collector, EPP, spillway-xds and gateway.
    const seen = [...run.descendants.values()];
    expect(seen.filter((c) => c.includes('spillway-sim')).length).toBeGreaterThanOrEqual(8);
    for (const bin of ['spillway-collector', 'spillway-epp', 'spillway-xds', 'spillway-gateway'])
      expect(seen.filter((c) => c.includes(bin))).toHaveLength(3);
    expect(survivors(run)).toEqual([]);
  });
});

describe('npm start -- --kv-events (precise prefix-cache routing)', () => {
  let dir: string;
  let run: Run;

  beforeAll(async () => {
    if (!process.env['NATS_URL'] && !natsServerAvailable()) throw new Error(INSTALL_HINT);
    dir = mkdtempSync(join(tmpdir(), 'spillway-demo-kv-'));
    run = await runDemo(['--kv-events', '--duration', '12', '--dir', dir], env(), 150_000);
  }, 160_000);

  afterAll(() => {
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  it('runs the servers with KV events, the collectors relaying them and the EPPs tokenizing, and exits 0', () => {
    expect(run.code, `${run.stdout}\n${run.stderr}`).toBe(0);
    expect(run.stdout).toContain('KV events: every model server publishes them');
    expect(run.stdout).toMatch(/^Prompts: each starts with one of \d+ customers' contexts/m);
    const sims = [...run.descendants.values()].filter((c) => c.includes('spillway-sim'));
    expect(sims.length).toBeGreaterThanOrEqual(8);
    // A simulator binds its ports itself (`*`: the system's choice) and reports them; a restart reuses them.
    for (const sim of sims) expect(sim).toMatch(/--kv-events tcp:\/\/127\.0\.0\.1:(\d+|\*) --tokenizer qwen3/);
    for (const epp of [...run.descendants.values()].filter((c) => c.includes('spillway-epp'))) expect(epp).toContain('--tokenizer *=qwen3');
    expect(survivors(run)).toEqual([]);
  });

  it("ends with the model servers' prefix-cache hit rate, routed by their KV events", () => {
    const line =
      /^Prefix cache \(the model servers' own counters\): (\d+\.\d)% of prompt tokens were cached \((\d+) of (\d+)\); EPPs routed by the servers' KV events \(precise\)\.$/m.exec(
        run.stdout,
      );
    expect(line, run.stdout.slice(-2000)).not.toBeNull();
    // Every prompt starts with one of a few shared contexts: most of their tokens are cached somewhere.
    expect(Number(line?.[1])).toBeGreaterThan(30);
  });
});

describe('npm start: flags and prerequisites', () => {
  it('without nats-server or NATS_URL says how to install nats-server or set NATS_URL, and exits non-zero', async () => {
    const noNats: NodeJS.ProcessEnv = { ...env(), PATH: '/nonexistent' };
    delete noNats['NATS_URL'];
    const run = await runDemo(['--duration', '10'], noNats, 60_000);
    expect(run.code).not.toBe(0);
    expect(run.stderr).toContain('apt-get install nats-server');
    expect(run.stderr).toContain('NATS_URL');
    expect(run.descendants.size).toBe(0);
  }, 70_000);

  it('answers --help with every flag, and rejects a bad one naming it', async () => {
    const help = await runDemo(['--help'], env(), 60_000);
    expect(help.code).toBe(0);
    for (const flag of ['--duration', '--nats-topology', '--nats-url', '--rate', '--kv-events', '--shared-prefixes', '--dir', '--help'])
      expect(help.stdout).toContain(flag);
    const bad = await runDemo(['--nats-topology', 'mesh'], env(), 60_000);
    expect(bad.code).toBe(2);
    expect(bad.stderr).toContain('--nats-topology');
  }, 70_000);
});
