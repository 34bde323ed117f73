// End-to-end, strict subset mode on one NATS server: two zones of two small simulators, per zone a
// collector, an EPP (--subset-mode strict) and a gateway sending its zone-local subset. First the
// subset holds under overload; then the NATS server is killed and restarted under traffic.
import { describe, expect, it } from 'vitest';
import { eventually } from '@spillway/testkit';
import { eppMetric, readyz, scrape, sample, useSystem, summarize, Traffic, type Completion } from './helpers.js';

const ZONES = ['zone-a', 'zone-b'];
const LONG = 60;
const SHORT = 16;

describe.sequential('e2e: strict subset mode, two zones on one NATS server', () => {
  const e2e = useSystem('strict', {
    zones: ZONES.map((zone) => ({ zone, region: 'r1', servers: 2 })),
    natsTopology: 'single',
    simArgs: ['--max-num-seqs', '2', '--time-scale', '2'],
    eppArgs: ['--subset-mode', 'strict'],
  });

  const gateway = (zone: string) => e2e.system.zone(zone).gatewayUrl;
  const metricsPort = (zone: string) => e2e.system.zone(zone).eppPorts.metrics;

  it('strict mode with a zone-local subset: nothing leaves the subset, even under overload', async () => {
    const local = new Set(e2e.system.simsOf('zone-a').map((s) => s.address));
    // zone-a holds 2 servers × 2 running; keep 20 in flight through its gateway until its servers
    // queue (in locality mode its EPP would now send requests to zone-b), then a few more.
    const load = new Traffic(e2e.system, gateway('zone-a'), { workers: 20, maxRequests: 200, maxTokens: LONG, pauseMs: 0 });
    let burst: Completion[];
    try {
      await eventually(
        async () => {
          expect(await eppMetric(metricsPort('zone-a'), 'inference_pool_average_queue_size', { name: 'llama' })).toBeGreaterThan(0);
        },
        60_000,
        100,
      );
      await load.more(10);
    } finally {
      burst = await load.stop();
    }
    const summary = summarize(burst);
    expect(
      burst.every((r) => r.status === 200),
      summary,
    ).toBe(true);
    expect(
      burst.every((r) => r.zone === 'zone-a'),
      summary,
    ).toBe(true);
    const outside = burst.flatMap((r) => r.destination).filter((d) => !local.has(d));
    expect(outside, summary).toEqual([]);
    expect(await eppMetric(metricsPort('zone-a'), 'spillway_spills_total')).toBe(0);
  }, 90_000);

  it('nats-server killed and restarted mid-traffic: picking continues on the last view (stale), then follows new events', async () => {
    const nats = e2e.system.nats.servers.get('single');
    if (!nats) throw new Error('no single NATS server');
    const traffic = ZONES.map(
      (zone) => new Traffic(e2e.system, gateway(zone), { workers: 2, maxRequests: 400, maxTokens: SHORT, pauseMs: 50 }),
    );
    let results: Completion[][] = [];
    try {
      await Promise.all(traffic.map((t) => t.more(4)));
      await nats.kill();
      // Every EPP notices: disconnected, its view stale.
      await eventually(
        async () => {
          for (const zone of ZONES) {
            const m = await scrape(metricsPort(zone));
            expect(sample(m, 'spillway_nats_connected'), zone).toBe(0);
            expect(sample(m, 'spillway_view_stale_seconds') ?? 0, zone).toBeGreaterThan(0);
            // Its last view is kept: the pods are still ready (their metrics stale).
            expect(sample(m, 'spillway_zone_ready_pods', { zone }), zone).toBe(2);
            expect(sample(m, 'spillway_zone_stale_pods', { zone }), zone).toBe(2);
          }
        },
        30_000,
        200,
      );
      // Requests made while NATS is down, after the EPPs marked their view stale.
      const whileDown = traffic.map((t) => t.results.length);
      await Promise.all(traffic.map((t) => t.more(6)));
      const downResults = traffic.map((t, i) => t.results.slice(whileDown[i]));
      for (const [i, zone] of ZONES.entries()) {
        const rs = downResults[i] as Completion[];
        expect(rs.length).toBeGreaterThan(0);
        expect(
          rs.every((r) => r.status === 200 && r.zone === zone),
          `${zone} while NATS is down: ${summarize(rs)}`,
        ).toBe(true);
        // The EPP stays ready through the outage: it keeps picking from its last view.
        expect(await readyz(metricsPort(zone)), zone).toBe(200);
      }

      // A server dies while NATS is down: its readiness change cannot be published yet.
      const victim = e2e.system.simsOf('zone-b')[1];
      if (!victim) throw new Error('no zone-b simulator');
      await victim.process.kill();
      await traffic[1]?.more(4);
      for (const zone of ZONES) expect(await eppMetric(metricsPort(zone), 'spillway_zone_ready_pods', { zone: 'zone-b' }), zone).toBe(2);

      // NATS returns: every EPP reconnects, follows live samples again, and catches up with the
      // readiness change made during the outage.
      await nats.start();
      await eventually(
        async () => {
          for (const zone of ZONES) {
            const m = await scrape(metricsPort(zone));
            expect(sample(m, 'spillway_nats_connected'), zone).toBe(1);
            expect(sample(m, 'spillway_view_stale_seconds'), zone).toBe(0);
            expect(sample(m, 'spillway_zone_ready_pods', { zone: 'zone-b' }), `${zone} sees zone-b`).toBe(1);
            for (const z of ZONES) expect(sample(m, 'spillway_zone_stale_pods', { zone: z }), `${zone} sees ${z}`).toBe(0);
          }
        },
        60_000,
        200,
      );
      await Promise.all(traffic.map((t) => t.more(4)));
    } finally {
      results = await Promise.all(traffic.map((t) => t.stop()));
    }
    for (const [i, zone] of ZONES.entries()) {
      const rs = results[i] as Completion[];
      expect(
        rs.every((r) => r.status === 200),
        `${zone}: ${summarize(rs)}`,
      ).toBe(true);
    }

    // New events after the restart reach the views: another server dies, every EPP's view drops it.
    const second = e2e.system.simsOf('zone-a')[1];
    if (!second) throw new Error('no zone-a simulator');
    await second.process.kill();
    await eventually(
      async () => {
        for (const zone of ZONES) expect(await eppMetric(metricsPort(zone), 'spillway_zone_ready_pods', { zone: 'zone-a' }), zone).toBe(1);
      },
      30_000,
      200,
    );
  }, 120_000);
});
