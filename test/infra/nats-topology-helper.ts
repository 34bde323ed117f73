/**
 * Starts the three-zone NATS topology of infra/nats on loopback for a test: configs rendered by
 * infra/nats/topology.ts with free ports into a temporary directory, one nats-server process per
 * server, each killable (SIGKILL, like a crash or a cut link) and restartable with its store.
 * (A candidate for @spillway/testkit once the demo launcher needs the same thing.)
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { eventually, freePort, INSTALL_HINT, natsServerAvailable, waitForPort } from '@spillway/testkit';
import { jetstreamManager } from '@nats-io/jetstream';
import { connect } from '@nats-io/transport-node';
import type { NatsConnection } from '@nats-io/nats-core';
import {
  provisionZoneStreams,
  renderZoneTopology,
  writeZoneTopology,
  type RenderedTopology,
  type RenderedZone,
} from '../../infra/nats/topology.js';

export interface ServerProcess {
  readonly name: string;
  readonly configPath: string;
  readonly clientPort: number;
  readonly monitorPort: number;
  /** Starts the server (again) and waits until it accepts clients. */
  start(): Promise<void>;
  /** SIGKILL, keeping the store. */
  kill(): Promise<void>;
  /** Last lines the server wrote (for failure messages). */
  log(): string;
}

export interface RunningTopology {
  readonly topology: RenderedTopology;
  readonly dir: string;
  readonly hub: ServerProcess;
  readonly zones: ReadonlyMap<string, ServerProcess>;
  /** Kills every server and removes the directory. */
  stop(): Promise<void>;
}

/** Validates a config file with `nats-server -t`; returns the failure output, or undefined when valid. */
export function validateConfig(path: string): string | undefined {
  const result = spawnSync('nats-server', ['-t', '-c', path], { encoding: 'utf8' });
  return result.status === 0 ? undefined : `${result.stdout}${result.stderr}`.trim() || `exit ${result.status}`;
}

export function requireNatsServer(): void {
  if (!natsServerAvailable()) throw new Error(INSTALL_HINT);
}

function serverProcess(name: string, configPath: string, clientPort: number, monitorPort: number): ServerProcess {
  let child: ChildProcess | undefined;
  let output = '';
  return {
    name,
    configPath,
    clientPort,
    monitorPort,
    async start() {
      if (child) throw new Error(`${name} is already running`);
      const started = spawn('nats-server', ['-c', configPath], { stdio: ['ignore', 'ignore', 'pipe'] });
      child = started;
      started.stderr?.on('data', (chunk: Buffer) => {
        output = (output + chunk.toString()).slice(-6000);
      });
      const exited = new Promise<never>((_, reject) =>
        started.once('exit', (code, signal) => {
          if (child === started) child = undefined;
          reject(new Error(`${name} exited (${code ?? signal}): ${output}`));
        }),
      );
      exited.catch(() => undefined);
      await Promise.race([waitForPort(clientPort, 10_000), exited]);
    },
    async kill() {
      const running = child;
      child = undefined;
      if (!running || running.exitCode !== null || running.signalCode !== null) return;
      const gone = new Promise<void>((resolve) => running.once('exit', () => resolve()));
      running.kill('SIGKILL');
      await gone;
    },
    log: () => output,
  };
}

/**
 * Renders, writes and starts the hub and every zone server. A free port can be taken by another
 * process (an outgoing connection's ephemeral port) between finding it and the server binding it;
 * then the whole topology is started again on new ports.
 */
export async function startTopology(zoneNames: readonly string[]): Promise<RunningTopology> {
  requireNatsServer();
  for (let attempt = 1; ; attempt++) {
    try {
      return await startTopologyOnce(zoneNames);
    } catch (error) {
      if (attempt >= 5 || !/address already in use/.test(String(error))) throw error;
    }
  }
}

