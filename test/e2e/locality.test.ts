// End-to-end, locality mode (the per-zone deployment): one NATS server, three zones of two small
// simulators, per zone a collector, an EPP and a gateway, all real processes on loopback.
// Scenarios run in order on one system; the destructive ones (EPP restart, simulator kill) last.
import { describe, expect, it } from 'vitest';
import { eventually } from '@spillway/testkit';
import {
  complete,
  eppMetric,
  readyz,
  scrape,
  sample,
  startHintlessGateway,
  useSystem,
  summarize,
  Traffic,
  type Completion,
} from './helpers.js';

const ZONES = ['zone-a', 'zone-b', 'zone-c'];
/** With --max-num-seqs 2 and --time-scale 2, ~0.4–0.8 s per request: long enough to pile up. */
const LONG = 60;
/** Short requests for steady traffic. */
const SHORT = 16;

describe.sequential('e2e: locality mode, three zones on one NATS server', () => {
  const e2e = useSystem('locality', {
    zones: ZONES.map((zone) => ({ zone, region: 'r1', servers: 2 })),
    natsTopology: 'single',
    simArgs: ['--max-num-seqs', '2', '--time-scale', '2'],
  });

  const gateway = (zone: string) => e2e.system.zone(zone).gatewayUrl;
  const metricsPort = (zone: string) => e2e.system.zone(zone).eppPorts.metrics;

  it('healthy zones: requests through a zone gateway are served in that zone', async () => {
    for (const zone of ZONES) {
      const results: Completion[] = [];
      for (let i = 0; i < 6; i++) results.push(await complete(e2e.system, gateway(zone), { maxTokens: SHORT }));
      expect(
        results.every((r) => r.status === 200),
        summarize(results),
      ).toBe(true);
      expect(
        results.every((r) => r.zone === zone),
        `${zone}: ${summarize(results)}`,
      ).toBe(true);
      // The primary is local; the list also carries a cross-zone fallback.
      expect(results.every((r) => e2e.system.zoneOfAddress(r.destination[0] ?? '') === zone)).toBe(true);
      expect(results.some((r) => r.destination.some((d) => e2e.system.zoneOfAddress(d) !== zone))).toBe(true);
    }
  }, 60_000);

  it('a zone pushed past its capacity spills to other zones, nothing fails, and traffic returns when load drops', async () => {
    const spillsBefore = await eppMetric(metricsPort('zone-a'), 'spillway_spills_total');
    // zone-a holds 2 servers × 2 running; once requests queue there, waiting behind them costs more
    // than the round trip to zone-b. Keep 24 in flight through its gateway until some have been
    // served elsewhere.
    const load = new Traffic(e2e.system, gateway('zone-a'), { workers: 24, maxRequests: 240, maxTokens: LONG, pauseMs: 0 });
    let burst: Completion[];
    try {
      await eventually(() => expect(load.results.filter((r) => r.zone !== 'zone-a').length).toBeGreaterThanOrEqual(5), 60_000, 100);
    } finally {
      burst = await load.stop();
    }
    const summary = summarize(burst);
    expect(
      burst.every((r) => r.status === 200),
      summary,
    ).toBe(true);
    const elsewhere = burst.filter((r) => r.zone !== 'zone-a');
    expect(
      elsewhere.every((r) => r.zone === 'zone-b' || r.zone === 'zone-c'),
      summary,
    ).toBe(true);
    expect(burst.filter((r) => r.zone === 'zone-a').length, summary).toBeGreaterThan(0);
    expect(await eppMetric(metricsPort('zone-a'), 'spillway_spills_total')).toBeGreaterThan(spillsBefore);

    // Load gone: once the servers are sampled without queues again, sequential requests stay home.
    await eventually(async () => {
      expect(await eppMetric(metricsPort('zone-a'), 'inference_pool_average_queue_size', { name: 'llama' })).toBe(0);
    }, 30_000);
    await eventually(
      async () => {
        const after: Completion[] = [];
        for (let i = 0; i < 5; i++) after.push(await complete(e2e.system, gateway('zone-a'), { maxTokens: SHORT }));
        expect(
          after.every((r) => r.status === 200 && r.zone === 'zone-a'),
          summarize(after),
        ).toBe(true);
      },
      30_000,
      200,
    );
  }, 120_000);

  it('an EPP restarted mid-traffic is ready again after replay and picks as before', async () => {
    const port = metricsPort('zone-a');
    const before = await scrape(port);
    const readyBefore = ZONES.map((zone) => sample(before, 'spillway_zone_ready_pods', { zone }));
    expect(readyBefore).toEqual([2, 2, 2]);

    // Traffic through the other zones keeps flowing (their EPPs are untouched); zone-a's gateway
    // fails fast while its EPP is gone, which is expected and not asserted.
    const others = [
      new Traffic(e2e.system, gateway('zone-b'), { workers: 1, maxRequests: 80, maxTokens: SHORT }),
      new Traffic(e2e.system, gateway('zone-c'), { workers: 1, maxRequests: 80, maxTokens: SHORT }),
    ];
    const local = new Traffic(e2e.system, gateway('zone-a'), { workers: 1, maxRequests: 200, maxTokens: SHORT, pauseMs: 100 });
    try {
      await local.more(3);
      const epp = e2e.system.zone('zone-a').epp;
      await epp.kill();
      await eventually(async () => expect(await readyz(port)).toBe(0), 10_000);
      await local.more(3);
      await epp.start();
      await eventually(async () => expect(await readyz(port)).toBe(200), 60_000);
      const after = await scrape(port);
      expect(sample(after, 'spillway_view_caught_up')).toBe(1);
      expect(ZONES.map((zone) => sample(after, 'spillway_zone_ready_pods', { zone }))).toEqual(readyBefore);
      // Picks as before: through its gateway, served in zone-a again.
      await eventually(
        async () => {
          const r = await complete(e2e.system, gateway('zone-a'), { maxTokens: SHORT });
          expect(r.status, summarize([r])).toBe(200);
          expect(r.zone).toBe('zone-a');
        },
        30_000,
        200,
      );
      for (let i = 0; i < 5; i++) {
        const r = await complete(e2e.system, gateway('zone-a'), { maxTokens: SHORT });
        expect(r.status === 200 && r.zone === 'zone-a', summarize([r])).toBe(true);
      }
    } finally {
      await local.stop();
      const results = (await Promise.all(others.map((t) => t.stop()))).flat();
      expect(results.length).toBeGreaterThan(0);
      expect(
        results.every((r) => r.status === 200),
        summarize(results),
      ).toBe(true);
    }
  }, 120_000);

  it('a simulator killed mid-traffic: retries walk the fallback list, and the EPP stops picking it once readiness says so', async () => {
    const victim = e2e.system.simsOf('zone-a')[0];
    if (!victim) throw new Error('no zone-a simulator');
    // A gateway without a subset hint shows the EPP's own view in its destination lists (the zone
    // gateway also drops the dead server from its hint by its own health checks).
    const hintless = await startHintlessGateway(e2e.system, 'zone-a');
    const traffic = new Traffic(e2e.system, gateway('zone-a'), { workers: 3, maxRequests: 300, maxTokens: SHORT, pauseMs: 20 });
    let results: Completion[];
    try {
      await traffic.more(6);
      await victim.process.kill();
      // Readiness: the collector's probe marks the dead pod not ready; every EPP's view follows.
      await eventually(
        async () => {
          for (const zone of ZONES) expect(await eppMetric(metricsPort(zone), 'spillway_zone_ready_pods', { zone: 'zone-a' })).toBe(1);
        },
        30_000,
        200,
      );
      await traffic.more(6);
    } finally {
      results = await traffic.stop();
    }
    expect(
      results.every((r) => r.status === 200),
      summarize(results),
    ).toBe(true);
    expect(
      results.some((r) => r.attempts > 1),
      summarize(results),
    ).toBe(true);

    // No destination list names the dead pod any more, also without a subset hint. These requests
    // span more than the EPP's passive-health penalty (5 s), so readiness, not the penalty, keeps it out.
    const probes: Completion[] = [];
    for (let i = 0; i < 24; i++) probes.push(await complete(e2e.system, hintless, { maxTokens: LONG }));
    expect(
      probes.every((r) => r.status === 200),
      summarize(probes),
    ).toBe(true);
    expect(probes.filter((r) => r.destination.includes(victim.address)).map((r) => r.destination.join(','))).toEqual([]);
    expect(probes.some((r) => r.zone === 'zone-a')).toBe(true);
  }, 120_000);
});
