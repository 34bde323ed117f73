import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startNatsServer, eventually, type ExternalProcessorClient, type NatsServerHandle } from '@spillway/testkit';
import type { RunningEpp } from '@spillway/epp';
import {
  EnvoyStream,
  TestPublisher,
  capturingLogger,
  completion,
  destinationOf,
  envoyRequestMessages,
  extProcClient,
  startTestEpp,
  type PodSpec,
  type RequestOptions,
} from './helpers.js';

// The gateway's zone in `envoy.lb.subset_hint` / `x-spillway-gateway-zone` (as spillway-xds's
// subset filter writes it) is the request's local zone: one zone-a EPP over real gRPC answers a
// zone-b gateway as zone-b's EPP would, and falls back to its own zone, counting and logging, when
// the zone is one the pool has no pod in.
const PODS: PodSpec[] = [
  { pod: 'a0', zone: 'zone-a', region: 'r1', address: '10.0.1.1:8000' },
  { pod: 'a1', zone: 'zone-a', region: 'r1', address: '10.0.1.2:8000' },
  { pod: 'b0', zone: 'zone-b', region: 'r1', address: '10.0.2.1:8000' },
  { pod: 'b1', zone: 'zone-b', region: 'r1', address: '10.0.2.2:8000' },
  { pod: 'c0', zone: 'zone-c', region: 'r2', address: '10.0.3.1:8000' },
];
const ZONE_OF = new Map(PODS.map((p) => [p.address, p.zone]));
const ZONE_B_SUBSET = ['10.0.2.1:8000', '10.0.2.2:8000'];

interface DecisionSummary {
  zone: string;
  gatewayZone: string;
  rule: string;
  entries: { address: string; zone: string; reason: string; cost: { rttMs: number; biasMs: number } }[];
}

let nats: NatsServerHandle;
let publisher: TestPublisher;
let epp: RunningEpp;
let client: ExternalProcessorClient;
const log = capturingLogger('info');

/** One request over gRPC as Envoy sends it; its destination, zone by zone. */
async function destination(options: RequestOptions): Promise<{ addresses: string[]; zones: (string | undefined)[] }> {
  const stream = new EnvoyStream(client);
  try {
    stream.send(envoyRequestMessages({ body: completion(), ...options }));
    const [headers] = await stream.waitFor(2);
    const addresses = (destinationOf(headers).header ?? '').split(',');
    return { addresses, zones: addresses.map((a) => ZONE_OF.get(a)) };
  } finally {
    stream.close();
  }
}

async function lastDecision(): Promise<DecisionSummary> {
  const response = await fetch(`http://127.0.0.1:${epp.metricsPort}/debug/decisions?limit=1`);
  const body = (await response.json()) as { decisions: DecisionSummary[] };
  return body.decisions[0] as DecisionSummary;
}

async function unknownZones(reason: 'unknown' | 'malformed'): Promise<number> {
  const text = await (await fetch(`http://127.0.0.1:${epp.metricsPort}/metrics`)).text();
  const match = new RegExp(`^spillway_gateway_zone_unknown_total\\{reason="${reason}"\\} (\\S+)$`, 'm').exec(text);
  return match ? Number(match[1]) : Number.NaN;
}

beforeAll(async () => {
  nats = await startNatsServer({ forcePrivate: true });
  publisher = await TestPublisher.connect(nats.url);
  epp = await startTestEpp(nats.url, 'zone-a', ['--region', 'r1', '--subset-mode', 'locality'], log.logger);
  await publisher.pods(PODS);
  await epp.ready;
  await eventually(() => expect(epp.core.fleet.pool('llama')?.readyCount).toBe(PODS.length));
  client = extProcClient(epp.grpcPort);
  const refresh = setInterval(() => PODS.forEach((p) => publisher.metrics(p)), 200);
  refresh.unref();
});

afterAll(async () => {
  client?.close();
  await epp?.close();
  await publisher?.close();
  await nats?.stop();
});