async function startTopologyOnce(zoneNames: readonly string[]): Promise<RunningTopology> {
  const dir = mkdtempSync(join(tmpdir(), 'spillway-topology-'));
  const ports = async () => ({ client: await freePort(), monitor: await freePort() });
  const hubPorts = await ports();
  const leafPort = await freePort();
  const zonePorts = await Promise.all(zoneNames.map(() => ports()));
  const topology = renderZoneTopology({
    hub: { clientPort: hubPorts.client, leafPort, storeDir: join(dir, 'store', 'hub'), monitorPort: hubPorts.monitor },
    zones: zoneNames.map((zone, i) => ({
      zone,
      clientPort: zonePorts[i]!.client,
      monitorPort: zonePorts[i]!.monitor,
      storeDir: join(dir, 'store', zone),
    })),
  });
  const paths = await writeZoneTopology(topology, join(dir, 'conf'));
  const hub = serverProcess('hub', paths['hub']!, hubPorts.client, hubPorts.monitor);
  const zones = new Map(
    zoneNames.map((zone, i) => [zone, serverProcess(zone, paths[zone]!, zonePorts[i]!.client, zonePorts[i]!.monitor)] as const),
  );
  const all = [hub, ...zones.values()];
  const stop = async (): Promise<void> => {
    await Promise.all(all.map((s) => s.kill()));
    rmSync(dir, { recursive: true, force: true });
  };
  try {
    await hub.start();
    await Promise.all([...zones.values()].map((z) => z.start()));
  } catch (error) {
    await stop();
    throw error;
  }
  return { topology, dir, hub, zones, stop };
}

/** Number of leaf connections a server reports on its monitoring port (`/leafz`). */
export async function leafCount(server: ServerProcess): Promise<number> {
  const response = await fetch(`http://127.0.0.1:${server.monitorPort}/leafz`);
  const body = (await response.json()) as { leafnodes?: unknown };
  if (typeof body.leafnodes !== 'number') throw new Error(`unexpected /leafz answer from ${server.name}`);
  return body.leafnodes;
}

/** Connections to a running topology's zones as the users it renders, closed together at the end. */
export function topologyClients(running: () => RunningTopology): {
  zone(name: string): RenderedZone;
  open(name: string, role: keyof RenderedZone['users']): Promise<NatsConnection>;
  closeAll(): Promise<void>;
} {
  const connections: NatsConnection[] = [];
  const zone = (name: string): RenderedZone => {
    const found = running().topology.zones.find((z) => z.zone === name);
    if (!found) throw new Error(`no zone ${name}`);
    return found;
  };
  return {
    zone,
    async open(name, role) {
      const nc = await connect({ servers: zone(name).url, ...zone(name).users[role], reconnectTimeWait: 200 });
      connections.push(nc);
      return nc;
    },
    async closeAll() {
      await Promise.all(connections.map((nc) => nc.close().catch(() => undefined)));
    },
  };
}

/** The permission errors a connection reported (nats.js reports a refused publish asynchronously). */
export function permissionErrors(nc: NatsConnection): string[] {
  const errors: string[] = [];
  void (async () => {
    for await (const status of nc.status()) if (status.type === 'error') errors.push(String(status.error));
  })();
  return errors;
}

/**
 * Starts the topology ready for a test: every zone's streams provisioned when asked (as the zone's
 * admin user), and every zone's leaf link to the hub up. Stops what it started if it cannot settle.
 */
export async function startSettledTopology(
  zoneNames: readonly string[],
  options: { provisionStreams?: boolean; settleMs?: number } = {},
): Promise<RunningTopology> {
  const settleMs = options.settleMs ?? 20_000;
  const running = await startTopology(zoneNames);
  const clients = topologyClients(() => running);
  try {
    if (options.provisionStreams) {
      for (const z of zoneNames) {
        await eventually(
          async () => provisionZoneStreams(await jetstreamManager(await clients.open(z, 'admin')), z, zoneNames),
          settleMs,
          200,
        );
      }
    }
    await eventually(
      async () => {
        const links = await leafCount(running.hub);
        if (links !== zoneNames.length) throw new Error(`${links} of ${zoneNames.length} leaf links up`);
      },
      settleMs,
      100,
    );
  } catch (error) {
    await running.stop();
    throw error;
  } finally {
    await clients.closeAll();
  }
  return running;
}
