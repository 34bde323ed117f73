/**
 * One part of `npm run bench`. A part measures Spillway against a baseline measured in the same run
 * and returns its section of BENCHMARKS.md (markdown, starting with a `## ` heading).
 */
import type { Quiet } from './quiet.js';

export interface BenchContext {
  /** `--quick`: a short version; the whole quick run must finish within two minutes. */
  quick: boolean;
  /** The exact command a reader can run to reproduce this part. */
  command: string;
  log(message: string): void;
  /**
   * The machine's state when the part started: run.ts waits for a quiet machine (waitForQuiet) before
   * every part and appends the load average before and after to its section. A target that needs a
   * quiet machine reads `quiet.quiet`.
   */
  quiet: Quiet;
}

export interface BenchPart {
  /** The name used on the command line: `npm run bench -- <name>`. */
  name: string;
  title: string;
  /**
   * The part's figures do not depend on the machine's load (a deterministic simulation in virtual
   * time): run.ts neither waits for a quiet machine nor calls its figures provisional.
   */
  loadIndependent?: boolean;
  run(context: BenchContext): Promise<string>;
}

/** The median of the values (the mean of the middle two for an even count); the input is not reordered. */
export function median(values: readonly number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  const mid = Math.floor(sorted.length / 2);
  return sorted.length % 2 === 1 ? (sorted[mid] as number) : ((sorted[mid - 1] as number) + (sorted[mid] as number)) / 2;
}

/** Percentile of an ascending-sorted array (nearest rank). */
export function percentile(sorted: ArrayLike<number>, p: number): number {
  if (sorted.length === 0) return Number.NaN;
  const rank = Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1));
  return sorted[rank] as number;
}

export function markdownTable(header: string[], rows: (string | number)[][]): string {
  const line = (cells: (string | number)[]) => `| ${cells.join(' | ')} |`;
  return [line(header), line(header.map(() => '---')), ...rows.map(line)].join('\n');
}
