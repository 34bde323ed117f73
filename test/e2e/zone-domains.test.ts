// End-to-end on the per-zone NATS topology: each zone its own JetStream domain (a leaf node of a
// hub) with a local aggregate stream sourcing every zone; two zones of two simulators, per zone a
// collector, an EPP (locality mode) and a gateway. The hub is stopped and brought back under traffic.
import { describe, expect, it } from 'vitest';
import { eventually } from '@spillway/testkit';
import { eppMetric, scrape, sample, useSystem, summarize, Traffic, type Completion } from './helpers.js';

const ZONES = ['zone-a', 'zone-b'] as const;
const SHORT = 16;

describe.sequential('e2e: one JetStream domain per zone, hub stopped and restarted', () => {
  const e2e = useSystem('zones', {
    zones: ZONES.map((zone) => ({ zone, region: 'r1', servers: 2 })),
    natsTopology: 'zones',
    simArgs: ['--max-num-seqs', '2', '--time-scale', '2'],
  });

  const gateway = (zone: string) => e2e.system.zone(zone).gatewayUrl;
  const metricsPort = (zone: string) => e2e.system.zone(zone).eppPorts.metrics;
  const other = (zone: string) => (zone === 'zone-a' ? 'zone-b' : 'zone-a');

  /** Every EPP's view: `ready` pods per zone; its own zone fresh; the other zone fresh or stale. */
  const expectViews = async (remote: 'fresh' | 'stale', ready: Record<string, number> = { 'zone-a': 2, 'zone-b': 2 }) => {
    for (const zone of ZONES) {
      const m = await scrape(metricsPort(zone));
      for (const z of ZONES) expect(sample(m, 'spillway_zone_ready_pods', { zone: z }), `${zone}'s EPP: ready pods of ${z}`).toBe(ready[z]);
      expect(sample(m, 'spillway_zone_stale_pods', { zone }), `${zone}'s EPP: stale pods of its own zone`).toBe(0);
      const remoteStale = sample(m, 'spillway_zone_stale_pods', { zone: other(zone) });
      expect(remoteStale, `${zone}'s EPP: stale pods of ${other(zone)}`).toBe(remote === 'fresh' ? 0 : ready[other(zone)]);
      // The EPP's own link (to its zone's server) is up throughout.
      expect(sample(m, 'spillway_nats_connected'), `${zone}'s EPP connected`).toBe(1);
    }
  };

  it('with the hub stopped each zone keeps serving in-zone, remote data goes stale, and the views converge after it returns', async () => {
    const hub = e2e.system.nats.servers.get('hub');
    if (!hub) throw new Error('no hub NATS server');
    // Every EPP sees every zone, live, through its local aggregate.
    await eventually(() => expectViews('fresh'), 30_000, 200);

    const traffic = ZONES.map(
      (zone) => new Traffic(e2e.system, gateway(zone), { workers: 2, maxRequests: 400, maxTokens: SHORT, pauseMs: 50 }),
    );
    let results: Completion[][] = [];
    try {
      await Promise.all(traffic.map((t) => t.more(4)));
      await hub.kill();
      // Cut off: each zone's view of the other zone stops updating (stale); its own stays fresh.
      await eventually(() => expectViews('stale'), 30_000, 200);
      const from = traffic.map((t) => t.results.length);
      await Promise.all(traffic.map((t) => t.more(8)));
      for (const [i, zone] of ZONES.entries()) {
        const rs = (traffic[i] as Traffic).results.slice(from[i]);
        expect(rs.length).toBeGreaterThan(0);
        expect(
          rs.every((r) => r.status === 200 && r.zone === zone),
          `${zone} while cut off: ${summarize(rs)}`,
        ).toBe(true);
      }

      // A change in zone-b while cut off: zone-b's own EPP follows it at once; zone-a's cannot yet.
      const victim = e2e.system.simsOf('zone-b')[1];
      if (!victim) throw new Error('no zone-b simulator');
      await victim.process.kill();
      await eventually(
        async () => {
          expect(await eppMetric(metricsPort('zone-b'), 'spillway_zone_ready_pods', { zone: 'zone-b' })).toBe(1);
        },
        30_000,
        200,
      );
      expect(await eppMetric(metricsPort('zone-a'), 'spillway_zone_ready_pods', { zone: 'zone-b' })).toBe(2);

      // The hub returns: the aggregates' sources catch up, and the views converge.
      await hub.start();
      await eventually(() => expectViews('fresh', { 'zone-a': 2, 'zone-b': 1 }), 60_000, 200);
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
    expect(
      (results[0] as Completion[]).every((r) => r.zone === 'zone-a'),
      summarize(results[0] as Completion[]),
    ).toBe(true);

    // Following live again across zones: another change in zone-b reaches zone-a's EPP.
    const second = e2e.system.simsOf('zone-b')[0];
    if (!second) throw new Error('no zone-b simulator');
    await second.process.kill();
    await eventually(
      async () => {
        expect(await eppMetric(metricsPort('zone-a'), 'spillway_zone_ready_pods', { zone: 'zone-b' })).toBe(0);
      },
      30_000,
      200,
    );
  }, 120_000);
});
