// A graceful stop of the EPP binary (docs/operations.md, "Restarts"): on SIGTERM it reports
// NOT_SERVING on both ports at once, keeps picking for --drain-delay-ms while the gateways' health
// checks notice, then accepts no new connection while the streams in flight finish (at most
// --drain-timeout-ms), and exits 0. Real processes, real gRPC over sockets.
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { jetstreamManager } from '@nats-io/jetstream';
import { ensureStream } from '@spillway/bus';
import { EXT_PROC_SERVICE_NAME, ServingStatus } from '@spillway/protocol';
import { eventually, freePort, startNatsServer, type NatsServerHandle } from '@spillway/testkit';
import {
  EnvoyStream,
  TestPublisher,
  completion,
  destinationOf,
  envoyRequestMessages,
  extProcClient,
  healthStatus,
  responseHeadersMessage,
} from './helpers.js';

const BIN = join(dirname(fileURLToPath(import.meta.url)), '..', 'bin', 'spillway-epp.js');
const DIST = join(dirname(BIN), '..', 'dist', 'main.js');
const POD = { pod: 'd0', zone: 'zone-d', address: '10.40.0.1:8000' };

interface Child {
  process: ChildProcess;
  lines: Record<string, unknown>[];
  exited: Promise<number | null>;
  grpc: number;
  health: number;
}

let nats: NatsServerHandle;
let publisher: TestPublisher;
const children: Child[] = [];

beforeAll(async () => {
  if (!existsSync(DIST)) throw new Error(`${DIST} is missing: run \`npm run build\` first`);
  nats = await startNatsServer({ forcePrivate: true });
  publisher = await TestPublisher.connect(nats.url);
  await ensureStream(await jetstreamManager(publisher.nc), { name: 'SPILLWAY' });
  await publisher.pods([POD]);
});

afterEach(async () => {
  for (const child of children.splice(0)) {
    if (child.process.exitCode === null && child.process.signalCode === null) child.process.kill('SIGKILL');
    await child.exited;
  }
});

afterAll(async () => {
  await publisher?.close();
  await nats?.stop();
});

/** The binary, ready (SERVING), its JSON log lines collected. */
async function startEpp(args: string[]): Promise<Child> {
  const [grpc, health, metrics] = [await freePort(), await freePort(), await freePort()];
  const ports = ['--grpc-port', String(grpc), '--health-port', String(health), '--metrics-port', String(metrics)];
  const child = spawn(
    process.execPath,
    [BIN, '--pool', 'llama', '--zone', 'zone-d', '--nats', nats.url, '--host', '127.0.0.1', '--log-level', 'info', ...ports, ...args],
    { stdio: ['ignore', 'pipe', 'pipe'] },
  );
  const lines: Record<string, unknown>[] = [];
  createInterface({ input: child.stdout as NodeJS.ReadableStream }).on('line', (line) => {
    try {
      lines.push(JSON.parse(line) as Record<string, unknown>);
    } catch {
      lines.push({ raw: line });
    }
  });
  child.stderr?.resume();
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  const handle = { process: child, lines, exited, grpc, health };
  children.push(handle);
  await eventually(async () => expect(await healthStatus(health, 'readiness')).toBe(ServingStatus.SERVING), 20_000);
  return handle;
}

const logged = (child: Child, msg: string) => child.lines.some((l) => l['msg'] === msg);
const STILL_SERVING = "draining: NOT_SERVING; still serving until the gateways' health checks notice";
const NO_NEW = 'draining: no new connections; streams in flight finish';

/** A request held after its pick, as a request waiting for its first token is: the destination it got. */
async function held(stream: EnvoyStream): Promise<string | undefined> {
  stream.send(envoyRequestMessages({ body: completion(), subset: [POD.address] }));
  const [first] = await stream.waitFor(1);
  return destinationOf(first).header;
}

describe('SIGTERM drains', () => {
  it('NOT_SERVING on both ports at once; picks go on through the drain delay; then no new connection while a stream in flight finishes; exit 0', async () => {
    const epp = await startEpp(['--drain-delay-ms', '4000', '--drain-timeout-ms', '20000']);
    const gateway = extProcClient(epp.grpc);
    const inFlight = new EnvoyStream(gateway);
    expect(await held(inFlight)).toBe(POD.address);

    epp.process.kill('SIGTERM');
    await eventually(async () => {
      expect(await healthStatus(epp.grpc, EXT_PROC_SERVICE_NAME)).toBe(ServingStatus.NOT_SERVING);
      expect(await healthStatus(epp.health, 'readiness')).toBe(ServingStatus.NOT_SERVING);
    }, 3000);
    expect(logged(epp, STILL_SERVING)).toBe(true);
    // The gateway has not noticed yet: its new requests are still picked, on its connection and on a new one.
    const during = new EnvoyStream(gateway);
    expect(await held(during)).toBe(POD.address);
    during.close();
    const late = extProcClient(epp.grpc);
    const onNewConnection = new EnvoyStream(late);
    expect(await held(onNewConnection)).toBe(POD.address);
    onNewConnection.close();
    late.close();

    // After the delay: no new connection is accepted; the stream in flight is still served.
    await eventually(() => expect(logged(epp, NO_NEW)).toBe(true), 10_000);
    await expect(healthStatus(epp.grpc, 'liveness')).rejects.toThrow();
    expect(epp.process.exitCode).toBeNull();
    inFlight.send([responseHeadersMessage(200, POD.address)]);
    const responses = await inFlight.waitFor(3);
    expect(responses.map((r) => r.response?.$case)).toEqual(['requestHeaders', 'requestBody', 'responseHeaders']);
    inFlight.close();
    expect(await inFlight.ended).toBeUndefined();
    expect(await epp.exited).toBe(0);
    expect(logged(epp, 'drained')).toBe(true);
    gateway.close();
  }, 40_000);

  it('resets a stream still open after --drain-timeout-ms, and exits 0', async () => {
    const epp = await startEpp(['--drain-delay-ms', '0', '--drain-timeout-ms', '1000']);
    const gateway = extProcClient(epp.grpc);
    const stuck = new EnvoyStream(gateway);
    expect(await held(stuck)).toBe(POD.address);
    epp.process.kill('SIGTERM');
    expect(await epp.exited).toBe(0);
    expect(await stuck.ended).toBeDefined();
    gateway.close();
  }, 30_000);

  it('skips the delay when no gateway is connected', async () => {
    const epp = await startEpp(['--drain-delay-ms', '60000']);
    epp.process.kill('SIGTERM');
    expect(await epp.exited).toBe(0);
    expect(logged(epp, STILL_SERVING)).toBe(false);
  }, 30_000);
});
