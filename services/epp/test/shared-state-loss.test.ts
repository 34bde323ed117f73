/**
 * Correctness under loss (docs/sharing.md): an EPP killed mid-burst never sends the releases of the
 * requests it held open. Its peer must not keep that phantom load: the next sample of each endpoint
 * covers the picks, and the silent peer is forgotten with its entries after the peer timeout. The
 * killed EPP is the real binary, SIGKILLed; its peer runs in process.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { RunningEpp } from '@spillway/epp';
import { eventually, freePort, startNatsServer, type NatsServerHandle } from '@spillway/testkit';
import { ServingStatus } from '@spillway/protocol';
import {
  destinationOf,
  EnvoyStream,
  envoyRequestMessages,
  extProcClient,
  healthStatus,
  startTestEpp,
  TestPublisher,
  type PodSpec,
} from './helpers.js';

const BIN = join(dirname(fileURLToPath(import.meta.url)), '..', 'bin', 'spillway-epp.js');
const DIST = join(dirname(BIN), '..', 'dist', 'main.js');

let nats: NatsServerHandle;
let publisher: TestPublisher;
let peer: RunningEpp | undefined;
let child: ChildProcess | undefined;
const streams: EnvoyStream[] = [];
const dir = mkdtempSync(join(tmpdir(), 'spillway-shared-loss-'));
const config = join(dir, 'epp.yaml');
writeFileSync(config, 'sharedState: { heartbeatMs: 100, peerTimeoutMs: 1500 }\n');

const PODS: PodSpec[] = [0, 1, 2].map((i) => ({ pod: `a${i}`, zone: 'zone-a', address: `10.0.1.${i + 1}:8000`, waiting: 1, running: 8 }));

beforeAll(async () => {
  if (!existsSync(DIST)) throw new Error(`${DIST} is missing: run \`npm run build\` first`);
  nats = await startNatsServer({ forcePrivate: true });
  publisher = await TestPublisher.connect(nats.url);
  peer = await startTestEpp(nats.url, 'zone-a', ['--config', config, '--metrics-stale-ms', '600000']);
  await peer.ready;
  // Two samples with a queue: a backlog, so every pick since the latest sample counts as load.
  await publisher.pods(PODS, Date.now() - 200);
  await publisher.pods(PODS);
  await eventually(() => expect(PODS.every((p) => (peer?.core.fleet.get('llama', 'zone-a', p.pod)?.queuedSamples ?? 0) >= 2)).toBe(true));
});

afterAll(async () => {
  for (const stream of streams) stream.close();
  child?.kill('SIGKILL');
  await peer?.close();
  await publisher?.close();
  await nats?.stop();
});

describe('an EPP killed mid-burst', () => {
  it('leaves no phantom load at its peer once the next sample arrives, and is forgotten after the peer timeout', async () => {
    const [grpcPort, healthPort, metricsPort] = [await freePort(), await freePort(), await freePort()];
    child = spawn(
      process.execPath,
      [
        BIN,
        '--pool',
        'llama',
        '--zone',
        'zone-a',
        '--nats',
        nats.url,
        '--host',
        '127.0.0.1',
        '--config',
        config,
        '--metrics-stale-ms',
        '600000',
        '--log-level',
        'warn',
      ],
      {
        env: {
          ...process.env,
          SPILLWAY_GRPC_PORT: String(grpcPort),
          SPILLWAY_HEALTH_PORT: String(healthPort),
          SPILLWAY_METRICS_PORT: String(metricsPort),
        },
        stdio: 'ignore',
      },
    );
    await eventually(async () => expect(await healthStatus(healthPort, 'readiness')).toBe(ServingStatus.SERVING), 20_000);
    const shared = (peer as RunningEpp).core.scheduler.shared;
    await eventually(() => expect(shared.peerCount).toBe(1));

    // The burst: five requests held open on a0 through the doomed EPP.
    const client = extProcClient(grpcPort);
    for (let i = 0; i < 5; i++) {
      const stream = new EnvoyStream(client);
      streams.push(stream);
      stream.send(envoyRequestMessages({ subset: ['10.0.1.1:8000'] }));
      const [response] = await stream.waitFor(1);
      expect(destinationOf(response).header?.split(',')[0]).toBe('10.0.1.1:8000');
    }
    const a0 = (peer as RunningEpp).core.fleet.get('llama', 'zone-a', 'a0');
    await eventually(() => expect(a0?.unsampledPicks).toBe(5));

    // Killed: no release, no goodbye.
    const exited = new Promise((resolve) => child?.once('exit', resolve));
    child.kill('SIGKILL');
    await exited;
    child = undefined;
    client.close();
    expect(a0?.unsampledPicks).toBe(5);
    expect(shared.remoteInFlight).toBe(5);

    // The next sample of a0 postdates the picks: they no longer load it.
    publisher.metrics(PODS[0] as PodSpec);
    await eventually(() => expect(a0?.unsampledPicks).toBe(0));
    // And the silent peer goes, with its in-flight entries.
    await eventually(() => expect(shared.peerCount).toBe(0), 10_000);
    expect(shared.remoteInFlight).toBe(0);
    expect(a0?.inFlight).toBe(0);
    expect(peer?.sharedState).toMatchObject({ peersForgotten: 1, expiredPeer: 5 });
    const text = await (await fetch(`http://127.0.0.1:${peer?.metricsPort}/metrics`)).text();
    expect(text).toContain('spillway_shared_state_expired_total{reason="peer-timeout"} 5');
    expect(text).toContain('spillway_shared_state_peers 0');
  }, 60_000);
});
