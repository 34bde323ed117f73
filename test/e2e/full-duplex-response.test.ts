// End-to-end: response bodies streamed through the EPP (`--response-body-mode full-duplex`, with
// response trailers sent, as Envoy requires for that mode). Real processes: NATS, a simulator, its
// collector, the EPP and the development gateway; between the gateway and the simulator a
// recording proxy in this process keeps the bytes the model server sent. A streamed completion
// reaches the client byte for byte as the model server sent it, the EPP holds the request in flight
// while it generates and releases it at its last chunk (its completion, seen here: not a sample, not
// a bound), and the output-token histogram is filled from the usage of the final SSE event.
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, request as httpRequest, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { eventually, freePort, startNatsServer, type NatsServerHandle } from '@spillway/testkit';
import { httpOk, ManagedProcess, waitUntil } from '../../infra/demo/process.js';
import { parseExposition, sample } from './helpers.js';

const ROOT = resolve(fileURLToPath(new URL('../..', import.meta.url)));
const bin = (service: string, name: string) => join(ROOT, 'services', service, 'bin', `${name}.js`);
const MODEL = 'llama';
const POOL = 'llama';
const ZONE = 'zone-a';

/** Forwards every request to `target`, keeping the body of each completion response as it came. */
class RecordingProxy {
  readonly completions: Buffer[] = [];
  private server: Server | undefined;

  constructor(private readonly target: { host: string; port: number }) {}

  async listen(): Promise<string> {
    const server = createServer((req, res) => {
      const upstream = httpRequest({ ...this.target, method: req.method, path: req.url, headers: req.headers }, (answer) => {
        res.writeHead(answer.statusCode ?? 502, answer.headers);
        const chunks: Buffer[] = [];
        answer.on('data', (chunk: Buffer) => {
          chunks.push(chunk);
          res.write(chunk);
        });
        answer.on('end', () => {
          if (req.url?.endsWith('/completions')) this.completions.push(Buffer.concat(chunks));
          res.end();
        });
      });
      upstream.on('error', () => res.destroy());
      req.pipe(upstream);
    });
    this.server = server;
    await new Promise<void>((done) => server.listen(0, '127.0.0.1', done));
    return `127.0.0.1:${(server.address() as AddressInfo).port}`;
  }

  async close(): Promise<void> {
    this.server?.closeAllConnections();
    await new Promise<void>((done) => (this.server ? this.server.close(() => done()) : done()));
  }
}

