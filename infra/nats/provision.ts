/**
 * Creates the zone stream and local aggregate in every zone of the committed zone topology
 * (hub.conf, zone-*.conf running with their default ports and development passwords):
 *   node --conditions=@spillway/source --import tsx infra/nats/provision.ts
 * Idempotent: existing streams are left alone. The demo launcher calls provisionZoneStreams itself.
 */
import { jetstreamManager } from '@nats-io/jetstream';
import { connect } from '@nats-io/transport-node';
import { DEFAULT_TOPOLOGY, provisionZoneStreams, renderZoneTopology } from './topology.js';

const topology = renderZoneTopology(DEFAULT_TOPOLOGY);
const zones = topology.zones.map((z) => z.zone);
for (const zone of topology.zones) {
  const nc = await connect({ servers: zone.url, ...zone.users.admin });
  try {
    const result = await provisionZoneStreams(await jetstreamManager(nc), zone.zone, zones);
    console.log(`${zone.zone} (${zone.url}): created [${result.created.join(', ')}], existing [${result.existing.join(', ')}]`);
  } finally {
    await nc.close();
  }
}
