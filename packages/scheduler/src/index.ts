export { Scheduler } from './scheduler.js';
export type { SchedulerOptions, PickRequest, ServedOutcome, EndpointExplanation } from './scheduler.js';
export type { EntryCost, EntryScore } from './pricing.js';
export {
  schedulerConfigSchema,
  scorerWeightsSchema,
  prefixConfigSchema,
  remoteConfigSchema,
  objectiveSchema,
  networkConfigSchema,
  ratesConfigSchema,
  serviceRatesSchema,
  gapsConfigSchema,
  fullConfigSchema,
  parseSchedulerConfig,
} from './config.js';
export type {
  SchedulerConfig,
  SchedulerConfigInput,
  ScorerWeights,
  SubsetMode,
  Policy,
  ServiceRates,
  NetworkConfig,
  ChargesConfig,
} from './config.js';
export type { Decision, DecisionEntry, DecisionCounts, DecisionRule, DecisionStatus, EntryReason, ChargeListener } from './decision.js';
export { chargeBoundMs, usableMaxTokens } from './charge-bound.js';
export type { GatewayZoneUse } from './origins.js';
export { queueScorer, kvCacheScorer, loraScorer, prefixCacheScorer, defaultScorers, scoreGroup, effectiveQueue } from './scorers.js';
export type { Scorer, ScoreArrays, ScoringContext, WeightedScorer } from './scorers.js';
export { seededRng } from './rng.js';
export type { Rng } from './rng.js';
export { hashPromptBlocks, prefixSeed } from './hash.js';
export { SharedState } from './shared-state.js';
export { sharedStateConfigSchema, SHARED_STATE_DEFAULTS } from './sharing-config.js';
export type { SharedStateConfig } from './sharing-config.js';
export type { SharedStateOptions, SharedStateOutbox, SharedApplyResult, SharedExpiry, SharedPeer, SharedRefusal } from './shared-state.js';
export { KvBlockIndex, KvPod, KV_ENTRY_BYTES } from './kv-index.js';
export type { KvIndexOptions, KvIndexStats } from './kv-index.js';
export type { CacheIndexSource } from './kv-lookup.js';
export { FlowQueue, Held, flowIdOf, DEFAULT_FLOW, MAX_FLOW_ID_CHARS } from './flow-queue.js';
export type { FlowQueueLimits, HoldRequest, OfferResult, BandStats } from './flow-queue.js';
export { flowControlConfigSchema } from './flow-config.js';
export type { FlowControlConfig } from './flow-config.js';
export { shouldHold } from './hold.js';
export type { PricedCandidates } from './hold.js';
