import { writeFileSync } from 'node:fs';
import { runMain } from '@spillway/cli';
import { HELP, parseWhatifArgs } from './options.js';
import { describe, flowTable, renderText, summaryTable, sweepTables, windowTables } from './report.js';
import { runScenario } from './run.js';

/** The spillway-whatif binary: load a scenario, run every (strategy, seed), print the tables. */
runMain(async () => {
  const parsed = parseWhatifArgs(process.argv.slice(2), process.env);
  if (parsed.help) {
    process.stdout.write(HELP);
    return;
  }
  const { resolved, json, workers, quiet } = parsed.options;
  const started = Date.now();
  const tty = process.stderr.isTTY === true;
  const report = await runScenario(resolved, {
    workers,
    onProgress: quiet
      ? undefined
      : (done, total, last) => {
          const line = `[${done}/${total}] ${last.strategy} seed ${last.seed}: p90 TTFT ${last.ttftMs.p90.toFixed(0)} ms, cross-zone ${(last.crossZoneShare * 100).toFixed(1)} % (${((Date.now() - started) / 1000).toFixed(1)} s)`;
          process.stderr.write(tty ? `\r\x1b[K${line}${done === total ? '\n' : ''}` : `${line}\n`);
        },
  });
  const zones = resolved.zones.map((z) => z.zone);
  const out = [describe(report), '', renderText(summaryTable(report))];
  const flow = flowTable(report);
  if (flow) out.push('', flow.title, renderText(flow.table));
  for (const w of windowTables(report, zones)) out.push('', w.title, renderText(w.table));
  for (const w of sweepTables(report)) out.push('', w.title, renderText(w.table));
  process.stdout.write(`${out.join('\n')}\n`);
  if (json) writeFileSync(json, `${JSON.stringify(report, null, 2)}\n`);
  if (!quiet) process.stderr.write(`${report.results.length} runs in ${((Date.now() - started) / 1000).toFixed(1)} s\n`);
});
