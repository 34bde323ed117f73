import { spawn, type ChildProcess } from 'node:child_process';
import { join } from 'node:path';
import { createInterface } from 'node:readline';

const root = join(import.meta.dirname, '..', '..', '..', '..');

export interface Child {
  readonly proc: ChildProcess;
  readonly output: string[];
  kill(signal?: NodeJS.Signals): Promise<void>;
}

function track(proc: ChildProcess): Child {
  const output: string[] = [];
  for (const stream of [proc.stdout, proc.stderr]) {
    if (stream) createInterface({ input: stream }).on('line', (line) => output.push(line));
  }
  return {
    proc,
    output,
    async kill(signal: NodeJS.Signals = 'SIGTERM') {
      if (proc.exitCode !== null || proc.signalCode !== null) return;
      const gone = new Promise<void>((resolve) => proc.once('exit', () => resolve()));
      proc.kill(signal);
      await gone;
    },
  };
}

export interface SimChild extends Child {
  readonly url: string;
  readonly address: string;
  /** Its bound KV-event endpoints (with --kv-events / --kv-replay). */
  readonly kvEvents: string | undefined;
  readonly kvReplay: string | undefined;
}

/** Starts the built `spillway-sim` on a free port and waits for its "listening" log line. */
export async function spawnSim(args: string[]): Promise<SimChild> {
  const bin = join(root, 'services', 'sim', 'bin', 'spillway-sim.js');
  const child = track(spawn(process.execPath, [bin, '--port', '0', '--log-level', 'info', ...args], { stdio: ['ignore', 'pipe', 'pipe'] }));
  const listening = await new Promise<{ url: string; kvEvents?: string; kvReplay?: string }>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`spillway-sim did not start: ${child.output.join('\n')}`)), 15_000);
    child.proc.once('exit', (code) => reject(new Error(`spillway-sim exited ${code}: ${child.output.join('\n')}`)));
    const check = (): void => {
      for (const line of child.output) {
        try {
          const parsed = JSON.parse(line) as { msg?: string; url?: string; kvEvents?: string; kvReplay?: string };
          if (parsed.msg === 'listening' && parsed.url) {
            clearTimeout(timer);
            resolve(parsed as { url: string });
            return;
          }
        } catch {
          // not JSON
        }
      }
      setTimeout(check, 20);
    };
    check();
  });
  return Object.assign(child, {
    url: listening.url,
    address: new URL(listening.url).host,
    kvEvents: listening.kvEvents,
    kvReplay: listening.kvReplay,
  });
}

/** Starts the built `spillway-collector` binary. */
export function spawnCollector(args: string[], env: Record<string, string> = {}): Child {
  const bin = join(root, 'services', 'collector', 'bin', 'spillway-collector.js');
  return track(spawn(process.execPath, [bin, ...args], { stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, ...env } }));
}
