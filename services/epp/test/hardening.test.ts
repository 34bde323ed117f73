// Regression tests of the hardening review (docs/hardening.md) that need a running EPP: passive
// health on 5xx, the stream deleted while running, silent connections, bind address and warning,
// future-dated events and the per-zone pod cap as the EPP wires them. Real NATS, real sockets.
import { mkdtempSync, readFileSync, readdirSync, readlinkSync, writeFileSync } from 'node:fs';
import { connect as netConnect, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { jetstreamManager } from '@nats-io/jetstream';
import { ensureStream, findStream } from '@spillway/bus';
import { eventually, startNatsServer, type NatsServerHandle } from '@spillway/testkit';
import { ServingStatus } from '@spillway/protocol';
import { loadEppConfig, type RunningEpp } from '@spillway/epp';
import {
  EnvoyStream,
  POOL,
  TestPublisher,
  capturingLogger,
  completion,
  destinationOf,
  envoyRequestMessages,
  extProcClient,
  healthStatus,
  immediateOf,
  responseHeadersMessage,
  startTestEpp,
  type PodSpec,
} from './helpers.js';

let nats: NatsServerHandle;
let publisher: TestPublisher;
const running: RunningEpp[] = [];
const dir = mkdtempSync(join(tmpdir(), 'spillway-epp-hardening-'));

beforeAll(async () => {
  nats = await startNatsServer({ forcePrivate: true });
  publisher = await TestPublisher.connect(nats.url);
});

afterEach(async () => {
  for (const epp of running.splice(0)) await epp.close();
});

afterAll(async () => {
  await publisher?.close();
  await nats?.stop();
});

async function start(zone: string, args: string[] = [], logger?: Parameters<typeof startTestEpp>[3]): Promise<RunningEpp> {
  const epp = await startTestEpp(nats.url, zone, args, logger);
  running.push(epp);
  return epp;
}

/**
 * The local addresses this process listens on at `port`, from /proc/net/tcp{,6}: a row is this
 * process's when its socket inode is one of /proc/self/fd's.
 */
function ownListeners(port: number): string[] {
  const inodes = new Set<string>();
  for (const fd of readdirSync('/proc/self/fd')) {
    try {
      const m = /^socket:\[(\d+)\]$/.exec(readlinkSync(`/proc/self/fd/${fd}`));
      if (m) inodes.add(m[1] as string);
    } catch {
      // The fd closed while listing: not a listener of ours.
    }
  }
  const found: string[] = [];
  for (const table of ['/proc/net/tcp', '/proc/net/tcp6']) {
    for (const row of readFileSync(table, 'utf8').trim().split('\n').slice(1)) {
      const [, local, , state, , , , , , inode] = row.trim().split(/\s+/);
      const [hexAddress, hexPort] = (local ?? '').split(':');
      if (state !== '0A' || parseInt(hexPort ?? '', 16) !== port || !inodes.has(inode ?? '')) continue;
      found.push(hexAddress === '0200007F' ? '127.0.0.2' : hexAddress === '0100007F' ? '127.0.0.1' : `other:${hexAddress}`);
    }
  }
  return found.sort();
}

async function scrape(epp: RunningEpp): Promise<string> {
  return (await fetch(`http://127.0.0.1:${epp.metricsPort}/metrics`)).text();
}

describe('passive health: a 5xx status or a connection failure of the primary penalises it', () => {
  const pods: PodSpec[] = [0, 1, 2, 3].map((i) => ({ pod: `h${i}`, zone: 'zone-h', address: `10.0.8.${i + 1}:8000`, waiting: i }));

  it('penalises the primary on 5xx (served = primary, or no served endpoint), not on 2xx, and counts a fallback once', async () => {
    const config = join(dir, 'penalty.yaml');
    // A long penalty, so a slow machine cannot see one expire between steps. Flow control off: the
    // last pod left (a queue of 3, 300 ms) has no room, and this test is about where requests go.
    writeFileSync(config, 'penaltyMs: 600000\nflowControl: { enabled: false }\n');
    const epp = await start('zone-h', ['--config', config]);
    await publisher.pods(pods);
    await epp.ready;
    await eventually(() => expect(epp.core.fleet.pool(POOL)?.readyInZone('zone-h').size).toBe(4));
    const refresh = setInterval(() => pods.forEach((p) => publisher.metrics(p)), 100);
    const client = extProcClient(epp.grpcPort);
    try {
      /** One request answered with `status`, the gateway naming `served` (or nothing): returns its primary. */
      const exchange = async (status: number, served: 'primary' | 'none' | string): Promise<string | undefined> => {
        const stream = new EnvoyStream(client);
        stream.send(envoyRequestMessages({ body: completion(), subset: pods.map((p) => p.address) }));
        const responses = await stream.waitFor(2);
        const primary = destinationOf(responses[0]).header?.split(',')[0];
        stream.send([responseHeadersMessage(status, served === 'primary' ? primary : served === 'none' ? undefined : served)]);
        await stream.waitFor(3);
        stream.close();
        await stream.ended;
        await eventually(() => expect([...(epp.core.fleet.pool(POOL)?.endpoints() ?? [])].reduce((n, e) => n + e.inFlight, 0)).toBe(0));
        return primary;
      };
      const failed = async () => (await epp.metrics.primaryFailed.get()).values[0]?.value ?? 0;

      expect(await exchange(200, 'primary')).toBe('10.0.8.1:8000');
      // Served by the primary with 200: nothing penalised, the same primary again.
      expect(await exchange(503, 'primary')).toBe('10.0.8.1:8000');
      expect(await failed()).toBe(1);
      // h0 penalised: h1 is the primary now; a 500 with no served endpoint named fails it too.
      expect(await exchange(500, 'none')).toBe('10.0.8.2:8000');
      expect(await failed()).toBe(2);
      // h2 primary; the gateway served a fallback (h3), with 503: the served-elsewhere rule penalises h2, once.
      expect(await exchange(503, '10.0.8.4:8000')).toBe('10.0.8.3:8000');
      expect(await failed()).toBe(2);
      expect((await epp.metrics.servedElsewhere.get()).values[0]?.value).toBe(1);
      for (const address of ['10.0.8.1:8000', '10.0.8.2:8000', '10.0.8.3:8000']) {
        const endpoint = epp.core.fleet.pool(POOL)?.routableAt(address)[0];
        expect(endpoint && epp.core.scheduler.isPenalised(endpoint, Date.now()), address).toBe(true);
      }
      expect(await exchange(200, 'primary')).toBe('10.0.8.4:8000');
    } finally {
      clearInterval(refresh);
      client.close();
    }
  });
});

describe('the stream deleted while the EPP runs', () => {
  it('is re-created with --ensure-stream true, and the EPP follows new events', async () => {
    const { logger, lines } = capturingLogger();
    const epp = await start('zone-s', [], logger);
    await publisher.pods([{ pod: 's0', zone: 'zone-s', address: '10.0.9.1:8000' }]);
    await epp.ready;
    await eventually(() => expect(epp.core.fleet.get(POOL, 'zone-s', 's0')?.ready).toBe(true));
    const jsm = await jetstreamManager(publisher.nc);
    await jsm.streams.delete('SPILLWAY');
    await eventually(async () => expect(await findStream(jsm, 'SPILLWAY')).toBeDefined(), 15_000);
    await eventually(
      async () => {
        await publisher.pods([{ pod: 's1', zone: 'zone-s', address: '10.0.9.2:8000' }]);
        expect(epp.core.fleet.get(POOL, 'zone-s', 's1')?.ready).toBe(true);
      },
      15_000,
      500,
    );
    expect(await healthStatus(epp.healthPort, 'readiness')).toBe(ServingStatus.SERVING);
    const messages = lines.map((l) => String(l['msg']));
    expect(messages).toContain('the event stream is missing (deleted?); waiting for it to be created');
    expect(messages).toContain('created stream');
    expect(messages.join('\n')).not.toMatch(/jetstream is not enabled/);
  });

  it('with --ensure-stream false stays SERVING on its last view, logs the view as stale, and resumes once the stream is back', async () => {
    const { logger, lines } = capturingLogger();
    const epp = await start('zone-s', ['--ensure-stream', 'false'], logger);
    await epp.ready;
    const jsm = await jetstreamManager(publisher.nc);
    await jsm.streams.delete('SPILLWAY');
    await eventually(() => expect(lines.map((l) => l['msg'])).toContain('event view is stale; still picking from it'), 15_000);
    expect(await findStream(jsm, 'SPILLWAY')).toBeUndefined();
    expect(await healthStatus(epp.healthPort, 'readiness')).toBe(ServingStatus.SERVING);
    expect((await epp.metrics.viewStaleSeconds.get()).values[0]?.value).toBeGreaterThan(0);
    // Not a wait for a condition: nats-server 2.9 can break a file stream created again within
    // milliseconds of its deletion (the reader waits likewise before re-creating one).
    await new Promise((resolve) => setTimeout(resolve, 1_000));
    await ensureStream(jsm);
    await eventually(
      async () => {
        await publisher.pods([{ pod: 's2', zone: 'zone-s', address: '10.0.9.3:8000' }]);
        expect(epp.core.fleet.get(POOL, 'zone-s', 's2')?.ready).toBe(true);
      },
      15_000,
      500,
    );
    await eventually(() => expect(lines.map((l) => l['msg'])).toContain('event view is live again'), 15_000);
  });
});

describe('connections', () => {
  it('closes 1,000 silent TCP connections on the ext_proc, health and metrics ports, and keeps a quiet stream open', async () => {
    const epp = await start('zone-c', ['--connection-timeout-ms', '500']);
    await publisher.pods([{ pod: 'c0', zone: 'zone-c', address: '10.0.7.1:8000' }]);
    await epp.ready;
    const ports = [epp.grpcPort, epp.healthPort, epp.metricsPort];
    const sockets: Socket[] = [];
    let closed = 0;
    for (let i = 0; i < 1000; i++) {
      const socket = netConnect({ host: '127.0.0.1', port: ports[i % 3] as number });
      socket.on('error', () => undefined);
      socket.on('close', () => closed++);
      // Silent, but reading: the gRPC port writes its HTTP/2 settings and pings before the close is seen.
      socket.resume();
      sockets.push(socket);
    }
    // An ext_proc stream that waits well past the timeout between request and response (a long generation).
    const client = extProcClient(epp.grpcPort);
    const stream = new EnvoyStream(client);
    stream.send(envoyRequestMessages({ body: completion(), subset: ['10.0.7.1:8000'] }));
    expect(destinationOf((await stream.waitFor(2))[0]).header).toBe('10.0.7.1:8000');
    try {
      await eventually(() => expect(closed).toBe(1000), 20_000, 100);
      stream.send([responseHeadersMessage(200, '10.0.7.1:8000')]);
      expect((await stream.waitFor(3)).length).toBe(3);
    } finally {
      stream.close();
      client.close();
      for (const socket of sockets) socket.destroy();
    }
  });

  it('binds every server to --host, and warns about plaintext ext_proc off loopback', async () => {
    // 127.0.0.2 is loopback too on Linux, but a different address: nothing may answer on 127.0.0.1.
    const { logger, lines } = capturingLogger();
    const epp = await start('zone-c', ['--host', '127.0.0.2'], logger);
    const reachable = (host: string, port: number) =>
      new Promise<boolean>((resolve) => {
        const socket = netConnect({ host, port }, () => {
          socket.destroy();
          resolve(true);
        });
        socket.on('error', () => resolve(false));
      });
    for (const port of [epp.grpcPort, epp.healthPort, epp.metricsPort]) {
      expect(await reachable('127.0.0.2', port), `127.0.0.2:${port}`).toBe(true);
      // Asked of the kernel, not by connecting to 127.0.0.1: another test's server may hold that
      // address with the same port number (seen once in CI), which says nothing about this EPP.
      expect(ownListeners(port), `listeners on port ${port}`).toEqual(['127.0.0.2']);
    }
    expect(lines.some((l) => /plaintext/.test(String(l['msg'])))).toBe(false);

    const open = capturingLogger();
    await start('zone-c', ['--host', '0.0.0.0'], open.logger);
    const warning = open.lines.find((l) => /ext_proc is served in plaintext on a non-loopback address/.test(String(l['msg'])));
    expect(warning).toMatchObject({ level: 40, host: '0.0.0.0' });
  });
});

describe('request bodies held at once', () => {
  it('refuses a body past --max-buffered-body-bytes with 503, and gives the bytes back when streams end', async () => {
    const epp = await start('zone-b', ['--max-buffered-body-bytes', String(1024 * 1024)]);
    await publisher.pods([{ pod: 'b0', zone: 'zone-b', address: '10.0.3.1:8000' }]);
    await epp.ready;
    const client = extProcClient(epp.grpcPort);
    try {
      const big = completion('llama', 'x'.repeat(800 * 1024));
      // Stream A holds 800 KB and never finishes its body.
      const a = new EnvoyStream(client);
      a.send(
        envoyRequestMessages({ body: big, subset: ['10.0.3.1:8000'] }).map((m) => ({
          ...m,
          request: m.request?.$case === 'requestBody' ? { ...m.request, value: { ...m.request.value, endOfStream: false } } : m.request,
        })),
      );
      await eventually(() => expect(epp.core.bodies.used).toBeGreaterThan(800 * 1024));
      // Stream B needs 400 KB more: over the 1 MiB budget.
      const b = new EnvoyStream(client);
      b.send(envoyRequestMessages({ body: completion('llama', 'y'.repeat(400 * 1024)), subset: ['10.0.3.1:8000'] }));
      const refused = immediateOf((await b.waitFor(1))[0]);
      expect(refused?.status).toBe(503);
      expect(refused?.body.error.code).toBe('body_budget_exceeded');
      // A goes away: its bytes return, and the same request fits.
      a.call.cancel();
      await eventually(() => expect(epp.core.bodies.used).toBe(0));
      const c = new EnvoyStream(client);
      c.send(envoyRequestMessages({ body: completion('llama', 'y'.repeat(400 * 1024)), subset: ['10.0.3.1:8000'] }));
      expect(destinationOf((await c.waitFor(2))[0]).header).toBe('10.0.3.1:8000');
      c.close();
      await eventually(() => expect(epp.core.bodies.used).toBe(0));
    } finally {
      client.close();
    }
  });
});

describe('hostile events as the EPP wires them', () => {
  it('refuses future-dated events (--max-clock-skew-ms) and new pods of a full zone (--max-pods-per-zone), counting both', async () => {
    const epp = await start('zone-f', ['--max-clock-skew-ms', '1000', '--max-pods-per-zone', '3']);
    await epp.ready;
    await publisher.pods([{ pod: 'ahead', zone: 'zone-f', address: '10.0.6.1:8000' }], Date.now() + 60_000);
    await publisher.pods([0, 1, 2, 3, 4].map((i) => ({ pod: `f${i}`, zone: 'zone-f', address: `10.0.6.${10 + i}:8000` })));
    await eventually(async () => {
      const text = await scrape(epp);
      expect(text).toMatch(/spillway_events_total\{result="future"\} 2\b/);
      // f3 and f4: readiness and metrics each.
      expect(text).toMatch(/spillway_events_total\{result="over-capacity"\} 4\b/);
    }, 15_000);
    expect(epp.core.fleet.get(POOL, 'zone-f', 'ahead')).toBeUndefined();
    expect(epp.core.fleet.pool(POOL)?.readyInZone('zone-f').size).toBe(3);
  });
});

describe('the new settings as config-file fields', () => {
  it('reads maxClockSkewMs, maxPodsPerZone, metricModels, healthTls and connectionTimeoutMs from the file, and flags --view-stale-limit-ms as deprecated', () => {
    const file = join(dir, 'fields.yaml');
    writeFileSync(
      file,
      'maxClockSkewMs: 2000\nmaxPodsPerZone: 100\nmetricModels: [llama, mistral]\nconnectionTimeoutMs: 5000\nviewStaleLimitMs: 800\n',
    );
    const config = loadEppConfig(['--pool', POOL, '--zone', 'a', '--config', file], {});
    expect(config?.flags).toMatchObject({
      maxClockSkewMs: 2000,
      maxPodsPerZone: 100,
      metricModels: ['llama', 'mistral'],
      healthTls: false,
      connectionTimeoutMs: 5000,
    });
    expect(config?.warnings).toEqual([
      '--view-stale-limit-ms is deprecated and ignored: readiness stays SERVING while NATS is unreachable',
    ]);
    expect(loadEppConfig(['--pool', POOL, '--zone', 'a'], {})?.flags).toMatchObject({
      maxClockSkewMs: 5000,
      maxPodsPerZone: 4096,
      metricModels: [],
      healthTls: false,
      connectionTimeoutMs: 20_000,
    });
    expect(() => loadEppConfig(['--pool', POOL, '--zone', 'a', '--max-pods-per-zone', '0'], {})).toThrow(/--max-pods-per-zone/);
  });
});
