import { afterAll, describe, expect, it } from 'vitest';
import { eventually, freePort, startNatsServer, type NatsServerHandle } from '@spillway/testkit';
import { ServingStatus } from '@spillway/protocol';
import type { RunningEpp } from '@spillway/epp';
import {
  EnvoyStream,
  TestPublisher,
  completion,
  destinationOf,
  envoyRequestMessages,
  extProcClient,
  healthStatus,
  startTestEpp,
} from './helpers.js';

let nats: NatsServerHandle | undefined;
let epp: RunningEpp | undefined;
let publisher: TestPublisher | undefined;

afterAll(async () => {
  await epp?.close();
  await publisher?.close();
  await nats?.stop();
});

const SERVICES = ['', 'readiness', 'envoy.service.ext_proc.v3.ExternalProcessor'];

async function statuses(port: number) {
  return Promise.all([...SERVICES, 'liveness', 'no-such-service'].map((s) => healthStatus(port, s)));
}

describe('health follows the first replay, then stays SERVING', () => {
  it('is NOT_SERVING until the replay caught up, SERVING after, and stays SERVING through a NATS outage', async () => {
    const port = await freePort();
    // The EPP starts before NATS exists: it must serve health (not ready) and keep trying. The
    // deprecated --view-stale-limit-ms is still accepted, and has no effect.
    epp = await startTestEpp(`nats://127.0.0.1:${port}`, 'zone-a', ['--view-stale-limit-ms', '800']);
    for (const p of [epp.grpcPort, epp.healthPort]) {
      expect(await statuses(p)).toEqual([
        ServingStatus.NOT_SERVING,
        ServingStatus.NOT_SERVING,
        ServingStatus.NOT_SERVING,
        ServingStatus.SERVING,
        'NOT_FOUND',
      ]);
    }

    nats = await startNatsServer({ forcePrivate: true, port });
    publisher = await TestPublisher.connect(nats.url);
    await publisher.pods([{ pod: 'a0', zone: 'zone-a', address: '10.0.1.1:8000' }]);
    const running = epp;
    await eventually(async () => expect(await healthStatus(running.healthPort, 'readiness')).toBe(ServingStatus.SERVING), 20_000);
    expect(await healthStatus(running.grpcPort, 'envoy.service.ext_proc.v3.ExternalProcessor')).toBe(ServingStatus.SERVING);

    // NATS goes away: the EPP keeps picking from its last view and stays SERVING (well past the
    // old 800 ms limit); the view's age is exported.
    await publisher.close();
    publisher = undefined;
    await nats.kill();
    await eventually(async () => expect((await running.metrics.viewStaleSeconds.get()).values[0]?.value).toBeGreaterThan(1.5), 20_000);
    for (const p of [running.grpcPort, running.healthPort]) {
      expect(await statuses(p)).toEqual([
        ServingStatus.SERVING,
        ServingStatus.SERVING,
        ServingStatus.SERVING,
        ServingStatus.SERVING,
        'NOT_FOUND',
      ]);
    }
    const client = extProcClient(running.grpcPort);
    const stream = new EnvoyStream(client);
    stream.send(envoyRequestMessages({ body: completion() }));
    const responses = await stream.waitFor(2);
    expect(destinationOf(responses[0]).header).toBe('10.0.1.1:8000');
    stream.close();
    client.close();

    await nats.restart();
    await eventually(async () => expect((await running.metrics.viewStaleSeconds.get()).values[0]?.value).toBe(0), 30_000);
    expect(await healthStatus(running.healthPort, 'readiness')).toBe(ServingStatus.SERVING);
  });
});
