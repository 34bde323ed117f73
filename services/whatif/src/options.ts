import { CliError, commaList, loadConfigFile, nonNegativeInt, parseCommandLine, renderHelp, type FlagSpecs } from '@spillway/cli';
import { schedulerConfigSchema } from '@spillway/scheduler';
import { z } from 'zod';
import { resolveScenario, type ResolvedScenario } from './resolve.js';
import { scenarioSchema, type ScenarioFile } from './scenario.js';

/** spillway-whatif's flags, each also `SPILLWAY_<FLAG>`. */
export const whatifFlags = {
  scenario: { description: 'scenario file (YAML or JSON; see docs/whatif.md)', schema: z.string().min(1), placeholder: 'FILE' },
  json: { description: 'also write the results as JSON to FILE', schema: z.string().min(1).optional(), placeholder: 'FILE' },
  load: {
    description: "offered cluster load, a fraction of calibrated capacity (overrides the file's load.clusterFraction)",
    schema: z.coerce.number().finite().positive().max(10).optional(),
    placeholder: 'X',
  },
  seed: { description: 'run this one seed (overrides the file)', schema: nonNegativeInt().optional(), placeholder: 'N' },
  seeds: {
    description: 'run these seeds, e.g. 1,2,3 (overrides the file)',
    schema: commaList()
      .transform((list) => list.map(Number))
      .pipe(z.array(z.number().int().nonnegative()).min(1))
      .optional(),
    placeholder: 'a,b',
  },
  strategies: {
    description: "run only these of the file's strategies",
    schema: commaList().pipe(z.array(z.string()).min(1)).optional(),
    placeholder: 'a,b',
  },
  duration: {
    description: "seconds of arrivals (overrides the file's durationS; faults keep their times)",
    schema: z.coerce.number().finite().positive().max(3600).optional(),
    placeholder: 'S',
  },
  sweep: {
    description:
      "the latency / cross-zone curve: run each Spillway strategy once per value of this scheduler config field, e.g. zoneBiasMs=0,2,4,8,16,32 (overrides the file's sweep)",
    schema: z
      .string()
      .regex(/^[A-Za-z][A-Za-z0-9]*=[^=]+$/, 'FIELD=v1,v2,... (one scheduler config field and its values)')
      .transform((text) => {
        const [field, list] = text.split('=') as [string, string];
        return { [field]: list.split(',').map((v) => Number(v.trim())) };
      })
      .pipe(z.record(z.string(), z.array(z.number().finite().min(0)).min(1).max(32)))
      .optional(),
    placeholder: 'FIELD=a,b',
  },
  workers: {
    description: 'worker threads running strategies in parallel (0 = none; default: one per core, at most 4)',
    schema: nonNegativeInt().max(64).optional(),
    placeholder: 'N',
  },
  quiet: { description: 'no progress line on stderr', schema: z.boolean().default(false), boolean: true },
} satisfies FlagSpecs;

export const HELP = renderHelp(
  'spillway-whatif',
  'spillway-whatif: what would each routing strategy do with these zones, replicas and traffic? Runs a scenario file through\n' +
    'the production scheduler and fleet in virtual time (deterministic for a seed) and prints a per-strategy table.\n' +
    'Example: npx spillway-whatif --scenario infra/scenarios/hot-zone-same-region.yaml --load 0.95 --seeds 1,2,3',
  whatifFlags,
);

export interface WhatifOptions {
  readonly file: string;
  readonly scenario: ScenarioFile;
  readonly resolved: ResolvedScenario;
  readonly json: string | undefined;
  readonly workers: number | undefined;
  readonly quiet: boolean;
}

export type ParsedArgs = { help: true } | { help: false; options: WhatifOptions };

/** Loads and validates a scenario file; a bad file is a CliError naming the field (exit 2). */
export function loadScenario(path: string): ScenarioFile {
  return loadConfigFile(path, scenarioSchema);
}

/** Parses argv and the environment, loads the scenario and resolves it; throws CliError on bad input. */
export function parseWhatifArgs(argv: readonly string[], env: NodeJS.ProcessEnv = {}): ParsedArgs {
  const parsed = parseCommandLine(whatifFlags, argv, env);
  if (parsed.help) return { help: true };
  const v = parsed.values;
  if (v.seed !== undefined && v.seeds !== undefined) throw new CliError('--seed and --seeds: give one of them', 'seeds');
  const scenario = loadScenario(v.scenario);
  if (v.load !== undefined && scenario.load.clusterFraction === undefined) {
    throw new CliError(`--load: ${v.scenario} gives its load in rps; --load overrides load.clusterFraction`, 'load');
  }
  let file = scenario;
  if (v.strategies) {
    const names = scenario.strategies.map((s) => (typeof s === 'string' ? s : s.name));
    const unknown = v.strategies.filter((n) => !names.includes(n));
    if (unknown.length > 0)
      throw new CliError(`--strategies: ${unknown.join(', ')} not in the scenario (it has ${names.join(', ')})`, 'strategies');
    const keep = new Set(v.strategies);
    file = { ...scenario, strategies: scenario.strategies.filter((s) => keep.has(typeof s === 'string' ? s : s.name)) };
  }
  for (const [field, values] of Object.entries(v.sweep ?? {})) {
    for (const value of values) {
      const r = schedulerConfigSchema.safeParse({ [field]: value });
      if (!r.success)
        throw new CliError(`--sweep: ${field}=${value}: ${r.error.issues[0]?.message ?? 'not a scheduler config value'}`, 'sweep');
    }
  }
  let resolved: ResolvedScenario;
  try {
    resolved = resolveScenario(file, {
      load: v.load,
      seeds: v.seeds ?? (v.seed !== undefined ? [v.seed] : undefined),
      durationS: v.duration,
      sweep: v.sweep,
    });
  } catch (error) {
    throw new CliError(`${v.scenario}: ${(error as Error).message}`);
  }
  return { help: false, options: { file: v.scenario, scenario: file, resolved, json: v.json, workers: v.workers, quiet: v.quiet } };
}
