// End-to-end: a zone's only EPP restarting costs no request when its gateway lists the other
// zones' EPPs at lower priorities, as the rendered Envoy config's EPP cluster does. Two zones of
// the same region, two simulators each, one collector and one EPP per zone; zone-a's development
// gateway with `--epp <zone-a's EPP> --epp-fallback <zone-b's EPP>` (health-checked every 2 s,
// unhealthy after 2 failures, fail-closed). Open-loop traffic of 20 requests a second runs while
// zone-a's EPP gets SIGTERM, drains (NOT_SERVING at once, still picking for the drain delay), exits
// and starts again: the gateway's health checks move new streams to zone-b's EPP and back. The
// gateway's zone travels in the metadata (x-spillway-gateway-zone), so zone-b's EPP picks for
// zone-a: the requests stay on zone-a's pods. Then the control: the same restart through the
// system's own zone-a gateway, which knows no other EPP, costs requests.
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { eventually, freePort } from '@spillway/testkit';
import { httpOk, ManagedProcess, waitUntil } from '../../infra/demo/process.js';
import { complete, OpenLoop, sleep, summarize, useSystem, type SentCompletion } from './helpers.js';

/** SIGTERM to exit: the drain delay (6 s by default) and streams in flight, with room to spare. */
const STOP_GRACE_MS = 60_000;

interface EppHost {
  address: string;
  priority: number;
  healthy: boolean;
  streams: number;
}

interface DecisionSummary {
  zone: string;
  gatewayZone: string;
  rule: string;
  entries: { zone: string }[];
}

describe.sequential('e2e: a zone’s only EPP restarts under traffic; its gateway fails over to the next zone’s EPP', () => {
  const e2e = useSystem('failover', {
    zones: [
      { zone: 'zone-a', region: 'r1', servers: 2 },
      { zone: 'zone-b', region: 'r1', servers: 2 },
    ],
    natsTopology: 'single',
  });
  let gateway: ManagedProcess | undefined;
  let gatewayUrl = '';

  const eppAddress = (zone: string) => `127.0.0.1:${e2e.system.zone(zone).eppPorts.grpc}`;

  /** zone-a's gateway with zone-b's EPP as its priority 1, on a port of its own. */
  async function setUp(): Promise<void> {
    if (gateway !== undefined) return;
    const zone = e2e.system.zone('zone-a');
    const port = await freePort();
    const args = [...zone.gateway.spec.args];
    args[args.indexOf('--port') + 1] = String(port);
    args.push('--epp-fallback', eppAddress('zone-b'));
    gateway = new ManagedProcess({
      name: 'gateway-zone-a-failover',
      command: zone.gateway.spec.command,
      args,
      logFile: join(e2e.system.options.dir, 'logs', 'gateway-zone-a-failover.log'),
      ready: () => waitUntil('gateway', () => httpOk(`http://127.0.0.1:${port}/gateway/stats`), 20_000),
    });
    await gateway.start();
    gatewayUrl = `http://127.0.0.1:${port}`;
    await eventually(async () => expect((await hostsOf(gatewayUrl)).every((h) => h.healthy)).toBe(true), 20_000);
  }

  afterAll(async () => {
    await gateway?.stop();
    gateway?.close();
  });

  async function hostsOf(url: string): Promise<EppHost[]> {
    const stats = (await (await fetch(`${url}/gateway/stats`)).json()) as { eppHosts: EppHost[] };
    return stats.eppHosts;
  }

  /** SIGTERM zone-a's EPP, wait for the exit, start it again; resolves once `url`'s gateway holds it healthy again. */
  async function restartZoneAEpp(url: string): Promise<void> {
    const epp = e2e.system.zone('zone-a').epp;
    await epp.stop(STOP_GRACE_MS);
    await epp.start();
    await eventually(
      async () => expect((await hostsOf(url)).find((h) => h.address === eppAddress('zone-a'))?.healthy).toBe(true),
      30_000,
      100,
    );
  }

  /** The traffic of one restart: 2 s before, the restart, 2 s after; with when the restart began and ended. */
  async function restartUnderTraffic(url: string): Promise<{ results: SentCompletion[]; from: number; to: number }> {
    const traffic = new OpenLoop(() => complete(e2e.system, url, { maxTokens: 8, timeoutMs: 60_000 }));
    let results: SentCompletion[];
    let from = 0;
    let to = 0;
    try {
      await sleep(2000);
      from = Date.now();
      await restartZoneAEpp(url);
      to = Date.now();
      await sleep(2000);
    } finally {
      results = await traffic.stop();
    }
    return { results, from, to };
  }

  it('costs no request, and zone-b’s EPP picks zone-a’s pods for zone-a’s gateway meanwhile', async () => {
    await setUp();
    const zoneBMetrics = e2e.system.zone('zone-b').eppPorts.metrics;
    const before = (await hostsOf(gatewayUrl)).map((h) => h.streams);
    const { results, from, to } = await restartUnderTraffic(gatewayUrl);
    const failed = results.filter((r) => r.status !== 200);
    const during = results.filter((r) => r.sentAt >= from && r.sentAt <= to);
    const servedLocal = during.filter((r) => r.zone === 'zone-a').length;
    const streams = (await hostsOf(gatewayUrl)).map((h, i) => h.streams - (before[i] ?? 0));
    console.log(
      `zone-a's only EPP restarted, zone-b's EPP as fallback: ${results.length} requests, ${failed.length} client errors; ` +
        `${during.length} sent during the restart (${((to - from) / 1000).toFixed(1)} s), ${servedLocal} of them served in zone-a; ` +
        `ext_proc streams to zone-a's EPP ${streams[0]}, to zone-b's ${streams[1]}`,
    );
    expect(results.length).toBeGreaterThan(150);
    expect(failed, summarize(failed)).toEqual([]);
    // The gateway's health checks moved new streams to zone-b's EPP while zone-a's drained and restarted.
    expect(streams[1]).toBeGreaterThan(20);
    expect(streams[0]).toBeGreaterThan(20);
    // zone-b's EPP picked for zone-a (the gateway's zone, from the metadata): zone-a's pods first.
    const decisions = (
      (await (await fetch(`http://127.0.0.1:${zoneBMetrics}/debug/decisions?limit=100`)).json()) as { decisions: DecisionSummary[] }
    ).decisions;
    expect(decisions.length).toBeGreaterThan(20);
    expect(
      decisions.every((d) => d.zone === 'zone-a' && d.gatewayZone === 'known'),
      JSON.stringify(decisions.slice(0, 3)),
    ).toBe(true);
    // zone-a's two servers have room for 20 requests a second of 8 tokens: the picks stay there.
    expect(decisions.filter((d) => d.rule === 'local' && d.entries[0]?.zone === 'zone-a').length).toBeGreaterThanOrEqual(
      decisions.length * 0.9,
    );
    expect(servedLocal, summarize(during)).toBeGreaterThanOrEqual(during.length * 0.9);
  }, 180_000);

  it('without the fallback priority (the control) the same restart costs requests', async () => {
    await setUp();
    const own = e2e.system.zone('zone-a').gatewayUrl;
    expect((await hostsOf(own)).map((h) => h.priority)).toEqual([0]);
    const { results } = await restartUnderTraffic(own);
    const failed = results.filter((r) => r.status !== 200);
    console.log(
      `the same restart without a fallback EPP: ${results.length} requests, ${failed.length} client errors (${summarize(failed)})`,
    );
    expect(failed.length).toBeGreaterThan(0);
  }, 180_000);
});
