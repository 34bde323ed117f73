/**
 * A pod is identified by (pool, zone, pod), so per-zone publish permissions bound what a zone's
 * collector can change (docs/hardening.md, forged tombstones of another zone's pod). On the zone
 * topology of infra/nats (real
 * nats-server processes, the users and permissions it renders), zone-a's collector forges a
 * tombstone for zone-b's pod on a subject it may publish: a running EPP, and one restarted after
 * it, keep routing to zone-b's pod. Publishing on zone-b's subjects is refused by the server.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { credentials as grpcCredentials } from '@grpc/grpc-js';
import { jetstream } from '@nats-io/jetstream';
import { encodeEvent, subjectFor, type MetricsEvent, type ReadinessEvent } from '@spillway/events';
import type { ProcessingRequest, ProcessingResponse } from '@spillway/protocol';
import { loadEppConfig, startEpp, type RunningEpp } from '@spillway/epp';
import { eventually, ExternalProcessorClient } from '@spillway/testkit';
import pino from 'pino';
import { startSettledTopology, topologyClients, type RunningTopology } from './nats-topology-helper.js';

const ZONES = ['zone-a', 'zone-b'] as const;
type Zone = (typeof ZONES)[number];
const POOL = 'llama';
const VICTIM = 'sim-b-1';
const VICTIM_ADDRESS = '10.0.2.1:8000';
const SETTLE_MS = 20_000;

let running: RunningTopology;
const epps: RunningEpp[] = [];

const { zone, open, closeAll } = topologyClients(() => running);

/** zone-a's EPP, read-only on its zone's aggregate, exactly as deployed (no stream creation). */
async function startZoneAEpp(): Promise<RunningEpp> {
  const { user, pass } = zone('zone-a').users.epp;
  const args = ['--pool', POOL, '--zone', 'zone-a', '--nats', zone('zone-a').url, '--nats-user', user, '--nats-password', pass];
  args.push('--ensure-stream', 'false', '--host', '127.0.0.1', '--grpc-port', '0', '--health-port', '0', '--metrics-port', '0');
  const config = loadEppConfig(args, {});
  if (!config) throw new Error('unexpected --help');
  const epp = await startEpp(config, { logger: pino({ level: 'silent' }), tickMs: 50 });
  epps.push(epp);
  return epp;
}

/** One header-only request through ext_proc with a strict subset of just `address`: the destination header. */
async function pickWithin(epp: RunningEpp, address: string): Promise<string | undefined> {
  const client = new ExternalProcessorClient(`127.0.0.1:${epp.grpcPort}`, grpcCredentials.createInsecure());
  try {
    const call = client.process();
    const first = new Promise<ProcessingResponse>((resolve, reject) => {
      call.once('data', resolve);
      call.once('error', reject);
    });
    const utf8 = new TextEncoder();
    const headers = { ':method': 'GET', ':path': '/v1/models', ':authority': 'gateway' };
    const message: ProcessingRequest = {
      request: {
        $case: 'requestHeaders',
        value: {
          headers: { headers: Object.entries(headers).map(([key, value]) => ({ key, value: '', rawValue: utf8.encode(value) })) },
          attributes: {},
          endOfStream: true,
        },
      },
      metadataContext: {
        filterMetadata: { 'envoy.lb.subset_hint': { 'x-gateway-destination-endpoint-subset': [address] } },
        typedFilterMetadata: {},
      },
      attributes: {},
      observabilityMode: false,
    };
    call.write(message);
    const response = await first;
    call.end();
    const value = response.response?.value as
      { response?: { headerMutation?: { setHeaders: { header?: { key: string; rawValue: Uint8Array } }[] } } } | undefined;
    const header = value?.response?.headerMutation?.setHeaders.find((h) => h.header?.key === 'x-gateway-destination-endpoint')?.header;
    return header ? new TextDecoder().decode(header.rawValue) : undefined;
  } finally {
    client.close();
  }
}

const readiness = (z: Zone, pod: string, observedAt: number, overrides: Partial<ReadinessEvent> = {}): ReadinessEvent => ({
  v: 1,
  kind: 'readiness',
  pool: POOL,
  zone: z,
  pod,
  address: VICTIM_ADDRESS,
  ready: true,
  observedAt,
  ...overrides,
});

beforeAll(async () => {
  running = await startSettledTopology(ZONES, { provisionStreams: true, settleMs: SETTLE_MS });
}, 60_000);

afterAll(async () => {
  for (const epp of epps) await epp.close();
  await closeAll();
  await running?.stop();
});

describe("a zone's collector can change nothing of another zone's pods", () => {
  it("zone-a's forged tombstone for zone-b's pod leaves it routable, in a running EPP and after a restart", async () => {
    const t = Date.now();
    const collectorB = jetstream(await open('zone-b', 'collector'));
    await collectorB.publish(subjectFor(readiness('zone-b', VICTIM, t)), encodeEvent(readiness('zone-b', VICTIM, t)), { msgID: `b@${t}` });
    const sample: MetricsEvent = {
      v: 1,
      kind: 'metrics',
      pool: POOL,
      zone: 'zone-b',
      pod: VICTIM,
      observedAt: t,
      waitingRequests: 0,
      runningRequests: 0,
      kvCacheUsage: 0,
    };
    await collectorB.publish(subjectFor(sample), encodeEvent(sample), { msgID: `bm@${t}` });

    const epp = await startZoneAEpp();
    await epp.ready;
    await eventually(() => expect(epp.core.fleet.get(POOL, 'zone-b', VICTIM)?.ready).toBe(true), SETTLE_MS, 100);
    expect(await pickWithin(epp, VICTIM_ADDRESS)).toBe(VICTIM_ADDRESS);

    // zone-a's collector: its own zone's subjects are allowed, so it can name zone-b's pod there.
    const collectorA = jetstream(await open('zone-a', 'collector'));
    const forged = readiness('zone-a', VICTIM, t + 1_000, { ready: false, deleted: true });
    const ack = await collectorA.publish(subjectFor(forged), encodeEvent(forged), { msgID: `forged@${t}` });
    expect(ack.stream).toBe('SPILLWAY_ZONE-A');
    // zone-b's subjects are not: the server refuses the publish.
    const onZoneB = readiness('zone-b', VICTIM, t + 2_000, { ready: false, deleted: true });
    await expect(
      collectorA.publish(subjectFor(onZoneB), encodeEvent(onZoneB), { msgID: `forged-b@${t}`, timeout: 2_000 }),
    ).rejects.toThrow();

    // The forged tombstone reached the EPP and applies to zone-a's own (new, deleted) sim-b-1 only.
    await eventually(() => expect(epp.core.fleet.get(POOL, 'zone-a', VICTIM)?.deleted).toBe(true), SETTLE_MS, 100);
    expect(epp.core.fleet.get(POOL, 'zone-b', VICTIM)).toMatchObject({ ready: true, deleted: false, address: VICTIM_ADDRESS });
    expect(await pickWithin(epp, VICTIM_ADDRESS)).toBe(VICTIM_ADDRESS);

    // A restarted EPP replays the forged tombstone too, with the same outcome.
    await epp.close();
    const restarted = await startZoneAEpp();
    await restarted.ready;
    expect(restarted.core.fleet.get(POOL, 'zone-a', VICTIM)?.deleted).toBe(true);
    expect(restarted.core.fleet.get(POOL, 'zone-b', VICTIM)).toMatchObject({ ready: true, deleted: false });
    expect(await pickWithin(restarted, VICTIM_ADDRESS)).toBe(VICTIM_ADDRESS);
  }, 90_000);
});
