import { mkdirSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { connect } from '@nats-io/transport-node';
import { jetstreamManager } from '@nats-io/jetstream';
import { freePort, natsServerAvailable, waitForPort, INSTALL_HINT } from '@spillway/proc';
import {
  provisionZoneStreams,
  renderSingleServer,
  renderZoneTopology,
  writeZoneTopology,
  zoneStreamName,
  type RenderedTopology,
} from '../nats/topology.js';
import type { Topology } from '../topology.js';
import { httpOk, ManagedProcess, waitUntil } from './process.js';

/**
 * The whole Spillway system on one machine, as real processes on loopback: NATS (one server, or one
 * JetStream domain per zone joined by leaf nodes to a hub), simulated model servers, and per zone a
 * collector, an EPP (locality mode) and a development gateway; with `xds`, also a spillway-xds per
 * zone from which the zone's gateway takes its model servers and subset (the production loop).
 * `npm start` and the end-to-end tests both run on it. Every process can be stopped, killed and
 * restarted on the same ports.
 */
const ROOT = resolve(fileURLToPath(new URL('../..', import.meta.url)));
const bin = (service: string, name: string) => join(ROOT, 'services', service, 'bin', `${name}.js`);

export const POOL = 'llama';
export const MODEL = 'llama';

export interface ZoneSpec {
  zone: string;
  region: string;
  /** Model servers (simulators) in this zone. */
  servers: number;
}

/** The demo's zones: the zones, regions and model servers of the deployment topology. */
export function zoneSpecsOf(topology: Topology): ZoneSpec[] {
  return topology.zones.map((z) => ({ zone: z.name, region: z.region, servers: z.modelServers }));
}

export interface SystemOptions {
  /** Where logs and generated files go. */
  dir: string;
  zones: ZoneSpec[];
  natsTopology?: 'single' | 'zones';
  /** Use this NATS server instead of starting one (single topology only). */
  natsUrl?: string;
  /** Extra flags per kind of process. */
  simArgs?: string[];
  collectorArgs?: string[];
  eppArgs?: string[];
  gatewayArgs?: string[];
  /**
   * Precise prefix-cache routing: every model server publishes its KV-cache events on a ZeroMQ port
   * and tokenizes with `tokenizer`, each zone's collector relays them (the endpoints file names each
   * server's port), and the EPPs tokenize prompts with the same tokenizer.
   */
  kvEvents?: { tokenizer: string };
  /**
   * Run a spillway-xds per zone and the gateways on `--xds` (endpoints by EDS, subset and zone by
   * ECDS), as Envoy takes them in production; without it, the gateways read an endpoints file.
   */
  xds?: boolean;
  logLevel?: string;
  /** Aborting it during `start` stops whatever was started and rejects the start. */
  signal?: AbortSignal;
}

export interface SimProcess {
  pod: string;
  zone: string;
  region: string;
  address: string;
  port: number;
  /** Its KV-event ZeroMQ endpoint (rank 0's), with `kvEvents`. */
  kvEvents: string | undefined;
  /** Every data-parallel rank's KV-event endpoint, in rank order. */
  kvRanks: string[];
  process: ManagedProcess;
}

/**
 * Waits for a simulator's "listening" line and takes its bound port and KV-event endpoints from it;
 * the first time, pins them into its arguments so a restart binds the same ones.
 */
async function learnSimPorts(sim: SimProcess, timeoutMs: number): Promise<void> {
  const line = await sim.process.waitForLine((l) => l.includes('"msg":"listening"'), timeoutMs);
  const listening = JSON.parse(line) as { url: string; kvRanks?: Array<{ events: string }> };
  const url = new URL(listening.url);
  sim.port = Number(url.port);
  sim.address = url.host;
  sim.kvRanks = (listening.kvRanks ?? []).map((r) => r.events);
  sim.kvEvents = sim.kvRanks[0];
  const args = sim.process.spec.args;
  const port = args.indexOf('--port');
  if (port >= 0) args[port + 1] = String(sim.port);
  const kv = args.indexOf('--kv-events');
  if (kv >= 0 && sim.kvRanks.length > 0) args[kv + 1] = sim.kvRanks.join(',');
}

export interface ZoneProcesses {
  spec: ZoneSpec;
  /** The URL and credentials this zone's services use for NATS. */
  nats: { url: string; collector?: { user: string; pass: string }; epp?: { user: string; pass: string } };
  collector: ManagedProcess;
  epp: ManagedProcess & { grpcPort?: number };
  eppPorts: { grpc: number; health: number; metrics: number };
  gateway: ManagedProcess;
  gatewayUrl: string;
  /** The zone's spillway-xds, with `xds`: its ADS and metrics ports (`/debug/nodes` lists the gateways it serves). */
  xds: (ManagedProcess & { ports: { ads: number; health: number; metrics: number } }) | undefined;
}

export interface NatsProcesses {
  /** `hub` plus one per zone in the zones topology; `single` otherwise (absent with an external URL). */
  servers: Map<string, ManagedProcess>;
  topology: RenderedTopology | undefined;
}

export class LocalSystem {
  private constructor(
    readonly options: SystemOptions,
    readonly nats: NatsProcesses,
    readonly sims: SimProcess[],
    readonly zones: Map<string, ZoneProcesses>,
  ) {}

  /**
   * Starts everything, in dependency order, and waits until every EPP reports ready. If a step fails,
   * or `options.signal` aborts, every process started so far is stopped before the promise rejects.
   */
  static async start(options: SystemOptions, say: (line: string) => void = () => undefined): Promise<LocalSystem> {
    const logs = join(options.dir, 'logs');
    mkdirSync(logs, { recursive: true });
    if (!options.natsUrl && !natsServerAvailable()) throw new Error(INSTALL_HINT);
    options.signal?.throwIfAborted();
    const nats: NatsProcesses = { servers: new Map(), topology: undefined };
    const sims: SimProcess[] = [];
    const zones = new Map<string, ZoneProcesses>();
    const partial = new LocalSystem(options, nats, sims, zones);
    let stopping: Promise<void> | undefined;
    const abandon = () => (stopping ??= partial.stop());
    const onAbort = () => void abandon();
    options.signal?.addEventListener('abort', onAbort, { once: true });
    try {
      await startAll(partial, { logs, say, checkpoint: () => options.signal?.throwIfAborted() });
      options.signal?.throwIfAborted();
      return partial;
    } catch (error) {
      await abandon();
      throw options.signal?.aborted ? (options.signal.reason ?? error) : error;
    } finally {
      options.signal?.removeEventListener('abort', onAbort);
    }
  }

  zone(name: string): ZoneProcesses {
    const zone = this.zones.get(name);
    if (!zone) throw new Error(`no zone ${name}`);
    return zone;
  }

  simsOf(zone: string): SimProcess[] {
    return this.sims.filter((s) => s.zone === zone);
  }

  /** Zone of a model-server address, for attributing where a request was served. */
  zoneOfAddress(address: string): string | undefined {
    return this.sims.find((s) => s.address === address)?.zone;
  }

  /** Stops every process (gateways first, NATS last) and closes their logs. */
  async stop(): Promise<void> {
    const zones = [...this.zones.values()];
    const stopAll = async (processes: ManagedProcess[]) => {
      await Promise.all(processes.map((p) => p.stop().catch(() => undefined)));
      processes.forEach((p) => p.close());
    };
    await stopAll(zones.map((z) => z.gateway));
    await stopAll(zones.flatMap((z) => (z.xds ? [z.xds] : [])));
    await stopAll(zones.map((z) => z.epp));
    await stopAll(zones.map((z) => z.collector));
    await stopAll(this.sims.map((s) => s.process));
    await stopAll([...this.nats.servers.values()]);
  }
}

/** How one start runs: where the logs go, what it says, and the check for an abort between steps. */
interface StartRun {
  readonly logs: string;
  say(line: string): void;
  checkpoint(): void;
}

/** Starts `system`'s processes into its (empty) process lists. */
async function startAll(system: LocalSystem, run: StartRun): Promise<void> {
  const { options, nats, sims, zones } = system;
  const { logs, say, checkpoint } = run;
  const logLevel = options.logLevel ?? 'warn';
  const topologyKind = options.natsTopology ?? 'single';
  await startNats(options, logs, topologyKind, nats, checkpoint);
  checkpoint();
  const urlFor = (zone: string) => {
    if (options.natsUrl) return { url: options.natsUrl };
    if (!nats.topology) return { url: `nats://127.0.0.1:${(nats.servers.get('single') as ManagedProcess & { port: number }).port}` };
    const z = nats.topology.zones.find((t) => t.zone === zone);
    if (!z) throw new Error(`no NATS server for ${zone}`);
    return { url: z.url, collector: z.users.collector, epp: z.users.epp };
  };
  say(`NATS: ${topologyKind}${options.natsUrl ? ` (${options.natsUrl})` : ''}`);

  // Model servers. Each binds port 0 (and any free port per KV-event rank) itself and says what it
  // bound in its "listening" line: no port is chosen for it that another process could hold. A
  // restart binds the same ports again.
  for (const spec of options.zones) {
    for (let i = 0; i < spec.servers; i++) {
      const pod = `sim-${spec.zone}-${i}`;
      const kvArgs = options.kvEvents ? ['--kv-events', 'tcp://127.0.0.1:*', '--tokenizer', options.kvEvents.tokenizer] : [];
      const sim: SimProcess = {
        pod,
        zone: spec.zone,
        region: spec.region,
        address: '',
        port: 0,
        kvEvents: undefined,
        kvRanks: [],
        process: undefined as never,
      };
      sim.process = new ManagedProcess({
        name: pod,
        command: globalThis.process.execPath,
        args: [
          bin('sim', 'spillway-sim'),
          '--port',
          '0',
          '--model',
          MODEL,
          '--seed',
          String(sims.length + 1),
          // The "listening" line is at info.
          '--log-level',
          logLevel === 'debug' || logLevel === 'trace' ? logLevel : 'info',
          ...kvArgs,
          ...(options.simArgs ?? []),
        ],
        logFile: join(logs, `${pod}.log`),
        // Loading a real tokenizer (an 11 MB vocabulary) takes every starting server seconds of CPU at once.
        ready: () => learnSimPorts(sim, options.kvEvents ? 90_000 : 20_000),
      });
      sims.push(sim);
    }
  }
  checkpoint(); // nothing is spawned after an abort
  await Promise.all(sims.map((s) => s.process.start()));
  checkpoint();
  say(`model servers: ${sims.length}`);

  const allEndpoints = join(options.dir, 'endpoints-all.json');
  writeFileSync(
    allEndpoints,
    JSON.stringify(
      sims.map((s) => ({ pod: s.pod, address: s.address, zone: s.zone, region: s.region, engine: 'vllm' })),
      null,
      2,
    ),
  );

  for (const spec of options.zones) {
    const nz = urlFor(spec.zone);
    const endpointsFile = join(options.dir, `endpoints-${spec.zone}.json`);
    writeFileSync(
      endpointsFile,
      JSON.stringify(
        sims
          .filter((s) => s.zone === spec.zone)
          .map((s) => ({
            pod: s.pod,
            address: s.address,
            zone: s.zone,
            region: s.region,
            engine: 'vllm',
            // One endpoint per data-parallel rank (a single one without data parallelism).
            ...(s.kvRanks.length > 1 ? { kvEvents: s.kvRanks } : s.kvEvents ? { kvEvents: s.kvEvents } : {}),
          })),
        null,
        2,
      ),
    );
    const auth = (creds: { user: string; pass: string } | undefined) =>
      creds ? ['--nats-user', creds.user, '--nats-password', creds.pass] : [];
    const collectorMetrics = await freePort();
    const collector = new ManagedProcess({
      name: `collector-${spec.zone}`,
      command: process.execPath,
      args: [
        bin('collector', 'spillway-collector'),
        '--nats',
        nz.url,
        ...auth(nz.collector),
        ...(nats.topology ? ['--stream', zoneStreamName(spec.zone)] : []),
        '--pool',
        POOL,
        '--zone',
        spec.zone,
        '--region',
        spec.region,
        '--endpoints',
        endpointsFile,
        '--metrics-port',
        String(collectorMetrics),
        '--log-level',
        logLevel,
        ...(options.collectorArgs ?? []),
      ],
      logFile: join(logs, `collector-${spec.zone}.log`),
      ready: () => waitUntil(`collector-${spec.zone}`, () => httpOk(`http://127.0.0.1:${collectorMetrics}/metrics`), 20_000),
    });
    const eppPorts = { grpc: await freePort(), health: await freePort(), metrics: await freePort() };
    const epp = new ManagedProcess({
      name: `epp-${spec.zone}`,
      command: process.execPath,
      args: [
        bin('epp', 'spillway-epp'),
        '--pool',
        POOL,
        '--zone',
        spec.zone,
        '--region',
        spec.region,
        '--nats',
        nz.url,
        ...auth(nz.epp),
        '--host',
        '127.0.0.1',
        '--grpc-port',
        String(eppPorts.grpc),
        '--health-port',
        String(eppPorts.health),
        '--metrics-port',
        String(eppPorts.metrics),
        '--subset-mode',
        'locality',
        '--log-level',
        logLevel,
        ...(options.kvEvents ? ['--tokenizer', `*=${options.kvEvents.tokenizer}`] : []),
        ...(options.eppArgs ?? []),
      ],
      logFile: join(logs, `epp-${spec.zone}.log`),
      ready: () => waitUntil(`epp-${spec.zone}`, () => httpOk(`http://127.0.0.1:${eppPorts.metrics}/readyz`), 60_000),
    });
    const zoneNames = options.zones.map((z) => z.zone);
    const xds = options.xds ? await xdsProcess(spec, { nats: [nz.url, ...auth(nz.epp)], zones: zoneNames, logs, logLevel }) : undefined;
    const gatewayPort = await freePort();
    const gateway = new ManagedProcess({
      name: `gateway-${spec.zone}`,
      command: process.execPath,
      args: [
        bin('gateway', 'spillway-gateway'),
        '--epp',
        `127.0.0.1:${eppPorts.grpc}`,
        '--zone',
        spec.zone,
        ...(xds ? ['--xds', `127.0.0.1:${xds.ports.ads}`, '--region', spec.region] : ['--endpoints', allEndpoints]),
        '--port',
        String(gatewayPort),
        '--log-level',
        logLevel,
        ...(options.gatewayArgs ?? []),
      ],
      logFile: join(logs, `gateway-${spec.zone}.log`),
      ready: () => waitUntil(`gateway-${spec.zone}`, () => httpOk(`http://127.0.0.1:${gatewayPort}/gateway/stats`), 20_000),
    });
    zones.set(spec.zone, { spec, nats: nz, collector, epp, eppPorts, gateway, gatewayUrl: `http://127.0.0.1:${gatewayPort}`, xds });
  }
  const all = [...zones.values()];
  checkpoint();
  await Promise.all(all.map((z) => z.collector.start()));
  checkpoint();
  say('collectors: publishing');
  await Promise.all(all.map((z) => z.epp.start()));
  checkpoint();
  say('EPPs: ready (replay caught up)');
  checkpoint();
  if (options.xds) {
    await Promise.all(all.flatMap((z) => (z.xds ? [z.xds.start()] : [])));
    checkpoint();
    say('spillway-xds: ready (one per zone; the gateways take their endpoints and subsets from it)');
  }
  await Promise.all(all.map((z) => z.gateway.start()));
  say('gateways: listening');
}

/**
 * A zone's spillway-xds, following the zone's NATS as its EPP does (the same URL and read-only
 * user), as the manifests run one per zone; ready once its replay caught up.
 */
async function xdsProcess(
  spec: ZoneSpec,
  run: { nats: string[]; zones: string[]; logs: string; logLevel: string },
): Promise<ManagedProcess & { ports: { ads: number; health: number; metrics: number } }> {
  const ports = { ads: await freePort(), health: await freePort(), metrics: await freePort() };
  const [url, ...auth] = run.nats;
  const xds = new ManagedProcess({
    name: `xds-${spec.zone}`,
    command: process.execPath,
    args: [
      bin('xds', 'spillway-xds'),
      '--pool',
      POOL,
      '--nats',
      url as string,
      ...auth,
      '--host',
      '127.0.0.1',
      '--port',
      String(ports.ads),
      '--health-port',
      String(ports.health),
      '--metrics-port',
      String(ports.metrics),
      // The zones a gateway may name, as the manifests list the topology's.
      '--zones',
      run.zones.join(','),
      '--log-level',
      run.logLevel,
    ],
    logFile: join(run.logs, `xds-${spec.zone}.log`),
    ready: () => waitUntil(`xds-${spec.zone}`, () => httpOk(`http://127.0.0.1:${ports.metrics}/readyz`), 60_000),
  });
  return Object.assign(xds, { ports });
}

/** Starts the NATS servers, adding each to `nats` before it starts (so a failed start can stop it). */
async function startNats(
  options: SystemOptions,
  logs: string,
  kind: 'single' | 'zones',
  nats: NatsProcesses,
  checkpoint: () => void,
): Promise<void> {
  const servers = nats.servers;
  if (options.natsUrl) {
    if (kind === 'zones') throw new Error('--nats-url works with the single topology only');
    return;
  }
  const natsDir = join(options.dir, 'nats');
  mkdirSync(natsDir, { recursive: true });
  const serverProcess = (name: string, configPath: string, port: number): ManagedProcess => {
    const server: ManagedProcess = new ManagedProcess({
      name: `nats-${name}`,
      command: 'nats-server',
      args: ['-c', configPath],
      logFile: join(logs, `nats-${name}.log`),
      // Its own word, not any listener on the port (which another process could hold), then the port.
      ready: async () => {
        await server.waitForLine((l) => l.includes('Server is ready'), 15_000);
        await waitForPort(port, 15_000);
      },
    });
    return server;
  };

  if (kind === 'single') {
    const port = await freePort();
    const configPath = join(natsDir, 'single.conf');
    writeFileSync(configPath, renderSingleServer({ port, storeDir: join(natsDir, 'single') }));
    const server = Object.assign(serverProcess('single', configPath, port), { port });
    servers.set('single', server);
    checkpoint();
    await server.start();
    return;
  }

  const topology = renderZoneTopology({
    hub: { clientPort: await freePort(), leafPort: await freePort(), storeDir: join(natsDir, 'hub') },
    zones: await Promise.all(
      options.zones.map(async (z) => ({ zone: z.zone, clientPort: await freePort(), storeDir: join(natsDir, z.zone) })),
    ),
  });
  const paths = await writeZoneTopology(topology, natsDir);
  nats.topology = topology;
  const hub = serverProcess('hub', paths['hub'] as string, topology.hub.clientPort);
  servers.set('hub', hub);
  checkpoint();
  await hub.start();
  for (const zone of topology.zones) {
    const server = serverProcess(zone.zone, paths[zone.zone] as string, zone.clientPort);
    servers.set(zone.zone, server);
    checkpoint();
    await server.start();
  }
  const names = topology.zones.map((z) => z.zone);
  for (const zone of topology.zones) {
    const nc = await connect({ servers: zone.url, user: zone.users.admin.user, pass: zone.users.admin.pass });
    try {
      await provisionZoneStreams(await jetstreamManager(nc), zone.zone, names);
    } finally {
      await nc.close();
    }
  }
}
