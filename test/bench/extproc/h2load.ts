import { spawn, spawnSync } from 'node:child_process';
import { readFileSync, rmSync } from 'node:fs';
import { EXT_PROC_PATH } from '@spillway/protocol';
import { percentile } from '../part.js';

/** h2load (Debian package nghttp2-client) drives ext_proc in the bench (BENCHMARKS.md says how). */
export const H2LOAD_INSTALL =
  'h2load is not on PATH. Install it with `apt-get install nghttp2-client` (Debian/Ubuntu; `brew install nghttp2` on macOS) and run the bench again.';

export function h2loadVersion(): string | undefined {
  const probe = spawnSync('h2load', ['--version'], { encoding: 'utf8' });
  if (probe.error || probe.status !== 0) return undefined;
  return probe.stdout.trim();
}

export interface LoadSpec {
  port: number;
  /** The pre-encoded request body file. */
  file: string;
  clients: number;
  streamsPerClient: number;
  seconds: number;
  warmupSeconds: number;
  /** Total requests per second across all clients (h2load's --rps is per client); undefined = as fast as possible. */
  rate?: number;
  /** Where h2load writes per-request latencies. */
  logFile: string;
}

export interface LoadResult {
  command: string;
  /** h2load's own figure: requests done in the main duration / duration. */
  requestsPerSecond: number;
  done: number;
  succeeded: number;
  failed: number;
  errored: number;
  timeout: number;
  status2xx: number;
  /** Per-request latency in ms, ascending, from --log-file. */
  latenciesMs: Float64Array;
  p50: number;
  p99: number;
  p999: number;
  /** The server's CPU time during the run (user+system), µs per completed request. */
  serverCpuMicrosPerRequest: number;
}

export function h2loadArgs(spec: LoadSpec): string[] {
  const args = [
    `http://127.0.0.1:${spec.port}${EXT_PROC_PATH}`,
    '-d',
    spec.file,
    '-H',
    'content-type: application/grpc',
    '-H',
    'te: trailers',
    '-t',
    '1',
    '-c',
    String(spec.clients),
    '-m',
    String(spec.streamsPerClient),
    '-D',
    String(spec.seconds),
    '--warm-up-time',
    String(spec.warmupSeconds),
    '--log-file',
    spec.logFile,
  ];
  if (spec.rate !== undefined) args.push('--rps', String(spec.rate / spec.clients));
  return args;
}

/** The command line as a reader would type it (port and file left symbolic). */
export function displayCommand(spec: Omit<LoadSpec, 'port' | 'file' | 'logFile'>): string {
  const args = h2loadArgs({ ...spec, port: 0, file: 'request.bin', logFile: 'latency.tsv' }).map((a) => (a.includes(' ') ? `'${a}'` : a));
  args[0] = `http://127.0.0.1:PORT${EXT_PROC_PATH}`;
  return `h2load ${args.join(' ')}`;
}

/** user+system CPU time of a process in µs, from /proc (Linux); undefined elsewhere. */
export function processCpuMicros(pid: number | undefined): number | undefined {
  if (pid === undefined) return undefined;
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    const ticks = Number(fields[11]) + Number(fields[12]); // utime, stime (fields 14 and 15 of the full line)
    return (ticks / 100) * 1e6; // USER_HZ is 100 on Linux
  } catch {
    return undefined;
  }
}

function count(text: string, pattern: RegExp): number {
  const match = pattern.exec(text);
  return match ? Number(match[1]) : 0;
}

export async function runH2load(spec: LoadSpec, serverPid: number | undefined): Promise<LoadResult> {
  const args = h2loadArgs(spec);
  rmSync(spec.logFile, { force: true });
  let cpuBefore: number | undefined;
  // CPU is sampled from the end of the warm-up to the end of the run.
  const warm = setTimeout(() => (cpuBefore = processCpuMicros(serverPid)), spec.warmupSeconds * 1000);
  const output = await new Promise<string>((resolve, reject) => {
    const child = spawn('h2load', args, { stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    child.stdout.on('data', (c: Buffer) => (out += c.toString()));
    child.stderr.on('data', (c: Buffer) => (out += c.toString()));
    child.on('error', reject);
    child.on('exit', (code) => (code === 0 ? resolve(out) : reject(new Error(`h2load exited with ${code}:\n${out}`))));
  });
  clearTimeout(warm);
  const cpuAfter = processCpuMicros(serverPid);
  const done = count(output, /requests: \d+ total, \d+ started, (\d+) done/);
  const rows = readFileSync(spec.logFile, 'utf8')
    .split('\n')
    .filter((line) => line.length > 0);
  const latencies = new Float64Array(rows.length);
  rows.forEach((row, i) => (latencies[i] = Number(row.split('\t')[2]) / 1000));
  latencies.sort();
  rmSync(spec.logFile, { force: true });
  return {
    command: `h2load ${args.join(' ')}`,
    requestsPerSecond: Number(/finished in [\d.]+\w+, ([\d.]+) req\/s/.exec(output)?.[1] ?? Number.NaN),
    done,
    succeeded: count(output, /(\d+) succeeded/),
    failed: count(output, /(\d+) failed/),
    errored: count(output, /(\d+) errored/),
    timeout: count(output, /(\d+) timeout/),
    status2xx: count(output, /status codes: (\d+) 2xx/),
    latenciesMs: latencies,
    p50: percentile(latencies, 50),
    p99: percentile(latencies, 99),
    p999: percentile(latencies, 99.9),
    serverCpuMicrosPerRequest: cpuBefore !== undefined && cpuAfter !== undefined && done > 0 ? (cpuAfter - cpuBefore) / done : Number.NaN,
  };
}
