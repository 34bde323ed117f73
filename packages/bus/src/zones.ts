/**
 * Streams of the per-zone NATS topology: one JetStream domain per zone, joined by leaf nodes to a
 * hub. Each zone keeps a zone stream (`SPILLWAY_<ZONE>`, only its own zone's subjects) and a local
 * aggregate (`SPILLWAY`, no subjects) sourcing its own zone stream plus every other zone's stream
 * through `$JS.<domain>.API`. A zone's EPP reads only its local aggregate, so a zone cut off from
 * the hub keeps serving from local data. Stays within nats-server 2.9 features.
 */
import type { JetStreamManager, StreamConfig } from '@nats-io/jetstream';
import { SUBJECT_ROOT, escapeToken } from '@spillway/events';
import { findStream, streamConfigFor, streamSettingsSchema } from './stream.js';

/** The stream every EPP reads: the whole stream on one server, the local aggregate in a zone. */
export const AGGREGATE_STREAM = 'SPILLWAY';
/** The hub's own JetStream domain (the hub stores nothing; with several JetStream leaf nodes it still needs a domain). */
export const HUB_DOMAIN = 'hub';

/** Zone names are used as JetStream domains and config identifiers, so keep them to one plain token. */
const ZONE_NAME = /^[A-Za-z0-9_-]{1,64}$/;

export function assertZoneName(zone: string): void {
  if (!ZONE_NAME.test(zone)) {
    throw new Error(`zone "${zone}": the NATS zone topology needs zone names of letters, digits, _ and - (it is a JetStream domain)`);
  }
  if (zone === HUB_DOMAIN) throw new Error(`zone "${zone}": the name is reserved for the hub's JetStream domain`);
}

/** The JetStream domain of a zone: the zone name itself, so `$JS.<zone>.API` reads naturally. */
export function domainOf(zone: string): string {
  assertZoneName(zone);
  return zone;
}

/** `SPILLWAY_<ZONE>`: stream names may not contain `.`, `*`, `>` or spaces; zone names have none. */
export function zoneStreamName(zone: string): string {
  assertZoneName(zone);
  return `${AGGREGATE_STREAM}_${zone.toUpperCase()}`;
}

/** Every pool's subjects of one zone: `spillway.v1.*.<zone>.>`. */
export function zoneSubjects(zone: string): string {
  return `${SUBJECT_ROOT}.*.${escapeToken(zone)}.>`;
}

/**
 * Limits shared by the zone streams and the aggregates: the last-value stream settings, from the
 * same definition the services use when they create the single-server stream.
 */
function lastValueLimits(): Partial<StreamConfig> {
  const { name: _name, subjects: _subjects, ...limits } = streamConfigFor(streamSettingsSchema.parse({}));
  return limits;
}

export type StreamDefinition = Partial<StreamConfig> & { name: string };

/**
 * A zone's own stream, created in the zone's domain. It captures only that zone's subjects, so the
 * zone streams of different domains never capture each other's publishes even though the leaf
 * nodes carry subject interest between them.
 */
export function zoneStreamConfig(zone: string): StreamDefinition {
  return { name: zoneStreamName(zone), subjects: [zoneSubjects(zone)], ...lastValueLimits() };
}

/**
 * The local aggregate of `localZone`: no `subjects` (with subjects it would also capture live
 * traffic crossing the leaf nodes, twice), sourcing the local zone stream directly and every other
 * zone's stream through that zone's JetStream API prefix. Sources keep retrying while a zone is
 * unreachable and resume where they stopped, so a zone that was cut off catches up afterwards.
 */
export function aggregateStreamConfig(localZone: string, zones: readonly string[], name = AGGREGATE_STREAM): StreamDefinition {
  assertZoneName(localZone);
  const all = uniqueZones([localZone, ...zones]);
  return {
    name,
    sources: all.map((zone) =>
      zone === localZone
        ? { name: zoneStreamName(zone) }
        : // deliver "": no delivery prefix. The remote source consumer delivers on this server's
          // own internal subject, which the leaf links carry because every server shares account
          // SPILLWAY (a prefix is only needed when the streams live in different accounts).
          { name: zoneStreamName(zone), external: { api: `$JS.${domainOf(zone)}.API`, deliver: '' } },
    ),
    ...lastValueLimits(),
  };
}

export function uniqueZones(zones: readonly string[]): string[] {
  const seen = new Map<string, string>();
  for (const zone of zones) {
    assertZoneName(zone);
    const stream = zoneStreamName(zone);
    const other = seen.get(stream);
    if (other !== undefined && other !== zone) throw new Error(`zones "${other}" and "${zone}" map to the same stream ${stream}`);
    seen.set(stream, zone);
  }
  return [...seen.values()];
}

export interface ProvisionResult {
  created: string[];
  existing: string[];
}

/**
 * Creates the zone stream and the local aggregate in `localZone`'s domain when they are missing.
 * Existing streams are left as they are (an existing stream is never changed destructively).
 * `jsm` must be a manager of the zone's own domain with an admin user (the collector and EPP users
 * cannot create streams); with `jetstreamManager(nc)` on the zone's server, that is the default.
 * Call it once per zone before starting that zone's collector and EPP.
 */
export async function provisionZoneStreams(
  jsm: JetStreamManager,
  localZone: string,
  zones: readonly string[],
  aggregate = AGGREGATE_STREAM,
): Promise<ProvisionResult> {
  const result: ProvisionResult = { created: [], existing: [] };
  for (const config of [zoneStreamConfig(localZone), aggregateStreamConfig(localZone, zones, aggregate)]) {
    if (await findStream(jsm, config.name)) {
      result.existing.push(config.name);
      continue;
    }
    await jsm.streams.add(config);
    result.created.push(config.name);
  }
  return result;
}
