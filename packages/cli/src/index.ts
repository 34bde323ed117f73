export { parseCommandLine, renderHelp, flagName, envName, CliError } from './flags.js';
export type { FlagSpec, FlagSpecs, FlagValues, ParsedCommandLine } from './flags.js';
export { loadConfigFile } from './config-file.js';
export { runMain } from './run.js';
export { port, positiveInt, nonNegativeInt, durationMs, commaList } from './schemas.js';
