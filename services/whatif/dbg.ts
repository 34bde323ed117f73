import { loadScenario, resolveScenario, runStrategy, strategySpecs } from '@spillway/whatif';
const file = loadScenario(process.argv[2] as string);
const scenario = resolveScenario(file, { load: Number(process.argv[3]) });
const [spec] = strategySpecs(['spillway'], (file.config ?? {}) as Record<string, Record<string, unknown>>);
const r = runStrategy(scenario, spec!, 1);
console.log(JSON.stringify({ p90: r.figures?.ttftMs ?? (r as any).ttftMs }).slice(0, 300));
