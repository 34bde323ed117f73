/**
 * The state shared between EPPs on the zone topology of infra/nats (real nats-server processes, the
 * users and permissions it renders): a zone's EPP user publishes only its own zone's
 * `spillway.state` subjects, never another zone's nor an event, and reads every zone's. Real EPPs
 * of two zones, each with its zone's EPP user, share picks across the leaf links, and a starting
 * EPP's warm-start request is answered by the other zone's EPP (allow_responses).
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { decodeStateBatch, encodeStateBatch, stateSubjectFor, type StateBatch } from '@spillway/events';
import { EventPublisher } from '@spillway/bus';
import { loadEppConfig, startEpp, type RunningEpp } from '@spillway/epp';
import { runFleetCli } from '@spillway/ops';
import { eventually, envoyRequestMessages, ExternalProcessorClient } from '@spillway/testkit';
import { credentials as grpcCredentials } from '@grpc/grpc-js';
import type { ProcessingResponse } from '@spillway/protocol';
import pino from 'pino';
import { permissionErrors, startSettledTopology, topologyClients, type RunningTopology } from './nats-topology-helper.js';

const ZONES = ['zone-a', 'zone-b'] as const;
type Zone = (typeof ZONES)[number];
const POOL = 'llama';
const SETTLE_MS = 20_000;

let running: RunningTopology;
const epps: RunningEpp[] = [];

const { zone, open, closeAll } = topologyClients(() => running);

/** A zone's EPP exactly as deployed: its zone's EPP user, read-only on the aggregate, sharing state. */
async function startZoneEpp(name: Zone): Promise<RunningEpp> {
  const { user, pass } = zone(name).users.epp;
  const args = [
    '--pool',
    POOL,
    '--zone',
    name,
    '--nats',
    zone(name).url,
    '--nats-user',
    user,
    '--nats-password',
    pass,
    '--ensure-stream',
    'false',
  ];
  args.push('--host', '127.0.0.1', '--grpc-port', '0', '--health-port', '0', '--metrics-port', '0', '--metrics-stale-ms', '600000');
  const config = loadEppConfig(args, {});
  if (!config) throw new Error('unexpected --help');
  config.sharedState = { ...config.sharedState, heartbeatMs: 100, peerTimeoutMs: 2000, warmStartMs: 5000 };
  const epp = await startEpp(config, { logger: pino({ level: 'silent' }), tickMs: 50 });
  epps.push(epp);
  await epp.ready;
  return epp;
}

const batch = (z: Zone, epp: string, seq: number): StateBatch => ({
  v: 1,
  pool: POOL,
  zone: z,
  epp,
  seq,
  sentAt: Date.now(),
  entries: [[2, seq, Date.now()]],
});

beforeAll(async () => {
  running = await startSettledTopology(ZONES, { provisionStreams: true, settleMs: SETTLE_MS });
}, 60_000);

afterAll(async () => {
  for (const epp of epps) await epp.close();
  await closeAll();
  await running?.stop();
});

describe("a zone's EPP user and the shared-state subjects", () => {
  it("publishes its own zone's, never another zone's nor an event; reads every zone's across the hub", async () => {
    const eppA = await open('zone-a', 'epp');
    const errorsA = permissionErrors(eppA);
    const eppB = await open('zone-b', 'epp');
    const received: string[] = [];
    eppB.subscribe('spillway.state.>', { callback: (_e, msg) => void received.push(msg.subject) });
    await eppB.flush();

    // Its own zone: allowed, and it crosses the leaf links to zone-b's server.
    const own = stateSubjectFor({ pool: POOL, zone: 'zone-a', epp: 'epp-a' });
    await eventually(
      async () => {
        eppA.publish(own, encodeStateBatch(batch('zone-a', 'epp-a', received.length + 1)));
        await eppA.flush();
        expect(received).toContain(own);
      },
      SETTLE_MS,
      200,
    );

    // Another zone's state subject, and an event subject of its own zone: refused by the server.
    const forged = stateSubjectFor({ pool: POOL, zone: 'zone-b', epp: 'epp-a' });
    eppA.publish(forged, encodeStateBatch(batch('zone-b', 'epp-a', 1)));
    eppA.publish(`spillway.v1.${POOL}.zone-a.p.readiness`, new TextEncoder().encode('{}'));
    await eppA.flush();
    await eventually(() =>
      expect(errorsA.join('\n')).toMatch(/Permissions Violation for Publish to "spillway\.state\.llama\.zone-b\.epp-a"/),
    );
    await eventually(() =>
      expect(errorsA.join('\n')).toMatch(/Permissions Violation for Publish to "spillway\.v1\.llama\.zone-a\.p\.readiness"/),
    );
    await eppB.flush();
    expect(received).not.toContain(forged);

    // A collector may not publish state at all.
    const collectorA = await open('zone-a', 'collector');
    const errorsC = permissionErrors(collectorA);
    collectorA.publish(own, encodeStateBatch(batch('zone-a', 'epp-a', 99)));
    await collectorA.flush();
    await eventually(() =>
      expect(errorsC.join('\n')).toMatch(/Permissions Violation for Publish to "spillway\.state\.llama\.zone-a\.epp-a"/),
    );
  }, 60_000);
});