describe("the gateway's zone from x-spillway-gateway-zone", () => {
  it("picks a zone-b gateway's request with zone-b local: zone-b first, no round trip or bias for it", async () => {
    const fromB = await destination({ gatewayZone: 'zone-b', subset: ZONE_B_SUBSET });
    expect(fromB.zones[0]).toBe('zone-b');
    const decision = await lastDecision();
    expect(decision).toMatchObject({ zone: 'zone-b', gatewayZone: 'known', rule: 'local' });
    expect(decision.entries[0]).toMatchObject({ zone: 'zone-b', reason: 'local-best', cost: { rttMs: 0, biasMs: 0 } });
    // zone-a, the EPP's own zone, is a remote zone of the region for this request.
    const zoneA = decision.entries.find((e) => e.zone === 'zone-a');
    if (zoneA !== undefined) expect(zoneA).toMatchObject({ reason: 'cross-zone-fallback', cost: { rttMs: 1, biasMs: 8 } });
  });

  it('without the zone (and with the same subset) the EPP picks for its own zone', async () => {
    const fromA = await destination({});
    expect(fromA.zones[0]).toBe('zone-a');
    expect(await lastDecision()).toMatchObject({ zone: 'zone-a', gatewayZone: 'none', rule: 'local' });
    // A zone-b subset without the zone (what a zone-b gateway got before): in locality mode the
    // subset's pods are zone-a's local ones, and it has none, so the request counts as spilled.
    const sameSubset = await destination({ subset: ZONE_B_SUBSET });
    expect(sameSubset.zones[0]).toBe('zone-b');
    expect(await lastDecision()).toMatchObject({ zone: 'zone-a', gatewayZone: 'none', rule: 'spill' });
  });

  it('a zone-c gateway (another region) gets zone-c first and zone-a, zone-b at the cross-region round trip', async () => {
    await destination({ gatewayZone: 'zone-c', subset: ['10.0.3.1:8000'] });
    const decision = await lastDecision();
    expect(decision).toMatchObject({ zone: 'zone-c', gatewayZone: 'known' });
    expect(decision.entries[0]).toMatchObject({ zone: 'zone-c', reason: 'local-best' });
    for (const entry of decision.entries.slice(1)) expect(entry.cost.rttMs).toBe(30);
  });

  it('a zone the pool has no pod in is picked for the EPP zone, counted, and logged once a minute', async () => {
    const before = await unknownZones('unknown');
    const first = await destination({ gatewayZone: 'zone-x' });
    expect(first.zones[0]).toBe('zone-a');
    expect(await lastDecision()).toMatchObject({ zone: 'zone-a', gatewayZone: 'unknown' });
    await destination({ gatewayZone: 'zone-y' });
    expect((await unknownZones('unknown')) - before).toBe(2);
    const warnings = log.lines.filter((l) => typeof l['msg'] === 'string' && l['msg'].includes('the gateway names a zone'));
    expect(warnings).toHaveLength(1);
    expect(warnings[0]).toMatchObject({ gatewayZone: 'zone-x', reason: 'unknown', pickedFor: 'zone-a' });
  });

  it('a value that is not a zone name is counted as malformed and picked for the EPP zone', async () => {
    const before = await unknownZones('malformed');
    for (const value of [7, ['zone-b'], '', 'z'.repeat(300)]) {
      const result = await destination({ gatewayZone: value });
      expect(result.zones[0]).toBe('zone-a');
      expect(await lastDecision()).toMatchObject({ zone: 'zone-a', gatewayZone: 'malformed' });
    }
    expect((await unknownZones('malformed')) - before).toBe(4);
  });

  it('the spill matrix counts each request from the zone it was picked for', async () => {
    await destination({ gatewayZone: 'zone-b', subset: ZONE_B_SUBSET });
    const matrix = epp.core.telemetry.spill.snapshot(Date.now());
    const from = matrix.zones.indexOf('zone-b');
    const to = matrix.zones.indexOf('zone-b');
    expect(from).toBeGreaterThanOrEqual(0);
    expect(matrix.perS[from]?.[to]).toBeGreaterThan(0);
  });
});