describe.sequential('e2e: response bodies streamed through the EPP (FULL_DUPLEX_STREAMED)', () => {
  const dir = mkdtempSync(join(tmpdir(), 'spillway-e2e-full-duplex-'));
  const processes: ManagedProcess[] = [];
  let nats: NatsServerHandle;
  let proxy: RecordingProxy;
  let collector: ManagedProcess;
  let gatewayUrl = '';
  let metricsPort = 0;
  let served = '';

  async function launch(name: string, args: string[], ready: () => Promise<void>): Promise<ManagedProcess> {
    const p = new ManagedProcess({ name, command: process.execPath, args, logFile: join(dir, `${name}.log`), ready });
    processes.push(p);
    await p.start();
    return p;
  }

  beforeAll(async () => {
    nats = await startNatsServer({ forcePrivate: true });
    const sim = new ManagedProcess({
      name: 'sim',
      command: process.execPath,
      args: [bin('sim', 'spillway-sim'), '--port', '0', '--model', MODEL, '--time-scale', '2', '--log-level', 'info'],
      logFile: join(dir, 'sim.log'),
      ready: async () => undefined,
    });
    processes.push(sim);
    await sim.start();
    const url = new URL((JSON.parse(await sim.waitForLine((l) => l.includes('"msg":"listening"'), 20_000)) as { url: string }).url);
    proxy = new RecordingProxy({ host: url.hostname, port: Number(url.port) });
    served = await proxy.listen();
    // The model server is known by the proxy's address: the collector scrapes it, the gateway sends to it.
    const endpoints = join(dir, 'endpoints.json');
    writeFileSync(endpoints, JSON.stringify([{ pod: 'sim-0', address: served, zone: ZONE, region: 'r1', engine: 'vllm' }]));
    const collectorMetrics = await freePort();
    collector = await launch(
      'collector',
      [
        bin('collector', 'spillway-collector'),
        ...['--nats', nats.url, '--pool', POOL, '--zone', ZONE, '--region', 'r1', '--endpoints', endpoints],
        ...['--metrics-port', String(collectorMetrics), '--log-level', 'info'],
      ],
      () => waitUntil('collector', () => httpOk(`http://127.0.0.1:${collectorMetrics}/metrics`), 20_000),
    );
    // Ports 0: the EPP's own "listening" line names what it bound, so no other process can hold them.
    const epp = await launch(
      'epp',
      [
        bin('epp', 'spillway-epp'),
        ...['--pool', POOL, '--zone', ZONE, '--region', 'r1', '--nats', nats.url, '--host', '127.0.0.1'],
        ...['--grpc-port', '0', '--health-port', '0', '--metrics-port', '0', '--log-level', 'info'],
      ],
      async () => undefined,
    );
    const listening = JSON.parse(await epp.waitForLine((l) => l.includes('"msg":"listening"'), 60_000)) as {
      grpcPort: number;
      metricsPort: number;
    };
    const grpc = listening.grpcPort;
    metricsPort = listening.metricsPort;
    await waitUntil('epp', () => httpOk(`http://127.0.0.1:${metricsPort}/readyz`), 60_000);
    const port = await freePort();
    await launch(
      'gateway',
      [
        bin('gateway', 'spillway-gateway'),
        ...['--epp', `127.0.0.1:${grpc}`, '--zone', ZONE, '--endpoints', endpoints, '--port', String(port)],
        ...['--response-body-mode', 'full-duplex', '--response-trailer-mode', 'send', '--log-level', 'info'],
      ],
      () => waitUntil('gateway', () => httpOk(`http://127.0.0.1:${port}/gateway/stats`), 20_000),
    );
    gatewayUrl = `http://127.0.0.1:${port}`;
    // Once the EPP holds the pod ready, the samples stop: nothing but the completion can end the request's charge.
    await eventually(async () => expect((await inFlight()).ready).toBe(true), 30_000);
    await collector.stop();
  }, 120_000);

  afterAll(async () => {
    for (const p of processes.reverse()) await p.stop().catch(() => undefined);
    processes.forEach((p) => p.close());
    await proxy?.close();
    await nats?.stop();
    rmSync(dir, { recursive: true, force: true });
  }, 60_000);

  async function inFlight(): Promise<{ ready: boolean; inFlight: number; started: number }> {
    const state = (await (await fetch(`http://127.0.0.1:${metricsPort}/api/state`)).json()) as {
      pods: { items: { ready: boolean; inFlight: number; started: number }[] };
    };
    return state.pods.items[0] ?? { ready: false, inFlight: -1, started: -1 };
  }

  async function metric(name: string, labels: Record<string, string> = {}): Promise<number> {
    const text = await (await fetch(`http://127.0.0.1:${metricsPort}/metrics`)).text();
    return sample(parseExposition(text), name, labels) ?? 0;
  }

  const endedWithoutCompletion = async (): Promise<number> => {
    let n = 0;
    for (const reason of ['samples', 'bound', 'cap']) n += await metric('spillway_charges_ended_total', { reason });
    return n;
  };

  it('the client gets the model server’s bytes; the EPP holds the request while it generates and releases it at its completion', async () => {
    const labels = { model_name: 'other', target_model_name: 'other' };
    const [outputBefore, countBefore, endedBefore] = [
      await metric('inference_objective_output_tokens_sum', labels),
      await metric('inference_objective_output_tokens_count', labels),
      await endedWithoutCompletion(),
    ];
    const response = await fetch(`${gatewayUrl}/v1/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({
        model: MODEL,
        prompt: 'Tell me about spillways.',
        max_tokens: 64,
        stream: true,
        stream_options: { include_usage: true },
      }),
    });
    expect(response.status).toBe(200);
    expect(response.headers.get('x-spillway-served-endpoint')).toBe(served);
    const reader = (response.body as ReadableStream<Uint8Array>).getReader();
    const received: Uint8Array[] = [];
    const first = await reader.read();
    received.push(first.value as Uint8Array);
    // Generating: the EPP holds it, started (its response began), in flight.
    expect(await inFlight()).toMatchObject({ inFlight: 1, started: 1 });
    for (let next = await reader.read(); !next.done; next = await reader.read()) received.push(next.value);
    const body = Buffer.concat(received);
    expect(body.toString('utf8')).toContain('data: [DONE]');
    expect(body.toString('utf8')).toContain('"usage"');
    // Byte for byte what the model server sent.
    expect(proxy.completions.length).toBe(1);
    expect(body.equals(proxy.completions[0] as Buffer)).toBe(true);
    // Released at its completion (no sample can have shown it gone, no bound has passed).
    await eventually(async () => expect(await inFlight()).toMatchObject({ inFlight: 0, started: 0 }), 5_000);
    expect(await endedWithoutCompletion()).toBe(endedBefore);
    // Its output tokens, from the usage of the final SSE event.
    const usage = /"completion_tokens":(\d+)/.exec(body.toString('utf8'));
    expect(Number(usage?.[1])).toBe(64);
    await eventually(async () => expect(await metric('inference_objective_output_tokens_count', labels)).toBe(countBefore + 1), 5_000);
    expect(await metric('inference_objective_output_tokens_sum', labels)).toBe(outputBefore + 64);
    expect(await metric('inference_objective_running_requests', { model_name: 'other' })).toBe(0);
  }, 60_000);
});
