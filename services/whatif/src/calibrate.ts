import { Engine, type EngineConfig } from '@spillway/engine';
import { ArrivalStream, constantRate, prefixGroupsOf, type WorkloadSpec } from './workload.js';

export interface Capacity {
  /** Requests per second one replica completes when it always has work queued. */
  readonly requestsPerSec: number;
  readonly outputTokensPerSec: number;
  /** Mean running batch while saturated. */
  readonly meanRunning: number;
  /** Prompt tokens served from the prefix cache / prompt tokens looked up, while saturated. */
  readonly prefixHitShare: number;
}

export interface CalibrationOptions {
  readonly workload: WorkloadSpec;
  readonly engine: EngineConfig;
  /**
   * Shared-prefix groups this replica sees: the first `groupLimit` of each prefix part. Capacity
   * is measured with each replica holding its share of the groups (see docs/whatif.md).
   */
  readonly groupLimit?: number;
  readonly seed?: number;
  /** Warm-up and measured spans of virtual time. */
  readonly warmupMs?: number;
  readonly measureMs?: number;
}

/**
 * One replica's maximum sustainable throughput for a workload: a closed loop keeps a batch's worth
 * of requests waiting at all times (shapes drawn from the same generator as the runs), and
 * completions are counted over the measured span after a warm-up. It depends on the workload and
 * the engine only, never on a routing strategy. Cluster capacity = the sum over replicas.
 */
export function measureCapacity(o: CalibrationOptions): Capacity {
  // A full batch's worth waiting: with LoRA a waiting request whose adapter cannot get a slot is
  // skipped, so a short queue would starve the batch; without LoRA any queue keeps it full.
  const backlog = Math.max(8, o.engine.maxNumSeqs);
  const warmupMs = o.warmupMs ?? 60_000;
  const measureMs = o.measureMs ?? 120_000;
  const seed = o.seed ?? 1;
  const end = warmupMs + measureMs;
  // The stream only supplies request shapes; its arrival times are ignored.
  const stream = new ArrivalStream({
    workload: o.workload,
    groups: prefixGroupsOf(o.workload, seed),
    schedule: constantRate(1000),
    gateway: 0,
    gateways: 1,
    seed,
    endMs: Number.POSITIVE_INFINITY,
    groupLimit: o.groupLimit,
  });
  let finished = 0;
  let tokens = 0;
  let hits = 0;
  let prompts = 0;
  const engine = new Engine(
    { ...o.engine, maxWaiting: 1_000_000, seed },
    {
      onFinish: (seq, at) => {
        if (at < warmupMs || at >= end) return;
        finished++;
        tokens += seq.request.outputTokens;
        hits += seq.cachedTokens;
        prompts += seq.request.promptTokens;
      },
    },
  );
  const refill = (now: number): void => {
    while (engine.waitingCount < backlog) {
      const r = stream.next();
      if (!r) return;
      engine.submit(
        {
          promptTokens: r.promptTokens,
          outputTokens: r.outputTokens,
          blockHashes: r.blockHashes,
          ...(r.lora !== undefined ? { lora: r.lora } : {}),
        },
        now,
      );
    }
  };
  let runningSum = 0;
  let runningSamples = 0;
  // Sample the batch every 10 ms of virtual time; refill after every event so the queue never runs dry.
  let nextSample = warmupMs;
  for (let now = 0; now < end;) {
    refill(now);
    const next = Math.min(engine.nextEventAt(), nextSample, end);
    engine.advance(next);
    if (next === nextSample) {
      if (next >= warmupMs) {
        runningSum += engine.runningCount;
        runningSamples++;
      }
      nextSample += 10;
    }
    now = next;
  }
  const seconds = measureMs / 1000;
  return {
    requestsPerSec: finished / seconds,
    outputTokensPerSec: tokens / seconds,
    meanRunning: runningSum / Math.max(1, runningSamples),
    prefixHitShare: prompts > 0 ? hits / prompts : 0,
  };
}

const memo = new Map<string, Capacity>();

/** measureCapacity, memoised per process on its inputs. */
export function capacityOf(o: CalibrationOptions): Capacity {
  const key = JSON.stringify([o.workload, o.engine, o.groupLimit ?? null, o.seed ?? 1]);
  let c = memo.get(key);
  if (!c) {
    c = measureCapacity(o);
    memo.set(key, c);
  }
  return c;
}
