import { measureCapacity, type Capacity } from './calibrate.js';
import type { StrategySpec } from './routers.js';
import type { ReplicaFailure, SimOptions } from './sim.js';
import { THREE_ZONES, type ZoneSpec } from './topology.js';
import { SHAREGPT, SHARED_PREFIX, type WorkloadSpec } from './workload.js';

/**
 * The scenarios of the routing benchmark. Every rate is a fraction of the cluster's capacity:
 * one replica's calibrated maximum throughput for the scenario's workload × the replicas.
 */

/** The replica model: llama-8b-h100 timing, scaled to 64 sequences and 7,000 KV blocks. */
export const REPLICA = { preset: 'llama-8b-h100', maxNumSeqs: 64, numBlocks: 7000 } as const;

export type ScenarioName = 'balanced' | 'hot-zone' | 'zone-loss' | 'prefix-heavy';

export interface Scenario {
  readonly name: ScenarioName;
  readonly title: string;
  readonly workload: WorkloadSpec;
  readonly zones: readonly ZoneSpec[];
  /** Cluster load ladder (fractions of cluster capacity), full and quick. */
  readonly ladder: readonly number[];
  readonly quickLadder: readonly number[];
  /** Per-gateway arrival rates for cluster load `load`, given one replica's capacity (req/s). */
  rates(load: number, perReplica: number): number[];
  failures?(durationMs: number): ReplicaFailure[];
}

function proportional(zones: readonly ZoneSpec[], total: number): number[] {
  const replicas = zones.reduce((n, z) => n + z.replicas, 0);
  return zones.map((z) => (total * z.replicas) / replicas);
}

function clusterReplicas(zones: readonly ZoneSpec[]): number {
  return zones.reduce((n, z) => n + z.replicas, 0);
}

/** Zone 0 gets 150 % of its own capacity; the others share what is left of the cluster load. */
export const HOT_FACTOR = 1.5;

export const SCENARIOS: readonly Scenario[] = [
  {
    name: 'balanced',
    title: 'Balanced load (ShareGPT-like, every zone at the same fraction of its capacity)',
    workload: SHAREGPT,
    zones: THREE_ZONES,
    ladder: [0.4, 0.6, 0.8, 0.95, 1.1],
    quickLadder: [0.95],
    rates: (load, perReplica) => proportional(THREE_ZONES, load * perReplica * clusterReplicas(THREE_ZONES)),
  },
  {
    name: 'hot-zone',
    title: 'One zone at 150 % of its capacity (zone-a), the others with room (ShareGPT-like)',
    workload: SHAREGPT,
    zones: THREE_ZONES,
    ladder: [0.6, 0.8, 0.95],
    quickLadder: [0.95],
    rates: (load, perReplica) => {
      const [hot, ...rest] = THREE_ZONES as [ZoneSpec, ...ZoneSpec[]];
      const hotRate = HOT_FACTOR * perReplica * hot.replicas;
      const left = Math.max(0, load * perReplica * clusterReplicas(THREE_ZONES) - hotRate);
      return [hotRate, ...proportional(rest, left)];
    },
  },
  {
    name: 'zone-loss',
    title: 'zone-a loses half its replicas a third into the run (back, cold, at five sixths), balanced ShareGPT-like load',
    workload: SHAREGPT,
    zones: THREE_ZONES,
    ladder: [0.6, 0.8, 0.95],
    quickLadder: [0.8],
    rates: (load, perReplica) => proportional(THREE_ZONES, load * perReplica * clusterReplicas(THREE_ZONES)),
    failures: (durationMs) => [{ zone: 0, count: 2, atMs: durationMs / 3, returnAtMs: (durationMs * 5) / 6 }],
  },
  {
    name: 'prefix-heavy',
    title: 'Prefix-heavy (48 shared system prompts of 2k–6k tokens + 200–1,200-token questions)',
    workload: SHARED_PREFIX,
    zones: THREE_ZONES,
    ladder: [0.4, 0.6, 0.8, 0.95, 1.1],
    quickLadder: [0.8],
    rates: (load, perReplica) => proportional(THREE_ZONES, load * perReplica * clusterReplicas(THREE_ZONES)),
  },
];

const capacities = new Map<WorkloadSpec, Capacity>();

/** One replica's capacity for a workload (memoised per process). */
export function capacityOf(workload: WorkloadSpec): Capacity {
  let c = capacities.get(workload);
  if (!c) {
    c = measureCapacity({ workload, preset: REPLICA.preset, maxNumSeqs: REPLICA.maxNumSeqs, numBlocks: REPLICA.numBlocks });
    capacities.set(workload, c);
  }
  return c;
}

export interface RunSpec {
  readonly scenario: Scenario;
  readonly load: number;
  readonly strategy: StrategySpec;
  readonly seed: number;
  readonly durationMs: number;
  readonly warmupMs: number;
}

export function simOptions(spec: RunSpec): SimOptions {
  const { scenario, load } = spec;
  const cap = capacityOf(scenario.workload);
  return {
    seed: spec.seed,
    zones: scenario.zones,
    strategy: spec.strategy,
    workload: scenario.workload,
    rates: scenario.rates(load, cap.requestsPerSec),
    durationMs: spec.durationMs,
    warmupMs: spec.warmupMs,
    preset: REPLICA.preset,
    maxNumSeqs: REPLICA.maxNumSeqs,
    numBlocks: REPLICA.numBlocks,
    ...(scenario.failures ? { failures: scenario.failures(spec.durationMs) } : {}),
  };
}

/** Share of all arrivals that zone 0 cannot serve itself in the hot-zone scenario. */
export function hotOverflowShare(load: number, perReplica: number): number {
  const rates = SCENARIOS[1]?.rates(load, perReplica) ?? [];
  const hot = rates[0] ?? 0;
  const total = rates.reduce((a, b) => a + b, 0);
  const hotCapacity = perReplica * (THREE_ZONES[0]?.replicas ?? 0);
  return total > 0 ? Math.max(0, hot - hotCapacity) / total : 0;
}
