export { parseEndpointAddress, parseAddressPattern } from './address.js';
export type { EndpointAddress, AddressPattern, SubsetHint } from './address.js';
export { escapeToken, unescapeToken } from './token.js';
export {
  readinessEventSchema,
  metricsEventSchema,
  spillwayEventSchema,
  serviceRatesSchema,
  kvSnapshotEventSchema,
  MAX_KV_SNAPSHOT_KEYS,
  MAX_KV_SNAPSHOT_RANKS,
  MAX_KV_SNAPSHOT_TIERS,
  EVENT_KINDS,
  ENGINES,
} from './schema.js';
export type {
  ReadinessEvent,
  MetricsEvent,
  KvSnapshotEvent,
  KvSnapshotRank,
  KvSnapshotTier,
  ServiceRates,
  SpillwayEvent,
  EventKind,
  Engine,
} from './schema.js';
export { SUBJECT_ROOT, ALL_SUBJECTS, subjectFor, subjectOf, isSubjectFor, poolFilter, zoneFilter, parseSubject } from './subject.js';
export type { SubjectParts } from './subject.js';
export { encodeEvent, decodeEvent, fitKvSnapshot, MAX_EVENT_BYTES, MAX_KV_SNAPSHOT_BYTES } from './codec.js';
export { compileSchema, REJECTED } from './precompile.js';
export type { Compiled } from './precompile.js';
export type { DecodeResult, DecodeError, DecodeErrorReason } from './codec.js';
export { RateWindow, DEFAULT_RATES_WINDOW_MS } from './rates.js';
export type { Counters, Moments, RateUpdate } from './rates.js';
export {
  KV_SUBJECT_ROOT,
  KV_STORED,
  KV_REMOVED,
  KV_CLEARED,
  MAX_KV_BATCH_BYTES,
  MAX_KV_EVENTS,
  MAX_KV_KEYS,
  kvSubjectFor,
  kvPoolFilter,
  kvZoneFilter,
  parseKvSubject,
  kvKeySeed,
  kvBlockKey,
  kvBlockKeys,
  kvBatchSchema,
  kvStoredRunSchema,
  kvSkippedSchema,
  kvKnownSchema,
  encodeKvBatch,
  decodeKvBatch,
  kvCreditable,
  KvStoredRuns,
  MAX_KV_INFO_TEXT,
  MAX_KV_RANK,
  MAX_KV_STORED_RUNS,
  MAX_KV_SKIPPED,
  UNKNOWN_FIELD_DEPTH,
  UNKNOWN_FIELD_VALUES,
} from './kv.js';
export type { KvSubjectParts, KvBatch, KvEvent, KvDecodeResult, KvStoredRun, KvSkipped, KvBlockInfo, KvKnown } from './kv.js';
export {
  STATE_SUBJECT_ROOT,
  ALL_STATE_SUBJECTS,
  STATE_PICK,
  STATE_RELEASE,
  STATE_PENALTY,
  STATE_PLACEMENT,
  STATE_STARTED,
  RELEASED_WITHOUT_COMPLETION,
  MAX_STATE_BATCH_BYTES,
  MAX_STATE_ENTRIES,
  MAX_STATE_HASHES,
  MAX_STATE_ENTRY_HASHES,
  stateSubjectFor,
  stateSyncSubjectFor,
  statePoolFilter,
  stateSyncFilter,
  stateZoneFilter,
  parseStateSubject,
  eppIdOf,
  stateBatchSchema,
  stateBatchHashes,
  encodeStateBatch,
  decodeStateBatch,
} from './state.js';
export type {
  StateSubjectParts,
  StateBatch,
  StateEntry,
  StatePickEntry,
  StateReleaseEntry,
  StatePenaltyEntry,
  StatePlacementEntry,
  StateStartedEntry,
  StateDecodeReason,
  StateDecodeResult,
} from './state.js';
export {
  VLLM_BLOCK_STORED,
  VLLM_BLOCK_REMOVED,
  VLLM_ALL_BLOCKS_CLEARED,
  VLLM_MEDIUM_GPU,
  VLLM_END_SEQ,
  DEFAULT_VLLM_KV_LIMITS,
  encodeVllmKvBatch,
  encodeVllmSeq,
  decodeVllmSeq,
  decodeVllmKvBatch,
  blockHash as vllmBlockHash,
  KvWireMalformed,
} from './vllm-kv.js';
export type {
  VllmBlockHash,
  VllmBlockStored,
  VllmBlockRemoved,
  VllmBlocksMoved,
  VllmAllBlocksCleared,
  VllmExtraKey,
  VllmKvEvent,
  VllmKvBatch,
  VllmKvEventInput,
  VllmKvLimits,
  VllmDecodeReason,
  VllmDecodeResult,
} from './vllm-kv.js';
export { decodeTrtllmKvEvents, scanJson, trtllmV1BlockHash } from './trtllm-kv.js';
export type { TrtllmKvEvent, TrtllmDecodeResult } from './trtllm-kv.js';
export { MsgpackReader, MsgpackError, scanMsgpack } from './msgpack-reader.js';
export type { MsgpackBounds, MsgpackErrorKind } from './msgpack-reader.js';
