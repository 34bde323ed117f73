// End-to-end: a request's life is not its ext_proc stream's. Real processes on loopback — NATS, three
// simulators of one zone (two running at once each), the zone's collector, two EPPs of the zone
// sharing state, and development gateways in their default mode, which is the shipped Envoy config
// on Envoy 1.38: response headers only, and the ext_proc stream closed right after the
// response-headers reply, while a streamed generation runs on.
//
// The pods' batch size is learnt from samples (a burst queues at each), then the queues drain. The
// collector is stopped so no sample can show what happens next (an event gap: the EPPs estimate
// from their last samples and their charges), and six long streamed requests go to two of the pods
// (a gateway whose subset names only those two). While they generate, the EPPs' next picks avoid
// those pods; once they finished and the collector is back, a sample shows them gone and the picks
// spread again. The second EPP never saw the six: it learnt them from the first's shared state.
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { eventually, freePort } from '@spillway/testkit';
import { httpOk, ManagedProcess, waitUntil } from '../../infra/demo/process.js';
import { MODEL } from '../../infra/demo/system.js';
import { complete, summarize, useSystem, type Completion } from './helpers.js';

const ZONE = 'zone-a';
/** At --time-scale 2 about 10 ms a token: a request of 300 takes about 3 s, a third one on a pod twice that. */
const LONG_TOKENS = 300;

// The bound of a started request is a backstop; here it is pushed far out, so only samples end the six.
// Flow control is off: the six are meant to reach the two pods, two of them to wait there. With it
// on, the EPP holds those two when it expects them to wait longer than its hold threshold, which
// depends on the completion rate the pods' last samples measured; and with the collector stopped
// no sample makes room, so they are answered 503 after `maxHoldMs` (flow control has its own tests).
const configDir = mkdtempSync(join(tmpdir(), 'spillway-e2e-lifetime-'));
const eppConfig = join(configDir, 'epp.yaml');
writeFileSync(eppConfig, 'charges:\n  minMs: 180000\nflowControl:\n  enabled: false\n');

interface PodState {
  pod: string;
  address: string;
  running: number | null;
  waiting: number | null;
  inFlight: number;
  started: number;
  batchSize: number | null;
}

async function pods(metricsPort: number): Promise<PodState[]> {
  const response = await fetch(`http://127.0.0.1:${metricsPort}/api/state`, { signal: AbortSignal.timeout(5_000) });
  return ((await response.json()) as { pods: { items: PodState[] } }).pods.items;
}

