import { scenarioSchema, type ScenarioFile } from '../src/index.js';

/** A small, valid scenario (3 zones × 2 replicas, 15 s) to vary in tests. */
export function smallScenario(overrides: Record<string, unknown> = {}): Record<string, unknown> {
  return {
    name: 'small',
    seed: 7,
    durationS: 15,
    warmupS: 3,
    zones: [
      { zone: 'zone-a', region: 'r1', replicas: 2 },
      { zone: 'zone-b', region: 'r1', replicas: 2 },
      { zone: 'zone-c', region: 'r1', replicas: 2 },
    ],
    engine: { preset: 'llama-8b-h100', maxNumSeqs: 64, numBlocks: 7000 },
    workload: { kind: 'sharegpt' },
    load: { clusterFraction: 0.6 },
    strategies: ['random', 'round-robin', 'least-queue', 'reference', 'zone-local', 'spillway'],
    ...overrides,
  };
}

export function parse(raw: unknown): ScenarioFile {
  return scenarioSchema.parse(raw);
}

/** The validation messages of a bad scenario, as `path: message` lines. */
export function problems(raw: unknown): string[] {
  const r = scenarioSchema.safeParse(raw);
  if (r.success) return [];
  return r.error.issues.map((i) => `${i.path.join('.')}: ${i.message}`);
}
