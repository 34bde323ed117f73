/**
 * NATS topologies for Spillway (docs/events.md, "Topologies"):
 *
 * - `single`: one server with JetStream and the default `SPILLWAY` stream (created by the services).
 * - `zones`: one JetStream domain per zone, each a leaf node of a hub. Each zone keeps a zone stream
 *   (`SPILLWAY_<ZONE>`, only its own zone's subjects) and a local aggregate (`SPILLWAY`, no subjects)
 *   sourcing its own zone stream plus every other zone's stream through `$JS.<domain>.API`. A zone's
 *   EPP reads only its local aggregate, so a zone cut off from the hub keeps serving from local
 *   data, and the aggregate's sources catch up by themselves when the link returns.
 *
 * The committed `*.conf` files in this folder are this module's output for `DEFAULT_*` options
 * (`npm run render` rewrites them; a test checks they are in sync). The demo launcher and the tests render the same configs for free ports
 * and temporary directories.
 *
 * Stays within nats-server 2.9 features: no subject transforms, no multiple filter subjects.
 */
import { mkdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { AGGREGATE_STREAM, HUB_DOMAIN, domainOf, uniqueZones, zoneStreamName, zoneSubjects } from '@spillway/bus';
import {
  ALL_STATE_SUBJECTS,
  escapeToken,
  KV_SUBJECT_ROOT,
  MAX_KV_BATCH_BYTES,
  MAX_STATE_BATCH_BYTES,
  stateZoneFilter,
} from '@spillway/events';

/** One zone's KV-cache block subjects of every pool (what its collector relays). */
const kvZoneSubjects = (zone: string): string => `${KV_SUBJECT_ROOT}.*.${escapeToken(zone)}.>`;
const ALL_KV_SUBJECTS = `${KV_SUBJECT_ROOT}.>`;
import { loadTopology } from '../topology.js';

// The stream definitions and provisioning live in @spillway/bus (spillway-provision uses them in
// a cluster); re-exported so the demo and the tests have one place for the whole topology.
export {
  AGGREGATE_STREAM,
  HUB_DOMAIN,
  aggregateStreamConfig,
  assertZoneName,
  domainOf,
  provisionZoneStreams,
  zoneStreamConfig,
  zoneStreamName,
  zoneSubjects,
} from '@spillway/bus';
export type { ProvisionResult, StreamDefinition } from '@spillway/bus';

/** The NATS account that carries Spillway traffic in the zone topology (hub and zones). */
export const SPILLWAY_ACCOUNT = 'SPILLWAY';

// ---------------------------------------------------------------------------------------------
// Config rendering

export interface Credentials {
  user: string;
  /** Named like nats.js `ConnectionOptions.pass`, so `connect({ servers, ...credentials })` works. */
  pass: string;
}

export interface SingleServerOptions {
  /** Address to bind. Default 127.0.0.1 (the demo); use 0.0.0.0 in a container. */
  host?: string;
  port: number;
  storeDir: string;
  /** HTTP monitoring port (`/varz`, `/jsz`); omitted when absent. */
  monitorPort?: number;
}

export interface ZoneServerOptions {
  zone: string;
  clientPort: number;
  storeDir: string;
  monitorPort?: number;
}

export interface ZoneTopologyOptions {
  /** Address every server binds (default 127.0.0.1). */
  host?: string;
  /** Address the zones dial for the hub's leaf port (default `host`). */
  hubAddress?: string;
  hub: { clientPort: number; leafPort: number; storeDir: string; monitorPort?: number };
  zones: readonly ZoneServerOptions[];
  /**
   * Password of each user (`admin-hub`, `leaf-<zone>`, `admin-<zone>`, `collector-<zone>`,
   * `epp-<zone>`). Default: `<user>-dev`, fit only for a laptop. In production pass real secrets
   * (or bcrypt hashes from `nats server passwd`: the server accepts them in place of passwords,
   * and the clients then need the plain text from elsewhere).
   */
  password?: (user: string) => string;
  /**
   * `inline` (default): passwords are written into the configs. `environment`: every password is
   * a reference to an environment variable (`passwordVariable(user)`) and each zone's leaf remote
   * URL, which carries its credentials, is `$NATS_LEAF_URL`; nats-server resolves them when it
   * starts, so the configs can live in a ConfigMap and the secrets in a Secret (Kubernetes).
   */
  secrets?: 'inline' | 'environment';
  /** Name of the local aggregate stream, default `SPILLWAY` (the EPP's default `--stream`). */
  aggregateStream?: string;
}

export interface RenderedServer {
  /** Suggested file name (`hub.conf`, `zone-a.conf`). */
  file: string;
  /** The nats-server config text. */
  config: string;
  /** `nats://host:port` for clients. */
  url: string;
  clientPort: number;
}

export interface RenderedZone extends RenderedServer {
  zone: string;
  /** JetStream domain of the zone: `jetstream(nc, { domain })` from outside the zone. */
  domain: string;
  zoneStream: string;
  aggregateStream: string;
  users: {
    /** Full rights in the zone's account: provisions the streams. */
    admin: Credentials;
    /** Publishes this zone's subjects only (and reads stream info). */
    collector: Credentials;
    /** Reads the local aggregate only (consumers, direct get, stream info); shares state on its own zone's spillway.state subjects; reads every zone's spillway.kv subjects. */
    epp: Credentials;
  };
}

export interface RenderedTopology {
  hub: RenderedServer & { leafPort: number; users: { admin: Credentials } };
  zones: RenderedZone[];
}

const DEFAULT_HOST = '127.0.0.1';

/**
 * Every server's `max_payload`: the largest batch an EPP accepts on `spillway.state.*` and
 * `spillway.kv.*` (everything else is smaller: events 64 KiB, kv snapshots 320 KiB). A client that
 * publishes more is refused by the server (and disconnected) before any EPP receives a byte of it,
 * so the bound no longer rests on the receivers alone. nats-server 2.9 sets it per server, not per
 * subject; it is pinned here rather than left to the server's default (also 1 MiB today), which an
 * operator raising it for some other traffic would otherwise lift for these subjects too.
 */
export const NATS_MAX_PAYLOAD = Math.max(MAX_STATE_BATCH_BYTES, MAX_KV_BATCH_BYTES);

/** The config line setting it, with the reason. */
const MAX_PAYLOAD_LINE = `# Largest message: the state and KV batches' bound (an EPP refuses larger ones anyway); see topology.ts.
max_payload: ${NATS_MAX_PAYLOAD}
`;
const defaultPassword = (user: string): string => `${user}-dev`;

/** Double-quoted NATS config string (the format accepts JSON-style escapes). */
function q(text: string): string {
  return JSON.stringify(text);
}

function list(items: readonly string[], indent: string): string {
  return `[\n${items.map((item) => `${indent}  ${q(item)}`).join('\n')}\n${indent}]`;
}

function monitorLine(monitorPort: number | undefined, host: string): string {
  // Monitoring shows connections and JetStream state (`/jsz`); bound like the client port.
  return monitorPort === undefined ? '' : `http: ${q(`${host}:${monitorPort}`)}\n`;
}

export function renderSingleServer(options: SingleServerOptions): string {
  const host = options.host ?? DEFAULT_HOST;
  return `# Spillway: one nats-server with JetStream, for the local demo and small deployments.
# Generated by infra/nats/topology.ts (renderSingleServer); see infra/nats/README.md.
#
# The services create the stream themselves on first start (docs/events.md): stream SPILLWAY on
# spillway.v1.>, last value per subject, file storage, direct get on. Nothing to provision here.
# Run: nats-server -c infra/nats/single.conf   (from the repository root; data under store_dir)

server_name: "spillway-single"
listen: ${q(`${host}:${options.port}`)}
${MAX_PAYLOAD_LINE}${monitorLine(options.monitorPort, host)}
jetstream {
  # File storage: an EPP restarting replays the last value of every subject from here, so the
  # view survives a NATS restart too.
  store_dir: ${q(options.storeDir)}
}

# No authorization: bind to loopback (or a private network) only. For per-zone publish rights
# use the zone topology (zone-*.conf), whose accounts and users show the permissions to grant.
`;
}

/** The environment variable holding `user`'s password in `secrets: 'environment'` configs. */
export function passwordVariable(user: string): string {
  return `NATS_PASSWORD_${user.toUpperCase().replace(/[^A-Z0-9]/g, '_')}`;
}

/** The environment variable holding a zone server's leaf remote URL (with its credentials). */
export const LEAF_URL_VARIABLE = 'NATS_LEAF_URL';

/**
 * A config value: a quoted string, or a variable reference (`$NAME`), which nats-server looks up in
 * the environment when no variable of that name is defined in the file.
 */
type Value = { literal: string } | { variable: string };

function value(v: Value): string {
  return 'literal' in v ? q(v.literal) : `$${v.variable}`;
}

function userBlock(user: string, password: Value, permissions: string | undefined, indent: string): string {
  if (!permissions) return `${indent}{ user: ${q(user)}, password: ${value(password)} }`;
  return `${indent}{
${indent}  user: ${q(user)}
${indent}  password: ${value(password)}
${indent}  permissions: {
${permissions}
${indent}  }
${indent}}`;
}

function collectorPermissions(zone: string, indent: string): string {
  const i = `${indent}    `;
  return `${i}# Only this zone's events and KV-cache block events (every pool); a publish to another zone's
${i}# subjects is a permissions violation. The JetStream API subjects are read-only calls the
${i}# publisher makes on start (account info; stream info when it checks the stream exists).
${i}publish: {
${i}  allow: ${list([zoneSubjects(zone), kvZoneSubjects(zone), '$JS.API.INFO', '$JS.API.STREAM.INFO.*'], `${i}  `)}
${i}}
${i}# Acked publishes (readiness) get their PubAck on an inbox. No allow_responses: it would let
${i}# the collector publish to any reply subject.
${i}subscribe: {
${i}  allow: ["_INBOX.>"]
${i}}`;
}

function eppPermissions(zone: string, aggregate: string, indent: string): string {
  const i = `${indent}    `;
  const s = aggregate;
  return `${i}# Read-only on the local aggregate: ordered consumers (create, info, next, delete),
${i}# direct get and stream info. No event may be published (spillway.v1.>, spillway.kv.>), and
${i}# no stream may be created or changed (the aggregate is provisioned by an admin).
${i}# The state shared between EPPs (spillway.state.<pool>.<zone>.<epp-id>, and .sync for warm
${i}# starts): published for this zone only, read for every zone of every pool. The model servers'
${i}# KV-cache block events (spillway.kv.<pool>.<zone>.<pod>): read for every zone, never published.
${i}publish: {
${i}  allow: ${list(
    [
      '$JS.API.INFO',
      `$JS.API.STREAM.INFO.${s}`,
      // 2.9 accepts both consumer-create forms: the legacy one and the named one with a filter.
      `$JS.API.CONSUMER.CREATE.${s}`,
      `$JS.API.CONSUMER.CREATE.${s}.>`,
      `$JS.API.CONSUMER.INFO.${s}.>`,
      `$JS.API.CONSUMER.DELETE.${s}.>`,
      `$JS.API.CONSUMER.MSG.NEXT.${s}.>`,
      `$JS.API.DIRECT.GET.${s}`,
      `$JS.API.DIRECT.GET.${s}.>`,
      `$JS.API.STREAM.MSG.GET.${s}`,
      stateZoneFilter(zone),
    ],
    `${i}  `,
  )}
${i}  deny: ["spillway.v1.>", "spillway.kv.>"]
${i}}
${i}subscribe: {
${i}  allow: ${list(['_INBOX.>', ALL_STATE_SUBJECTS, ALL_KV_SUBJECTS], `${i}  `)}
${i}}
${i}# A peer's warm-start request is answered on its reply subject: a snapshot in parts, each
${i}# reply subject usable for a few seconds and a bounded number of parts.
${i}allow_responses: { max: 64, expires: "10s" }`;
}

/**
 * Renders the hub and one config per zone. Each zone server:
 * - is its own JetStream domain (its API stays local, so it works while cut off);
 * - puts every Spillway user in account SPILLWAY with JetStream enabled;
 * - dials the hub as a leaf node bound to account SPILLWAY, so the same account spans all servers
 *   and `$JS.<other-zone>.API.>` requests (the aggregate's sources) travel hub-and-spoke.
 */
export function renderZoneTopology(options: ZoneTopologyOptions): RenderedTopology {
  const host = options.host ?? DEFAULT_HOST;
  const hubAddress = options.hubAddress ?? host;
  const password = options.password ?? defaultPassword;
  const aggregate = options.aggregateStream ?? AGGREGATE_STREAM;
  const zoneNames = uniqueZones(options.zones.map((z) => z.zone));
  if (zoneNames.length !== options.zones.length) throw new Error('each zone may appear only once');
  const fromEnvironment = options.secrets === 'environment';
  const cred = (user: string): Credentials => ({ user, pass: fromEnvironment ? `$${passwordVariable(user)}` : password(user) });
  const secret = (c: Credentials): Value => (fromEnvironment ? { variable: passwordVariable(c.user) } : { literal: c.pass });

  const hubAdmin = cred('admin-hub');
  const leafUsers = zoneNames.map((zone) => cred(`leaf-${zone}`));
  const hubConfig = `# Spillway NATS hub: joins the zone servers (leaf nodes), stores no Spillway data.
# Generated by infra/nats/topology.ts (renderZoneTopology); see infra/nats/README.md.
#
# Zones talk to each other only through here: the aggregate stream of each zone sources the other
# zones' streams via $JS.<zone>.API.>, which the leaf connections route across the hub. When the
# hub is down each zone keeps working on its own; the sources resume when it is back.

server_name: "spillway-hub"
listen: ${q(`${host}:${options.hub.clientPort}`)}
${MAX_PAYLOAD_LINE}${monitorLine(options.hub.monitorPort, host)}
jetstream {
  store_dir: ${q(options.hub.storeDir)}
  # With several JetStream leaf nodes, the hub needs JetStream and a domain of its own: each
  # domain's API is then addressed by name and the hub never answers another domain's requests.
  domain: ${q(HUB_DOMAIN)}
}

accounts {
  ${SPILLWAY_ACCOUNT} {
    jetstream: enabled
    users: [
${userBlock(hubAdmin.user, secret(hubAdmin), undefined, '      ')}
    ]
  }
}

leafnodes {
  listen: ${q(`${host}:${options.hub.leafPort}`)}
  # One user per zone, each bound to account ${SPILLWAY_ACCOUNT}: the leaf connection joins the
  # zone's ${SPILLWAY_ACCOUNT} account to this one. Per-zone users let a zone be revoked alone.
  # A JetStream domain on each side makes the servers deny the plain $JS.API.> across the
  # leaf connection automatically, so no zone's API call is ever answered by another domain.
  authorization {
    users: [
${leafUsers.map((u) => `      { user: ${q(u.user)}, password: ${value(secret(u))}, account: ${q(SPILLWAY_ACCOUNT)} }`).join('\n')}
    ]
  }
}
`;

  const zones = options.zones.map((z): RenderedZone => {
    const zone = z.zone;
    const leaf = cred(`leaf-${zone}`);
    const users = { admin: cred(`admin-${zone}`), collector: cred(`collector-${zone}`), epp: cred(`epp-${zone}`) };
    const hubUrl: Value = fromEnvironment ? { variable: LEAF_URL_VARIABLE } : { literal: leafUrl(leaf, hubAddress, options.hub.leafPort) };
    const config = `# Spillway NATS server of zone ${q(zone)}: JetStream domain ${q(domainOf(zone))}, leaf node of the hub.
# Generated by infra/nats/topology.ts (renderZoneTopology); see infra/nats/README.md.
#
# Streams (created by provisionZoneStreams with the admin user, not by this file):
#   ${zoneStreamName(zone)}  subjects ${zoneSubjects(zone)}  (this zone's events only)
#   ${aggregate}  no subjects; sources ${zoneStreamName(zone)} and every other zone's stream
#             via $JS.<zone>.API. The zone's EPP reads only this one.

server_name: ${q(`spillway-${zone}`)}
listen: ${q(`${host}:${z.clientPort}`)}
${MAX_PAYLOAD_LINE}${monitorLine(z.monitorPort, host)}
jetstream {
  store_dir: ${q(z.storeDir)}
  # Own domain: $JS.API.> is answered here and never crosses the leaf connection, so creating
  # consumers and publishing with acks keep working while the hub is unreachable. Other zones
  # address this zone's API as $JS.${domainOf(zone)}.API.>.
  domain: ${q(domainOf(zone))}
}

accounts {
  ${SPILLWAY_ACCOUNT} {
    jetstream: enabled
    users: [
${userBlock(users.admin.user, secret(users.admin), undefined, '      ')}
${userBlock(users.collector.user, secret(users.collector), collectorPermissions(zone, '      '), '      ')}
${userBlock(users.epp.user, secret(users.epp), eppPermissions(zone, aggregate, '      '), '      ')}
    ]
  }
}

leafnodes {
  # Bound to account ${SPILLWAY_ACCOUNT} on both ends. The leaf reconnects by itself (every second
  # by default) when the hub comes back.
  remotes: [
    { url: ${value(hubUrl)}, account: ${q(SPILLWAY_ACCOUNT)} }
  ]
}
`;
    return {
      zone,
      domain: domainOf(zone),
      file: `${zone}.conf`,
      config,
      url: `nats://${host}:${z.clientPort}`,
      clientPort: z.clientPort,
      zoneStream: zoneStreamName(zone),
      aggregateStream: aggregate,
      users,
    };
  });

  return {
    hub: {
      file: 'hub.conf',
      config: hubConfig,
      url: `nats://${host}:${options.hub.clientPort}`,
      clientPort: options.hub.clientPort,
      leafPort: options.hub.leafPort,
      users: { admin: hubAdmin },
    },
    zones,
  };
}

/**
 * A zone's leaf remote URL to the hub. The credentials travel in the URL: remotes of 2.9 take user
 * info there (a `credentials` file is for JWTs), so passwords must be URL-safe or are escaped here.
 */
export function leafUrl(leaf: Credentials, hubAddress: string, leafPort: number): string {
  return `nats-leaf://${encodeURIComponent(leaf.user)}:${encodeURIComponent(leaf.pass)}@${hubAddress}:${leafPort}`;
}

/** Writes the hub's and every zone's config into `dir`; returns the paths by server (`hub`, zone names). */
export async function writeZoneTopology(topology: RenderedTopology, dir: string): Promise<Record<string, string>> {
  await mkdir(dir, { recursive: true });
  const paths: Record<string, string> = {};
  for (const [key, server] of [['hub', topology.hub] as const, ...topology.zones.map((z) => [z.zone, z] as const)]) {
    const path = join(dir, server.file);
    await writeFile(path, server.config);
    paths[key] = path;
  }
  return paths;
}

// ---------------------------------------------------------------------------------------------
// The committed files: laptop defaults (loopback, fixed ports, data under ./.data/nats).

/** The zones of infra/topology.yaml, the deployment's one topology source. */
export const DEFAULT_ZONES: readonly string[] = loadTopology().zones.map((z) => z.name);

export const DEFAULT_SINGLE: SingleServerOptions = { port: 4222, storeDir: '.data/nats/single', monitorPort: 8222 };

export const DEFAULT_TOPOLOGY: ZoneTopologyOptions = {
  hub: { clientPort: 4230, leafPort: 7422, storeDir: '.data/nats/hub', monitorPort: 8230 },
  zones: DEFAULT_ZONES.map((zone, i) => ({
    zone,
    clientPort: 4231 + i,
    storeDir: `.data/nats/${zone}`,
    monitorPort: 8231 + i,
  })),
};

/** File name -> contents of every committed config in infra/nats. */
export function defaultConfigFiles(): Record<string, string> {
  const topology = renderZoneTopology(DEFAULT_TOPOLOGY);
  const files: Record<string, string> = { 'single.conf': renderSingleServer(DEFAULT_SINGLE), [topology.hub.file]: topology.hub.config };
  for (const zone of topology.zones) files[zone.file] = zone.config;
  return files;
}