/** A streamed completion: resolves at its response headers; `done` when its body has all come. */
async function openStream(gatewayUrl: string, i: number): Promise<{ status: number; served: string | null; done: Promise<string> }> {
  const response = await fetch(`${gatewayUrl}/v1/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: MODEL, prompt: `long story ${i}: once upon a time`, max_tokens: LONG_TOKENS, stream: true }),
    signal: AbortSignal.timeout(120_000),
  });
  const done = response.text();
  // Awaited by the scenario; a failed assertion before that must not leave it unhandled.
  done.catch(() => undefined);
  return { status: response.status, served: response.headers.get('x-spillway-served-endpoint'), done };
}

/** `n` short requests one after the other (each done before the next: it never loads the next one's pick). */
async function probes(gatewayUrl: string, n: number, system: Parameters<typeof complete>[0]): Promise<Completion[]> {
  const results: Completion[] = [];
  for (let i = 0; i < n; i++) results.push(await complete(system, gatewayUrl, { maxTokens: 4 }));
  return results;
}

describe.sequential('e2e: requests outlive their ext_proc streams (Envoy 1.38, response headers only)', () => {
  const e2e = useSystem('lifetime', {
    zones: [{ zone: ZONE, region: 'r1', servers: 3 }],
    natsTopology: 'single',
    simArgs: ['--max-num-seqs', '2', '--time-scale', '2'],
    eppArgs: ['--config', eppConfig],
  });
  const extra: ManagedProcess[] = [];
  let second: { metrics: number; gatewayUrl: string } | undefined;
  let pinnedUrl = '';
  let pair: string[] = [];

  afterAll(async () => {
    await Promise.all(extra.map((p) => p.stop().catch(() => undefined)));
    extra.forEach((p) => p.close());
    rmSync(configDir, { recursive: true, force: true });
  });

  /** A process of the test's own, stopped with the system. */
  async function launch(name: string, command: string, args: string[], ready: () => Promise<void>): Promise<void> {
    const p = new ManagedProcess({ name, command, args, logFile: join(e2e.system.options.dir, 'logs', `${name}.log`), ready });
    extra.push(p);
    await p.start();
  }

  /** The second EPP of the zone (the first's flags, its own ports), a gateway to it, and a gateway pinned to two pods. */
  async function setUp(): Promise<void> {
    if (second !== undefined) return;
    const zone = e2e.system.zone(ZONE);
    const dir = e2e.system.options.dir;
    const ports = { grpc: await freePort(), health: await freePort(), metrics: await freePort() };
    const args = [...zone.epp.spec.args];
    for (const [flag, value] of [
      ['--grpc-port', ports.grpc],
      ['--health-port', ports.health],
      ['--metrics-port', ports.metrics],
    ] as const)
      args[args.indexOf(flag) + 1] = String(value);
    await launch(`epp-${ZONE}-2`, zone.epp.spec.command, args, () =>
      waitUntil(`epp-${ZONE}-2`, () => httpOk(`http://127.0.0.1:${ports.metrics}/readyz`), 60_000),
    );
    const gateway = async (name: string, epp: number, endpoints: string): Promise<string> => {
      const port = await freePort();
      const gatewayArgs = [...zone.gateway.spec.args];
      gatewayArgs[gatewayArgs.indexOf('--epp') + 1] = `127.0.0.1:${epp}`;
      gatewayArgs[gatewayArgs.indexOf('--port') + 1] = String(port);
      gatewayArgs[gatewayArgs.indexOf('--endpoints') + 1] = endpoints;
      await launch(name, zone.gateway.spec.command, gatewayArgs, () =>
        waitUntil(name, () => httpOk(`http://127.0.0.1:${port}/gateway/stats`), 20_000),
      );
      return `http://127.0.0.1:${port}`;
    };
    second = { metrics: ports.metrics, gatewayUrl: await gateway(`gateway-${ZONE}-2`, ports.grpc, join(dir, 'endpoints-all.json')) };
    // Its subset hint names the zone's first two pods only: the six long requests go there, through the first EPP.
    const sims = e2e.system.simsOf(ZONE);
    pair = sims.slice(0, 2).map((s) => s.address);
    const pinned = join(dir, 'endpoints-pinned.json');
    writeFileSync(pinned, JSON.stringify(sims.slice(0, 2).map((s) => ({ pod: s.pod, address: s.address, zone: s.zone }))));
    pinnedUrl = await gateway(`gateway-${ZONE}-pinned`, zone.eppPorts.grpc, pinned);
  }

  /** Queues at every pod for a few samples, so both EPPs learn each pod's batch size (2); then the queues drain. */
  async function learnBatchSizes(): Promise<void> {
    const burst = e2e.system.simsOf(ZONE).flatMap((sim) =>
      Array.from({ length: 4 }, (_, i) =>
        fetch(`http://${sim.address}/v1/completions`, {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify({ model: MODEL, prompt: `burst ${i}`, max_tokens: 100 }),
        }).then((r) => r.text()),
      ),
    );
    await Promise.all(burst);
    for (const port of [e2e.system.zone(ZONE).eppPorts.metrics, (second as { metrics: number }).metrics]) {
      await eventually(async () => {
        const state = await pods(port);
        expect(state.map((p) => p.batchSize)).toEqual([2, 2, 2]);
        expect(state.every((p) => p.running === 0 && p.waiting === 0 && p.inFlight === 0)).toBe(true);
      }, 30_000);
    }
  }

  /**
   * The scenario, with the next picks asked of the EPP behind `probeUrl` (its metrics on
   * `probePort`): the six long requests always go through the first EPP.
   */
  async function scenario(probeUrl: string, probePort: number): Promise<void> {
    const collector = e2e.system.zone(ZONE).collector;
    await collector.stop();
    try {
      const six = await Promise.all(Array.from({ length: 6 }, (_, i) => openStream(pinnedUrl, i)));
      expect(six.map((s) => s.status)).toEqual([200, 200, 200, 200, 200, 200]);
      expect(six.every((s) => s.served !== null && pair.includes(s.served))).toBe(true);
      // Their streams are closed (the gateway closes each after the response-headers reply); they generate on.
      // The probing EPP (the picker or its peer) must know of all six before it is asked: a peer
      // learns of them from the picker's state batches, whose delivery takes what the machine lets it.
      await eventually(async () => {
        const held = (await pods(probePort)).filter((p) => pair.includes(p.address));
        expect(held.reduce((n, p) => n + p.started, 0)).toBe(6);
      }, 10_000);
      const during = await probes(probeUrl, 6, e2e.system);
      expect(
        during.every((r) => r.status === 200 && r.served !== undefined && !pair.includes(r.served)),
        summarize(during),
      ).toBe(true);
      // The six finish; no sample has said so yet: the picks still avoid those pods.
      await Promise.all(six.map((s) => s.done));
      const unseen = await probes(probeUrl, 3, e2e.system);
      expect(
        unseen.every((r) => r.status === 200 && r.served !== undefined && !pair.includes(r.served)),
        summarize(unseen),
      ).toBe(true);
    } finally {
      await collector.start();
    }
    // A sample shows them gone: their charges end, and the picks spread over the zone again.
    await eventually(async () => expect((await pods(probePort)).map((p) => p.inFlight)).toEqual([0, 0, 0]), 30_000);
    const after = await probes(probeUrl, 15, e2e.system);
    expect(
      after.every((r) => r.status === 200),
      summarize(after),
    ).toBe(true);
    expect(
      after.some((r) => r.served !== undefined && pair.includes(r.served)),
      summarize(after),
    ).toBe(true);
  }

  it('the EPP that picked them avoids the two pods until a sample shows the requests gone, then stops avoiding them', async () => {
    await setUp();
    await learnBatchSizes();
    const zone = e2e.system.zone(ZONE);
    await scenario(zone.gatewayUrl, zone.eppPorts.metrics);
  }, 180_000);

  it('its peer, which shares its state, avoids them too', async () => {
    await setUp();
    await learnBatchSizes();
    const peer = second as { metrics: number; gatewayUrl: string };
    await scenario(peer.gatewayUrl, peer.metrics);
  }, 180_000);
});
