export {
  natsFlags,
  natsSettingsFromValues,
  natsOptionsFromFlags,
  parseNatsSettings,
  natsSettingsSchema,
  NatsOptionsError,
  DEFAULT_NATS_URL,
} from './options.js';
export type { NatsSettings, NatsSettingsInput, NatsFlagKey, NatsFlagValues, Environment } from './options.js';
export { connectNats, connectNatsWithRetry, connectionOptions } from './connect.js';
export type { RetryingConnectOptions } from './connect.js';
export { ConnectionTracker } from './connection-state.js';
export type { ConnectionState, ConnectionStatus } from './connection-state.js';
export {
  ensureStream,
  findStream,
  streamNameSchema,
  streamSettingsSchema,
  streamConfigFor,
  describeDifferences,
  subjectCovers,
  DEFAULT_STREAM,
} from './stream.js';
export type { StreamSettings, StreamSettingsInput, EnsureStreamResult, StreamDifference } from './stream.js';
export { EventPublisher, readinessMsgId } from './publisher.js';
export type { PublisherOptions, PublisherCounters, ReadinessAck } from './publisher.js';
export { EventReader, startReader } from './reader.js';
export type { ReaderSink, ReaderOptions, ReaderStatus } from './reader.js';
export type { RejectReason, SinkRefusal } from './rejects.js';
export type { Logger } from './logger.js';
export {
  AGGREGATE_STREAM,
  HUB_DOMAIN,
  aggregateStreamConfig,
  assertZoneName,
  domainOf,
  provisionZoneStreams,
  zoneStreamConfig,
  uniqueZones,
  zoneStreamName,
  zoneSubjects,
} from './zones.js';
export type { ProvisionResult, StreamDefinition } from './zones.js';
export { requestStateSync } from './state-sync.js';
export type { StateSyncEnd, StateSyncRequest, StateSyncResult } from './state-sync.js';
