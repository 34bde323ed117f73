/**
 * spillway-fleet's requests in flight per pod, as the pool's EPPs see them together: the pure
 * bookkeeping, then the command against real EPPs holding real ext_proc streams open.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { credentials as grpcCredentials } from '@grpc/grpc-js';
import type { StateBatch } from '@spillway/events';
import { loadEppConfig, startEpp, type RunningEpp } from '@spillway/epp';
import type { ProcessingResponse } from '@spillway/protocol';
import {
  envoyRequestMessages,
  eventually,
  ExternalProcessorClient,
  startNatsServer,
  TestPublisher,
  type NatsServerHandle,
  type PodSpec,
} from '@spillway/testkit';
import pino from 'pino';
import { PoolInFlight, runFleetCli } from '../src/index.js';

const batch = (epp: string, entries: StateBatch['entries'], snapshot?: { last: boolean }): StateBatch => ({
  v: 1,
  pool: 'llama',
  zone: 'zone-a',
  epp,
  seq: 1,
  sentAt: 0,
  entries,
  ...(snapshot ? { snapshot } : {}),
});

describe('PoolInFlight', () => {
  it("counts each EPP's open requests per endpoint; a release is not revived by an older snapshot; silent EPPs go", () => {
    const view = new PoolInFlight();
    view.apply(
      batch('e1', [
        [1, 1, 'zone-a', 'a0', 0, []],
        [1, 2, 'zone-a', 'a0', 0, []],
        [1, 3, 'zone-b', 'b0', 0, []],
      ]),
      1000,
    );
    view.apply(batch('e2', [[1, 1, 'zone-a', 'a0', 0, []]]), 1000);
    view.apply(batch('e1', [[2, 2, 5]]), 1100);
    // A snapshot taken before that release arrives late: request 2 stays released.
    view.apply(
      batch(
        'e1',
        [
          [1, 2, 'zone-a', 'a0', 0, []],
          [3, 'zone-a', 'a0', 9],
        ],
        { last: true },
      ),
      1200,
    );
    expect(Object.fromEntries(view.byEndpoint())).toEqual({ 'zone-a/a0': 2, 'zone-b/b0': 1 });
    expect([view.eppCount, view.total]).toEqual([2, 3]);
    view.prune(6001);
    expect([view.eppCount, view.total]).toEqual([1, 2]);
  });

  it('keeps a started request open past its stream until its EPP ends its charge (a release at time 0 without a completion)', () => {
    const view = new PoolInFlight();
    view.apply(
      batch('e1', [
        [1, 1, 'zone-a', 'a0', 0, []],
        [1, 2, 'zone-a', 'a0', 0, []],
        [5, 1, 10, 100, 256],
        [5, 9, 10, 100, 256], // not open: not counted
      ]),
      1000,
    );
    expect([view.total, view.started]).toEqual([2, 1]);
    view.apply(batch('e1', [[2, 1, 0]]), 1100);
    expect([view.total, view.started]).toEqual([1, 0]);
    expect(Object.fromEntries(view.byEndpoint())).toEqual({ 'zone-a/a0': 1 });
  });
});

const PODS: PodSpec[] = [
  { pod: 'a0', zone: 'zone-a', address: '10.0.1.1:8000' },
  { pod: 'a1', zone: 'zone-a', address: '10.0.1.2:8000' },
];
let nats: NatsServerHandle;
let publisher: TestPublisher;
const epps: RunningEpp[] = [];
const clients: ExternalProcessorClient[] = [];

async function startZoneEpp(): Promise<RunningEpp> {
  const config = loadEppConfig(
    [
      '--pool',
      'llama',
      '--zone',
      'zone-a',
      '--nats',
      nats.url,
      '--host',
      '127.0.0.1',
      '--grpc-port',
      '0',
      '--health-port',
      '0',
      '--metrics-port',
      '0',
    ],
    {},
  );
  if (!config) throw new Error('unexpected --help');
  const epp = await startEpp(config, { logger: pino({ level: 'silent' }), tickMs: 50 });
  epps.push(epp);
  await epp.ready;
  return epp;
}

/** A request held open through `epp` on `address` (its strict subset). */
async function hold(epp: RunningEpp, address: string): Promise<void> {
  const client = new ExternalProcessorClient(`127.0.0.1:${epp.grpcPort}`, grpcCredentials.createInsecure());
  clients.push(client);
  const call = client.process();
  call.on('error', () => undefined); // cancelled when the test closes its clients
  const first = new Promise<ProcessingResponse>((resolve) => call.once('data', resolve));
  for (const message of envoyRequestMessages({ subset: [address] })) call.write(message);
  await first;
}

beforeAll(async () => {
  nats = await startNatsServer({ forcePrivate: true });
  const first = await startZoneEpp();
  publisher = await TestPublisher.connect(nats.url);
  await publisher.pods(PODS);
  const second = await startZoneEpp();
  for (const epp of [first, second]) await eventually(() => expect(epp.core.fleet.pool('llama')?.readyCount).toBe(2));
  await eventually(() => expect(first.core.scheduler.shared.peerCount).toBe(1));
}, 30_000);

afterAll(async () => {
  for (const client of clients) client.close();
  for (const epp of epps) await epp.close();
  await publisher?.close();
  await nats?.stop();
});

describe('spillway-fleet --once', () => {
  it("shows each pod's requests in flight over every EPP of the pool", async () => {
    const [one, two] = epps as [RunningEpp, RunningEpp];
    for (let i = 0; i < 3; i++) await hold(one, '10.0.1.1:8000');
    await hold(two, '10.0.1.2:8000');
    await hold(two, '10.0.1.1:8000');
    const answered = [one.sharedState?.syncAnswered ?? 0, two.sharedState?.syncAnswered ?? 0];
    let out = '';
    const code = await runFleetCli(['--nats', nats.url, '--pool', 'llama', '--once'], {
      env: {},
      out: (t) => (out += t),
      err: () => undefined,
    });
    expect(code).toBe(0);
    expect(out).toContain('in flight 5 (0 started) over 2 EPPs (their shared state)');
    expect(out).toMatch(/^zone-a\s+a0\s+10\.0\.1\.1:8000\s+ready\s+0\s+0\s+0\.0%\s+4\s/m);
    expect(out).toMatch(/^zone-a\s+a1\s+10\.0\.1\.2:8000\s+ready\s+0\s+0\s+0\.0%\s+1\s/m);
    // Both EPPs answered the operator's request.
    expect([one.sharedState?.syncAnswered, two.sharedState?.syncAnswered]).toEqual(answered.map((n) => n + 1));
    // --in-flight false: the column says unknown.
    out = '';
    await runFleetCli(['--nats', nats.url, '--pool', 'llama', '--once', '--in-flight', 'false'], {
      env: {},
      out: (t) => (out += t),
      err: () => undefined,
    });
    expect(out).toMatch(/^zone-a\s+a0\s+10\.0\.1\.1:8000\s+ready\s+0\s+0\s+0\.0%\s+-\s/m);
    expect(out).not.toContain('in flight');
  }, 30_000);
});
