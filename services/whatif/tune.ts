import { readdirSync } from 'node:fs';
import { join } from 'node:path';
import { allTargets, loadScenario, resolveScenario, ResultSet, runScenario, SimPool } from '@spillway/whatif';

// Tuning harness (not committed): node --conditions=@spillway/source --import tsx services/whatif/tune.ts '<spillway config json>' [seeds] [filter]
const override = JSON.parse(process.argv[2] ?? '{}') as Record<string, unknown>;
const seeds = (process.argv[3] ?? '1').split(',').map(Number);
const filter = new RegExp(process.argv[4] ?? '.');
const dir = 'infra/scenarios';
const pool = new SimPool(2);
const set = new ResultSet();
const started = Date.now();
for (const f of readdirSync(dir).filter((f) => f.endsWith('.yaml') && filter.test(f))) {
  const file = loadScenario(join(dir, f));
  const withCfg = { ...file, config: { ...(file.config ?? {}), spillway: { ...((file.config ?? {}) as Record<string, Record<string, unknown>>)['spillway'], ...override } } };
  for (const load of file.ladder ?? [file.load.clusterFraction]) {
    const resolved = resolveScenario(withCfg as typeof file, { load, seeds });
    set.add(await runScenario(resolved, { pool }));
  }
}
await pool.close();
for (const g of allTargets(set, 'spillway')) {
  console.log(g.title.slice(0, 60));
  for (const v of g.verdicts) console.log(`  ${v.met === undefined ? '-' : v.met ? 'MET    ' : 'NOT MET'} ${v.scenario}@${v.load}: ${v.detail}`);
}
console.log(`${((Date.now() - started) / 1000).toFixed(0)} s`);
