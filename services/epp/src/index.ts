export { startEpp } from './epp.js';
export type { RunningEpp, StartOptions } from './epp.js';
export { loadEppConfig, eppFlags, eppConfigFileSchema, EPP_HELP } from './config.js';
export type { EppConfig, EppFlagValues } from './config.js';
export { HealthState, HEALTH_SERVICES } from './health.js';
export { EppMetrics } from './metrics.js';
export type { UiState, UiZone, UiPod, UiSpill, UiStream, UiDecision } from './ui/state-types.js';
