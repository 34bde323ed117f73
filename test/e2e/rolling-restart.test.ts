// End-to-end: a rolling restart of a zone's two EPPs under steady traffic costs no request. One
// zone of two simulators, its collector, two EPPs of the zone and the development gateway pointed
// at both, as the shipped Envoy config points at a zone's EPPs (one STRICT_DNS name resolving to
// each; health-checked every 2 s, unhealthy after 2 failures, fail-closed). Open-loop traffic of
// 20 requests a second runs throughout; each EPP in turn gets SIGTERM, drains (docs/operations.md,
// "Restarts"), exits and starts again, and the next one goes only once the gateway holds it healthy
// again, as a Deployment with maxUnavailable 0 and a PodDisruptionBudget of minAvailable 1 would.
// Then the same restart of one EPP with the drain delay at 0 (what the EPP did before: close at
// once) shows that the test sees what a restart costs.
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { eventually, freePort } from '@spillway/testkit';
import { httpOk, ManagedProcess, waitUntil } from '../../infra/demo/process.js';
import { complete, OpenLoop, sleep, summarize, useSystem, type Completion } from './helpers.js';

const ZONE = 'zone-a';
/** SIGTERM to exit: the drain delay (6 s by default) and streams in flight, with room to spare. */
const STOP_GRACE_MS = 60_000;

interface Epp {
  process: ManagedProcess;
  grpc: number;
  metrics: number;
}

describe.sequential('e2e: rolling restart of a zone’s two EPPs under traffic', () => {
  const e2e = useSystem('rolling', { zones: [{ zone: ZONE, region: 'r1', servers: 2 }], natsTopology: 'single' });
  const epps: Epp[] = [];
  let gatewayUrl = '';
  let gateway: ManagedProcess | undefined;

  /** The zone's EPPs: the system's, and a second one started with the same flags on ports of its own. */
  async function setUp(): Promise<void> {
    if (gateway !== undefined) return;
    const zone = e2e.system.zone(ZONE);
    const dir = e2e.system.options.dir;
    epps.push({ process: zone.epp, grpc: zone.eppPorts.grpc, metrics: zone.eppPorts.metrics });
    const ports = { grpc: await freePort(), health: await freePort(), metrics: await freePort() };
    const args = [...zone.epp.spec.args];
    for (const [flag, value] of [
      ['--grpc-port', ports.grpc],
      ['--health-port', ports.health],
      ['--metrics-port', ports.metrics],
    ] as const)
      args[args.indexOf(flag) + 1] = String(value);
    const second = new ManagedProcess({
      name: `epp-${ZONE}-2`,
      command: zone.epp.spec.command,
      args,
      logFile: join(dir, 'logs', `epp-${ZONE}-2.log`),
      ready: () => waitUntil(`epp-${ZONE}-2`, () => httpOk(`http://127.0.0.1:${ports.metrics}/readyz`), 60_000),
    });
    await second.start();
    epps.push({ process: second, grpc: ports.grpc, metrics: ports.metrics });
    const port = await freePort();
    const gatewayArgs = [...zone.gateway.spec.args];
    gatewayArgs[gatewayArgs.indexOf('--epp') + 1] = epps.map((e) => `127.0.0.1:${e.grpc}`).join(',');
    gatewayArgs[gatewayArgs.indexOf('--port') + 1] = String(port);
    gateway = new ManagedProcess({
      name: `gateway-${ZONE}-both`,
      command: zone.gateway.spec.command,
      args: gatewayArgs,
      logFile: join(dir, 'logs', `gateway-${ZONE}-both.log`),
      ready: () => waitUntil('gateway', () => httpOk(`http://127.0.0.1:${port}/gateway/stats`), 20_000),
    });
    await gateway.start();
    gatewayUrl = `http://127.0.0.1:${port}`;
    await eventually(async () => expect((await hosts()).every((h) => h.healthy)).toBe(true), 20_000);
  }

  afterAll(async () => {
    await gateway?.stop();
    await epps[1]?.process.stop(STOP_GRACE_MS);
    gateway?.close();
    epps[1]?.process.close();
  }, STOP_GRACE_MS + 10_000);

  async function hosts(): Promise<{ address: string; healthy: boolean }[]> {
    const stats = (await (await fetch(`${gatewayUrl}/gateway/stats`)).json()) as { eppHosts: { address: string; healthy: boolean }[] };
    return stats.eppHosts;
  }

  /** SIGTERM, wait for the exit, start again on the same ports; resolves once the gateway holds it healthy again. */
  async function restart(epp: Epp): Promise<void> {
    await epp.process.stop(STOP_GRACE_MS);
    await epp.process.start();
    const address = `127.0.0.1:${epp.grpc}`;
    await eventually(async () => expect((await hosts()).find((h) => h.address === address)?.healthy).toBe(true), 30_000, 100);
  }

  it('costs no request: each EPP drains, restarts and is back before the next goes (20 requests a second throughout)', async () => {
    await setUp();
    const started = Date.now();
    const traffic = new OpenLoop(() => complete(e2e.system, gatewayUrl, { maxTokens: 8, timeoutMs: 60_000 }));
    let results: Completion[];
    try {
      await sleep(2000);
      for (const epp of epps) await restart(epp);
      await sleep(2000);
    } finally {
      results = await traffic.stop();
    }
    const seconds = (Date.now() - started) / 1000;
    const failed = results.filter((r) => r.status !== 200);
    console.log(
      `rolling restart of 2 EPPs: ${results.length} requests over ${seconds.toFixed(1)} s (${(results.length / seconds).toFixed(1)}/s), ${failed.length} client errors`,
    );
    expect(results.length).toBeGreaterThan(200);
    expect(failed, summarize(failed)).toEqual([]);
    // Both EPPs served, before and after their restarts.
    for (const epp of epps) {
      const text = await (await fetch(`http://127.0.0.1:${epp.metrics}/metrics`)).text();
      expect(text).toMatch(/spillway_requests_total\{outcome="routed"\} [1-9]/);
    }
  }, 180_000);

  it('without the drain delay (closing at once, as before) the same restart of one EPP costs requests', async () => {
    await setUp();
    const [first] = epps as [Epp];
    const args = first.process.spec.args;
    args.push('--drain-delay-ms', '0');
    await restart(first);
    const traffic = new OpenLoop(() => complete(e2e.system, gatewayUrl, { maxTokens: 8, timeoutMs: 60_000 }));
    let results: Completion[];
    try {
      await sleep(2000);
      await restart(first);
      await sleep(1000);
    } finally {
      results = await traffic.stop();
      args.splice(args.length - 2, 2);
    }
    const failed = results.filter((r) => r.status !== 200);
    console.log(`the same restart without the drain delay: ${results.length} requests, ${failed.length} client errors`);
    expect(failed.length).toBeGreaterThan(0);
  }, 120_000);
});
