import { availableParallelism } from 'node:os';
import { Worker } from 'node:worker_threads';
import type { ResolvedScenario } from './resolve.js';
import type { RunResult } from './measure.js';
import { runStrategy } from './simulation.js';
import {
  seesCompletion,
  SHARING_KINDS,
  sharesState,
  STRATEGY_DESCRIPTIONS,
  type ResponseBodyMode,
  type StrategyKind,
  type StrategySpec,
} from './strategies.js';

/** What `--json` writes: one scenario instance (file, load) and one result per (strategy, seed). */
export interface ScenarioReport {
  readonly scenario: string;
  readonly title: string;
  readonly seeds: readonly number[];
  /** Offered cluster load as a fraction of calibrated capacity (null when the file gives rps). */
  readonly load: number | null;
  /** The offered load over the measured window (live capacity): its time-weighted mean and its peak. */
  readonly meanLoad: number;
  readonly peakLoad: number;
  /** What the offered load asks of routing across zones, as shares of arrivals (spill.ts): overflow, required spill, equal-utilisation spill. */
  readonly overflowShare: number;
  readonly requiredSpillShare: number;
  readonly equalUtilisationShare: number;
  readonly durationS: number;
  readonly warmupS: number;
  /** A served request meeting this TTFT counts as goodput. */
  readonly ttftObjectiveMs: number;
  readonly capacity: {
    readonly perReplicaRps: Readonly<Record<string, number>>;
    readonly clusterRps: number;
    readonly method: string;
    readonly cacheBlindPerReplicaRps?: Readonly<Record<string, number>>;
  };
  readonly strategies: readonly {
    readonly name: string;
    readonly kind: StrategyKind;
    readonly description: string;
    readonly config: Readonly<Record<string, unknown>>;
    /** A point of a sweep: the strategy it varies, the field and its value. */
    readonly sweep?: { readonly of: string; readonly field: string; readonly value: number };
  }[];
  readonly results: readonly RunResult[];
}

export interface Job {
  readonly strategy: number;
  readonly seed: number;
}

export interface RunOptions {
  /** Worker threads (0 = run in this thread). Default: min(available cores, jobs, 4), 0 for one job. */
  readonly workers?: number | undefined;
  /** Run on this pool instead (shared by several scenarios, e.g. the benchmark); it stays open. */
  readonly pool?: SimPool | undefined;
  /** Called after each (strategy, seed) run. */
  readonly onProgress?: ((done: number, total: number, last: RunResult) => void) | undefined;
}

/** Runs every (strategy, seed) of a resolved scenario; results come back in (strategy, seed) order. */
export async function runScenario(scenario: ResolvedScenario, options: RunOptions = {}): Promise<ScenarioReport> {
  const jobs: Job[] = scenario.strategies.flatMap((_, strategy) => scenario.seeds.map((seed) => ({ strategy, seed })));
  const size = options.workers ?? (jobs.length > 1 ? Math.min(availableParallelism(), jobs.length, 4) : 0);
  let results: RunResult[];
  if (options.pool || size > 0) {
    const pool = options.pool ?? new SimPool(size);
    let done = 0;
    try {
      results = await Promise.all(
        jobs.map(async (job) => {
          const r = await pool.run(scenario, job);
          options.onProgress?.(++done, jobs.length, r);
          return r;
        }),
      );
    } finally {
      if (!options.pool) await pool.close();
    }
  } else {
    results = jobs.map((job, i) => {
      const r = runStrategy(scenario, scenario.strategies[job.strategy] as ResolvedScenario['strategies'][number], job.seed);
      options.onProgress?.(i + 1, jobs.length, r);
      return r;
    });
  }
  return reportOf(scenario, results);
}

const share = (v: number): number => Math.round(v * 10_000) / 10_000;