describe('real EPPs of two zones on the zone topology', () => {
  it('share picks across zones, and a starting EPP warm-starts from the other zone', async () => {
    // zone-b's collector publishes two pods with a queue, twice (a backlog), once the EPPs follow.
    const a = await startZoneEpp('zone-a');
    const b = await startZoneEpp('zone-b');
    const collectorB = new EventPublisher(await open('zone-b', 'collector'));
    const pods = ['b0', 'b1'].map((pod, i) => ({ pod, address: `10.0.2.${i + 1}:8000` }));
    for (const at of [Date.now() - 200, Date.now()]) {
      for (const p of pods) {
        await collectorB.publishReadiness({
          v: 1,
          kind: 'readiness',
          pool: POOL,
          zone: 'zone-b',
          pod: p.pod,
          address: p.address,
          ready: true,
          observedAt: at,
        });
        collectorB.publishMetrics({
          v: 1,
          kind: 'metrics',
          pool: POOL,
          zone: 'zone-b',
          pod: p.pod,
          observedAt: at,
          waitingRequests: 1,
          runningRequests: 8,
          kvCacheUsage: 0.5,
        });
      }
    }
    for (const epp of [a, b])
      await eventually(() => expect(epp.core.fleet.get(POOL, 'zone-b', 'b1')?.queuedSamples).toBe(2), SETTLE_MS, 100);
    await eventually(() => expect([a.core.scheduler.shared.peerCount, b.core.scheduler.shared.peerCount]).toEqual([1, 1]), SETTLE_MS, 100);

    // zone-a's EPP sends a request to b0 (a subset naming it); zone-b's EPP sees the pick.
    const client = new ExternalProcessorClient(`127.0.0.1:${a.grpcPort}`, grpcCredentials.createInsecure());
    const call = client.process();
    const first = new Promise<ProcessingResponse>((resolve) => call.once('data', resolve));
    for (const message of envoyRequestMessages({ subset: ['10.0.2.1:8000'] })) call.write(message);
    await first;
    await eventually(() => expect(b.core.fleet.get(POOL, 'zone-b', 'b0')?.unsampledPicks).toBe(1), SETTLE_MS, 50);

    // A new zone-b EPP asks its peers for their state: zone-a's EPP answers across the hub.
    const late = await startZoneEpp('zone-b');
    expect(late.sharedState?.warmStartPeers).toBe(2);
    expect(late.core.fleet.get(POOL, 'zone-b', 'b0')?.inFlight).toBe(1);
    call.end();
    client.close();
    await eventually(() => expect(late.core.fleet.get(POOL, 'zone-b', 'b0')?.inFlight).toBe(0), SETTLE_MS, 50);

    // What zone-a's EPP publishes decodes as its own zone's batches.
    const eppB = await open('zone-b', 'epp');
    const seen = new Promise<StateBatch>((resolve) =>
      eppB.subscribe(`spillway.state.${POOL}.zone-a.*`, {
        callback: (_e, msg) => {
          const decoded = decodeStateBatch(msg.data);
          if (decoded.ok) resolve(decoded.batch);
        },
      }),
    );
    expect(await seen).toMatchObject({ pool: POOL, zone: 'zone-a', epp: a.eppId });
  }, 90_000);
});

describe("spillway-fleet with a zone's EPP user (as docs/deploy.md runs it)", () => {
  it('shows the requests its EPPs held before it started when given --zone, and says the column is incomplete without it', async () => {
    const a = epps[0] ?? (await startZoneEpp('zone-a'));
    await eventually(() => expect(a.core.fleet.get(POOL, 'zone-b', 'b1')?.ready).toBe(true), SETTLE_MS, 100);
    // A request held open through zone-a's EPP, to b1, before spillway-fleet starts.
    const client = new ExternalProcessorClient(`127.0.0.1:${a.grpcPort}`, grpcCredentials.createInsecure());
    const call = client.process();
    call.on('error', () => undefined);
    const first = new Promise<ProcessingResponse>((resolve) => call.once('data', resolve));
    for (const message of envoyRequestMessages({ subset: ['10.0.2.2:8000'] })) call.write(message);
    await first;
    const { user, pass } = zone('zone-a').users.epp;
    const fleet = async (...extra: string[]) => {
      let out = '';
      const code = await runFleetCli(
        ['--nats', zone('zone-a').url, '--nats-user', user, '--nats-password', pass, '--pool', POOL, '--once', ...extra],
        { env: {}, out: (t) => (out += t), err: (t) => (out += t) },
      );
      return { code, out };
    };
    try {
      const without = await fleet();
      expect(without.code).toBe(0);
      expect(without.out).toMatch(/in flight: INCOMPLETE.*may not publish spillway\.state\.llama\.ops\.spillway-fleet-\w+\.sync.*--zone/);
      const given = await fleet('--zone', 'zone-a');
      expect(given.code).toBe(0);
      expect(given.out).not.toContain('INCOMPLETE');
      expect(given.out).toMatch(/^zone-b\s+b1\s+10\.0\.2\.2:8000\s+ready(\s+\S+){3}\s+1\s/m);
    } finally {
      call.end();
      client.close();
    }
  }, 90_000);
});
