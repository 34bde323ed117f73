export { scenarioSchema, resolveEngine } from './scenario.js';
export type { ScenarioFile } from './scenario.js';
export { resolveScenario, toWorkloadSpec } from './resolve.js';
export type { ResolvedScenario, ResolveOptions, WindowSpec, ResolvedFault, CapacityReport } from './resolve.js';
export { loadScenario, parseWhatifArgs, whatifFlags, HELP } from './options.js';
export { runScenario, SimPool } from './run.js';
export type { ScenarioReport, RunOptions } from './run.js';
export { runStrategy } from './simulation.js';
export type { RunObserver, RunResult, WindowResult } from './simulation.js';
export type { MessageInfo } from './epps.js';
export type { Figures } from './tally.js';
export {
  DEPLOYMENTS,
  STRATEGY_KINDS,
  STRATEGY_DESCRIPTIONS,
  ZONE_UNAWARE,
  schedulerConfigFor,
  strategySpecs,
  withSweep,
} from './strategies.js';
export type { Deployment, StrategyKind, StrategySpec, StrategyContext } from './strategies.js';
export type { SpillFigures } from './spill.js';
export {
  byStrategy,
  describe,
  flowTable,
  median,
  renderMarkdown,
  renderText,
  spread,
  summaryTable,
  sweepTables,
  windowTables,
} from './report.js';
export type { Table, Spread } from './report.js';
export { measureCapacity, capacityOf } from './calibrate.js';
export type { Capacity } from './calibrate.js';
export { lineChart } from './svg.js';
export type { ChartOptions, Series } from './svg.js';
