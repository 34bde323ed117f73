import { parentPort } from 'node:worker_threads';
import type { ResolvedScenario } from './resolve.js';
import type { Job } from './run.js';
import { runStrategy } from './simulation.js';

/** A SimPool thread: runs each (scenario, strategy, seed) job it is sent and posts the result back. */
parentPort?.on('message', (m: { scenario: ResolvedScenario; job: Job }) => {
  try {
    const spec = m.scenario.strategies[m.job.strategy];
    if (!spec) throw new Error(`no strategy #${m.job.strategy}`);
    parentPort?.postMessage({ result: runStrategy(m.scenario, spec, m.job.seed) });
  } catch (error) {
    parentPort?.postMessage({ error: error instanceof Error ? (error.stack ?? error.message) : String(error) });
  }
});
