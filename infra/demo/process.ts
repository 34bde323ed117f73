import { spawn, type ChildProcess } from 'node:child_process';
import { createWriteStream, type WriteStream } from 'node:fs';

/**
 * One child process of the local system (a nats-server, a simulator, a collector, an EPP, a
 * gateway): started, stopped, killed like a crash, and restarted with the same arguments, with its
 * output appended to a log file. The demo and the end-to-end tests share it.
 */
export interface ProcessSpec {
  name: string;
  command: string;
  args: string[];
  env?: Record<string, string>;
  logFile: string;
  /** Resolves once the process is ready to serve; rejects to fail the start. */
  ready?: () => Promise<void>;
}

export class ManagedProcess {
  private child: ChildProcess | undefined;
  private log: WriteStream | undefined;
  private tail = '';
  /** Output lines of the current run, for `waitForLine` (bounded: only the first few hundred are kept). */
  private lines: string[] = [];
  private partial = '';
  private readonly lineWaiters = new Set<(line: string) => void>();

  constructor(readonly spec: ProcessSpec) {}

  get name(): string {
    return this.spec.name;
  }

  get running(): boolean {
    return this.child !== undefined && this.child.exitCode === null && this.child.signalCode === null;
  }

  get pid(): number | undefined {
    return this.child?.pid;
  }

  /** The last output lines, for error messages. */
  recentOutput(): string {
    return this.tail;
  }

  async start(): Promise<void> {
    if (this.running) throw new Error(`${this.name} is already running`);
    this.log ??= createWriteStream(this.spec.logFile, { flags: 'a' });
    const child = spawn(this.spec.command, this.spec.args, {
      env: { ...process.env, ...this.spec.env },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    this.child = child;
    this.lines = [];
    this.partial = '';
    const keep = (chunk: Buffer) => {
      this.log?.write(chunk);
      this.tail = (this.tail + chunk.toString()).slice(-4000);
      const text = this.partial + chunk.toString();
      const parts = text.split('\n');
      this.partial = (parts.pop() ?? '').slice(-64 * 1024);
      for (const line of parts) {
        if (this.lines.length < 500) this.lines.push(line);
        for (const waiter of this.lineWaiters) waiter(line);
      }
    };
    child.stdout?.on('data', keep);
    child.stderr?.on('data', keep);
    const exited = new Promise<never>((_, reject) =>
      child.once('exit', (code, signal) => reject(new Error(`${this.name} exited (${code ?? signal}) while starting:\n${this.tail}`))),
    );
    exited.catch(() => undefined);
    await Promise.race([this.spec.ready?.() ?? Promise.resolve(), exited]);
  }

  /**
   * Resolves with the first output line of the current run that `matches` (lines already printed
   * count); rejects after `timeoutMs`. A server's own "listening" line, unlike a connection to its
   * port, cannot come from another process that happens to hold the port.
   */
  waitForLine(matches: (line: string) => boolean, timeoutMs: number): Promise<string> {
    const seen = this.lines.find(matches);
    if (seen !== undefined) return Promise.resolve(seen);
    return new Promise((resolve, reject) => {
      const waiter = (line: string): void => {
        if (!matches(line)) return;
        clearTimeout(timer);
        this.lineWaiters.delete(waiter);
        resolve(line);
      };
      const timer = setTimeout(() => {
        this.lineWaiters.delete(waiter);
        reject(new Error(`${this.name}: no such output line after ${timeoutMs} ms`));
      }, timeoutMs);
      this.lineWaiters.add(waiter);
    });
  }

  /** SIGTERM, then SIGKILL after `graceMs`. */
  async stop(graceMs = 5000): Promise<void> {
    await this.signal('SIGTERM', graceMs);
  }

  /** SIGKILL: a crash, or a machine cut off. */
  async kill(): Promise<void> {
    await this.signal('SIGKILL', 0);
  }

  async restart(): Promise<void> {
    await this.stop();
    await this.start();
  }

  /** Closes the log file; call once the process is stopped for good. */
  close(): void {
    this.log?.end();
    this.log = undefined;
  }

  private async signal(signal: NodeJS.Signals, graceMs: number): Promise<void> {
    const child = this.child;
    this.child = undefined;
    if (!child || child.exitCode !== null || child.signalCode !== null) return;
    const gone = new Promise<void>((resolve) => child.once('exit', () => resolve()));
    child.kill(signal);
    if (graceMs > 0) {
      const timer = setTimeout(() => child.kill('SIGKILL'), graceMs);
      await gone;
      clearTimeout(timer);
    } else {
      await gone;
    }
  }
}

/** Polls `check` until it resolves true; rejects after `timeoutMs`. */
export async function waitUntil(what: string, check: () => Promise<boolean>, timeoutMs = 30_000, intervalMs = 50): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (await check().catch(() => false)) return;
    await new Promise((r) => setTimeout(r, intervalMs));
  }
  throw new Error(`${what} not ready after ${timeoutMs} ms`);
}

/** True when a GET answers with a 2xx status. */
export async function httpOk(url: string, timeoutMs = 1000): Promise<boolean> {
  const response = await fetch(url, { signal: AbortSignal.timeout(timeoutMs) });
  await response.arrayBuffer();
  return response.ok;
}
