import { Engine, type PresetName } from '@spillway/engine';
import { ArrivalStream, PrefixGroups, type WorkloadSpec } from './workload.js';

export interface Capacity {
  /** Requests per second one replica completes when it always has work queued. */
  readonly requestsPerSec: number;
  readonly outputTokensPerSec: number;
  /** Mean running batch while saturated. */
  readonly meanRunning: number;
}

export interface CalibrationOptions {
  readonly workload: WorkloadSpec;
  readonly preset?: PresetName;
  readonly maxNumSeqs?: number;
  readonly numBlocks?: number;
  readonly seed?: number;
  /** Warm-up and measured spans of virtual time. */
  readonly warmupMs?: number;
  readonly measureMs?: number;
}

/**
 * One replica's maximum sustainable throughput for a workload: a closed loop keeps `backlog`
 * requests waiting at all times (drawn from the same workload generator as the runs, so a
 * shared-prefix replica sees every group, as it would under random routing), and completions are
 * counted over the measured span after a warm-up. Cluster capacity = this × replicas.
 */
export function measureCapacity(o: CalibrationOptions): Capacity {
  const backlog = 8;
  const warmupMs = o.warmupMs ?? 60_000;
  const measureMs = o.measureMs ?? 120_000;
  const seed = o.seed ?? 1;
  const groups = o.workload.kind === 'shared-prefix' ? new PrefixGroups(o.workload, seed) : undefined;
  // The stream only supplies request shapes; its arrival times are ignored.
  const stream = new ArrivalStream(o.workload, groups, 1000, 0, 1, seed, Number.POSITIVE_INFINITY);
  let finished = 0;
  let tokens = 0;
  let runningSum = 0;
  let runningSamples = 0;
  const end = warmupMs + measureMs;
  const engine = new Engine(
    {
      preset: o.preset ?? 'llama-8b-h100',
      ...(o.maxNumSeqs !== undefined ? { maxNumSeqs: o.maxNumSeqs } : {}),
      ...(o.numBlocks !== undefined ? { numBlocks: o.numBlocks } : {}),
      maxWaiting: 1_000_000,
      seed,
    },
    {
      onFinish: (seq, at) => {
        if (at >= warmupMs && at < end) {
          finished++;
          tokens += seq.request.outputTokens;
        }
      },
    },
  );
  const refill = (now: number): void => {
    while (engine.waitingCount < backlog) {
      const r = stream.next();
      if (!r) return;
      engine.submit({ promptTokens: r.promptTokens, outputTokens: r.outputTokens, blockHashes: r.blockHashes }, now);
    }
  };
  for (let now = 0; now < end; now += 10) {
    engine.advance(now);
    refill(now);
    if (now >= warmupMs) {
      runningSum += engine.runningCount;
      runningSamples++;
    }
  }
  const seconds = measureMs / 1000;
  return { requestsPerSec: finished / seconds, outputTokensPerSec: tokens / seconds, meanRunning: runningSum / Math.max(1, runningSamples) };
}
