import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startNatsServer, eventually, type NatsServerHandle } from '@spillway/testkit';
import type { RunningEpp } from '@spillway/epp';
import {
  EnvoyStream,
  TestPublisher,
  completion,
  destinationOf,
  envoyRequestMessages,
  extProcClient,
  startTestEpp,
  type PodSpec,
} from './helpers.js';

// The decision log: GET /debug/decisions on the metrics port explains the last picks.
const PODS: PodSpec[] = [
  { pod: 'a0', zone: 'zone-a', region: 'r1', address: '10.0.1.1:8000', waiting: 4 },
  { pod: 'b0', zone: 'zone-b', region: 'r1', address: '10.0.2.1:8000' },
];

let nats: NatsServerHandle;
let publisher: TestPublisher;
let epp: RunningEpp;

beforeAll(async () => {
  nats = await startNatsServer({ forcePrivate: true });
  publisher = await TestPublisher.connect(nats.url);
  epp = await startTestEpp(nats.url, 'zone-a', ['--region', 'r1']);
  await publisher.pods(PODS);
  await epp.ready;
  await eventually(() => expect(epp.core.fleet.pool('llama')?.readyCount).toBe(2));
});

afterAll(async () => {
  await epp?.close();
  await publisher?.close();
  await nats?.stop();
});

describe('GET /debug/decisions', () => {
  it("returns the last decisions, newest first, with every listed endpoint's cost components", async () => {
    const client = extProcClient(epp.grpcPort);
    try {
      for (const prompt of ['first', 'second']) {
        // Two samples with the queue: a backlog, not requests caught between two steps.
        for (let i = 0; i < 2; i++) {
          publisher.metrics(PODS[0] as PodSpec);
          publisher.metrics(PODS[1] as PodSpec);
          await new Promise((r) => setTimeout(r, 5));
        }
        const stream = new EnvoyStream(client);
        stream.send(envoyRequestMessages({ body: completion('llama', prompt) }));
        const [headers] = await stream.waitFor(2);
        // zone-a has a backlog of 4 (400 ms at the default rate): the request spills to zone-b.
        expect(destinationOf(headers).header?.split(',')[0]).toBe('10.0.2.1:8000');
        stream.close();
      }
    } finally {
      client.close();
    }
    const res = await fetch(`http://127.0.0.1:${epp.metricsPort}/debug/decisions?limit=1`);
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toBe('application/json');
    const body = (await res.json()) as {
      decisions: { rule: string; policy: string; entries: { pod: string; reason: string; cost: Record<string, number | boolean> }[] }[];
    };
    expect(body.decisions).toHaveLength(1);
    const [decision] = body.decisions;
    expect(decision?.rule).toBe('spill');
    expect(decision?.policy).toBe('cost');
    expect(decision?.entries.map((e) => [e.pod, e.reason])).toEqual([
      ['b0', 'spill'],
      ['a0', 'local-fallback'],
    ]);
    const local = decision?.entries[1]?.cost as Record<string, number>;
    expect(local).toMatchObject({ rttMs: 0, biasMs: 0, displacementMs: 0, full: false, running: 0, slots: 256, aheadMs: 0 });
    // The backlog, then half a step to be admitted (a step of an idle pod, slowed by its KV use).
    expect(local['waitMs']).toBeCloseTo(400 + (local['stepMs'] as number) / 2, 1);
    expect(local['prefillMsPerToken']).toBeCloseTo(0.05, 4);
    const remote = decision?.entries[0]?.cost as Record<string, number>;
    expect(remote).toMatchObject({ rttMs: 1, biasMs: 8, stale: false });
    // Every component the total is made of is listed.
    for (const cost of [local, remote]) {
      const sum = ['waitMs', 'prefillMs', 'loraMs', 'rttMs', 'biasMs', 'displacementMs', 'uncertaintyMs'].reduce(
        (n, k) => n + (cost[k] ?? 0),
        0,
      );
      expect(Math.abs(sum - (cost['totalMs'] as number))).toBeLessThan(0.05);
    }
  });

  it('answers bad limits with the default, and other paths and methods with 404', async () => {
    const base = `http://127.0.0.1:${epp.metricsPort}`;
    const all = (await (await fetch(`${base}/debug/decisions?limit=abc`)).json()) as { decisions: unknown[] };
    expect(all.decisions.length).toBeGreaterThan(0);
    expect((await fetch(`${base}/debug/decisions`, { method: 'POST' })).status).toBe(404);
    expect((await fetch(`${base}/debug/other`)).status).toBe(404);
  });
});
