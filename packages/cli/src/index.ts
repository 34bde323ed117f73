export { parseCommandLine, renderHelp, flagName, envName, CliError } from './flags.js';
export type { FlagSpec, FlagSpecs, FlagValues, ParsedCommandLine } from './flags.js';
export {
  loadConfigFile,
  readConfigFile,
  readConfigBytes,
  readConfigBytesAsync,
  parseConfigText,
  configHash,
  MAX_CONFIG_FILE_BYTES,
} from './config-file.js';
export type { ConfigFileVersion } from './config-file.js';
export { runMain } from './run.js';
export { port, positiveInt, nonNegativeInt, durationMs, commaList, logLevel, LOG_LEVELS } from './schemas.js';
export type { LogLevel } from './schemas.js';