function reportOf(scenario: ResolvedScenario, results: RunResult[]): ScenarioReport {
  const zones = scenario.zones.map((z) => z.zone);
  const perZone = (values: readonly number[]) =>
    Object.fromEntries(zones.map((z, i) => [z, Math.round((values[i] as number) * 100) / 100]));
  return {
    scenario: scenario.name,
    title: scenario.title,
    seeds: scenario.seeds,
    load: scenario.clusterFraction ?? null,
    meanLoad: share(scenario.spill.meanLoad),
    peakLoad: share(scenario.spill.peakLoad),
    overflowShare: share(scenario.spill.overflowShare),
    requiredSpillShare: share(scenario.spill.requiredShare),
    equalUtilisationShare: share(scenario.spill.equalUtilisationShare),
    durationS: scenario.durationMs / 1000,
    warmupS: scenario.warmupMs / 1000,
    ttftObjectiveMs: scenario.ttftObjectiveMs,
    capacity: {
      perReplicaRps: perZone(scenario.capacity.perReplica),
      clusterRps: Math.round(scenario.capacity.clusterRps * 100) / 100,
      method: scenario.capacity.method,
      ...(scenario.capacity.cacheBlindPerReplica ? { cacheBlindPerReplicaRps: perZone(scenario.capacity.cacheBlindPerReplica) } : {}),
    },
    strategies: scenario.strategies.map((s) => ({
      name: s.name,
      kind: s.kind,
      description: describeStrategy(s, scenario.epps),
      config: s.config,
      ...(s.sweep ? { sweep: s.sweep } : {}),
    })),
    results,
  };
}

/** A strategy's description, saying whether its EPPs share state and see completions where that can apply. */
function describeStrategy(spec: StrategySpec, epps: { sharing: boolean; responseBody: ResponseBodyMode }): string {
  const base = STRATEGY_DESCRIPTIONS[spec.kind];
  if (!SHARING_KINDS.includes(spec.kind)) return base;
  const sharing = sharesState(spec, epps.sharing)
    ? "the pool's EPPs share picks in flight, prefix placements and penalties"
    : 'no state shared between EPPs';
  const lifetime = seesCompletion(spec, epps.responseBody)
    ? 'response bodies stream through the EPPs: they see each completion'
    : 'response headers only (the shipped Envoy config): the EPPs see a request start, never its end';
  return `${base}; ${sharing}; ${lifetime}`;
}

interface Pending {
  readonly scenario: ResolvedScenario;
  readonly job: Job;
  readonly resolve: (r: RunResult) => void;
  readonly reject: (e: Error) => void;
}

/**
 * Worker threads running whole (strategy, seed) simulations, fed from one queue. Runs are
 * independent and deterministic, so results do not depend on which thread ran them.
 */
export class SimPool {
  private readonly idle: Worker[] = [];
  private readonly workers: Worker[] = [];
  private readonly queue: Pending[] = [];
  private readonly busy = new Map<Worker, Pending>();
  private failure: Error | undefined;

  constructor(size: number) {
    for (let i = 0; i < Math.max(1, size); i++) {
      const worker = startWorker();
      worker.on('message', (m: { result?: RunResult; error?: string }) => {
        const task = this.busy.get(worker);
        this.busy.delete(worker);
        if (task) {
          if (m.error !== undefined) task.reject(new Error(m.error));
          else task.resolve(m.result as RunResult);
        }
        this.idle.push(worker);
        this.pump();
      });
      worker.on('error', (error) => {
        this.failure = error;
        this.busy.get(worker)?.reject(error);
        this.busy.delete(worker);
        for (const t of this.queue.splice(0)) t.reject(error);
      });
      this.workers.push(worker);
      this.idle.push(worker);
    }
  }

  run(scenario: ResolvedScenario, job: Job): Promise<RunResult> {
    if (this.failure) return Promise.reject(this.failure);
    return new Promise((resolve, reject) => {
      this.queue.push({ scenario, job, resolve, reject });
      this.pump();
    });
  }

  async close(): Promise<void> {
    await Promise.all(this.workers.map((w) => w.terminate()));
  }

  private pump(): void {
    while (this.idle.length > 0 && this.queue.length > 0) {
      const worker = this.idle.pop() as Worker;
      const task = this.queue.shift() as Pending;
      this.busy.set(worker, task);
      worker.postMessage({ scenario: task.scenario, job: task.job });
    }
  }
}

/**
 * The worker module next to this one: compiled `.js` from dist. Run from source (the benchmark and
 * the tests), `source-worker.mjs` at the package root registers the TypeScript loader in the worker
 * thread before importing `worker.ts`; it is a development file, outside the built package.
 */
function startWorker(): Worker {
  const self = import.meta.url;
  if (!self.endsWith('.ts')) return new Worker(new URL('./worker.js', self));
  return new Worker(new URL('../source-worker.mjs', self), { workerData: { workerModule: new URL('./worker.ts', self).href } });
}
