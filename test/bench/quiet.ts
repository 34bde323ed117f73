import { loadavg } from 'node:os';
import { setTimeout as sleep } from 'node:timers/promises';

/**
 * Waiting for a quiet machine before a part measures. The targets compare Spillway with a baseline
 * measured in the same run, but a busy machine still distorts the ratios (a starved baseline flatters
 * the ratio; the load generator competes with both servers for the same cores), so every part first
 * waits for the 1-minute load average to fall below a threshold — for a bounded time, because a
 * machine that never quiets down must still get a bench, one that says it was not quiet.
 */

/** Load average under which the machine counts as quiet (the performance targets ask for "load average < 1"). */
export const QUIET_LOAD = 1;
/** How long a full run waits for quiet before measuring anyway (the 1-minute average decays slowly). */
export const QUIET_WAIT_MS = 180_000;
/** How long a `--quick` run waits (the whole quick run must finish within two minutes). */
export const QUICK_QUIET_WAIT_MS = 5_000;

export interface QuietOptions {
  /** Quiet means the 1-minute load average is below this. Default QUIET_LOAD. */
  threshold?: number;
  /** Give up waiting after this long. Default QUIET_WAIT_MS, or `SPILLWAY_BENCH_QUIET_WAIT_S` seconds. */
  maxWaitMs?: number;
  /** How often to look. Default 2 s. */
  pollMs?: number;
  /** Progress messages (once when it starts waiting, once when it stops). */
  log?: (message: string) => void;
  /** The 1-minute load average; os.loadavg()[0] by default (injectable for tests). */
  load?: () => number;
  /** The clock in ms and the sleep; Date.now and timers by default (injectable for tests). */
  now?: () => number;
  sleep?: (ms: number) => Promise<unknown>;
}

export interface Quiet {
  /** Whether the load average was below the threshold when measuring started. */
  quiet: boolean;
  /** The 1-minute load average when the wait ended (the "before" figure of the part). */
  load: number;
  threshold: number;
  /** How long it waited, ms. */
  waitedMs: number;
  /** The bound it would wait up to, ms. */
  maxWaitMs: number;
}

/** The wait bound from `SPILLWAY_BENCH_QUIET_WAIT_S` (seconds; 0 = do not wait), else `fallback`. */
export function quietWaitFromEnv(fallback: number, env: NodeJS.ProcessEnv = process.env): number {
  const raw = env['SPILLWAY_BENCH_QUIET_WAIT_S'];
  if (raw === undefined || raw.trim() === '') return fallback;
  const seconds = Number(raw);
  if (!Number.isFinite(seconds) || seconds < 0)
    throw new Error(`SPILLWAY_BENCH_QUIET_WAIT_S must be a number of seconds ≥ 0, got ${JSON.stringify(raw)}`);
  return seconds * 1000;
}

/** Waits until the 1-minute load average is below the threshold, or the bound passes; says which. */
export async function waitForQuiet(options: QuietOptions = {}): Promise<Quiet> {
  const threshold = options.threshold ?? QUIET_LOAD;
  const maxWaitMs = options.maxWaitMs ?? quietWaitFromEnv(QUIET_WAIT_MS);
  const pollMs = options.pollMs ?? 2_000;
  const load = options.load ?? ((): number => loadavg()[0] as number);
  const now = options.now ?? Date.now;
  const pause = options.sleep ?? sleep;
  const started = now();
  let current = load();
  if (current < threshold) return { quiet: true, load: current, threshold, waitedMs: 0, maxWaitMs };
  options.log?.(`load average ${current.toFixed(2)} ≥ ${threshold}: waiting up to ${(maxWaitMs / 1000).toFixed(0)} s for a quiet machine`);
  while (current >= threshold && now() - started < maxWaitMs) {
    await pause(Math.min(pollMs, Math.max(0, maxWaitMs - (now() - started))));
    current = load();
  }
  const waitedMs = now() - started;
  const quiet = current < threshold;
  options.log?.(
    quiet
      ? `quiet after ${(waitedMs / 1000).toFixed(0)} s (load average ${current.toFixed(2)})`
      : `not quiet after ${(waitedMs / 1000).toFixed(0)} s (load average ${current.toFixed(2)}): measuring anyway, figures are provisional`,
  );
  return { quiet, load: current, threshold, waitedMs, maxWaitMs };
}

/** One sentence for a BENCHMARKS.md section: the load average before and after, and whether it was quiet. */
export function describeLoad(before: Quiet, after: number): string {
  const wait = before.waitedMs > 0 ? ` after waiting ${(before.waitedMs / 1000).toFixed(0)} s` : '';
  const state = before.quiet
    ? `quiet (below ${before.threshold})`
    : `**not quiet** (still ≥ ${before.threshold} after the ${(before.maxWaitMs / 1000).toFixed(0)} s bound: figures are provisional)`;
  return `1-minute load average ${before.load.toFixed(2)} before this part${wait}, ${after.toFixed(2)} after; the machine was ${state}.`;
}
