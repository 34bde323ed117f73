import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startNatsServer, eventually, type NatsServerHandle } from '@spillway/testkit';
import { loadEppConfig, startEpp, type RunningEpp } from '@spillway/epp';
import {
  EnvoyStream,
  POOL,
  TestPublisher,
  bodyMessage,
  capturingLogger,
  completion,
  destinationOf,
  envoyRequestMessages,
  extProcClient,
  immediateOf,
  responseHeadersMessage,
  type PodSpec,
} from './helpers.js';

// The EPP's metrics after real traffic: the request histograms observed, token counts from the
// response usage when the response body streams through, labels as docs/metrics.md documents them,
// the model labels bounded by the config; and the log: no line per request at info, one summary.
const PODS: PodSpec[] = [
  { pod: 'a0', zone: 'zone-a', region: 'r1', address: '10.0.1.1:8000' },
  { pod: 'b0', zone: 'zone-b', region: 'r1', address: '10.0.2.1:8000' },
];
const utf8 = new TextEncoder();

let nats: NatsServerHandle;
let publisher: TestPublisher;
let epp: RunningEpp;
let dir: string;
const { logger, lines } = capturingLogger('info');

beforeAll(async () => {
  nats = await startNatsServer({ forcePrivate: true });
  publisher = await TestPublisher.connect(nats.url);
  dir = mkdtempSync(join(tmpdir(), 'spillway-metrics-'));
  const path = join(dir, 'epp.yaml');
  writeFileSync(
    path,
    'modelRewrites:\n  - match: llama\n    targets: [{ model: llama-v2 }]\nobjectives: { interactive: { priority: 10 } }\n',
  );
  const config = loadEppConfig(
    [
      '--pool',
      POOL,
      '--zone',
      'zone-a',
      '--region',
      'r1',
      '--nats',
      nats.url,
      '--host',
      '127.0.0.1',
      '--grpc-port',
      '0',
      '--health-port',
      '0',
      '--metrics-port',
      '0',
      '--config',
      path,
    ],
    {},
  );
  epp = await startEpp(config!, { logger, tickMs: 50, summaryMs: 300 });
  await publisher.pods(PODS);
  await epp.ready;
  await eventually(() => expect(epp.core.fleet.pool(POOL)?.readyCount).toBe(2));
});

afterAll(async () => {
  await epp?.close();
  await publisher?.close();
  await nats?.stop();
  rmSync(dir, { recursive: true, force: true });
});

interface Sample {
  name: string;
  labels: Record<string, string>;
  value: number;
}

/** The samples of a Prometheus text exposition (the EPP writes one sample per line). */
async function scrape(): Promise<Sample[]> {
  const text = await (await fetch(`http://127.0.0.1:${epp.metricsPort}/metrics`)).text();
  const samples: Sample[] = [];
  for (const line of text.split('\n')) {
    const match = /^([a-zA-Z_:][\w:]*)(?:\{(.*)\})? (\S+)$/.exec(line);
    if (!match) continue;
    const labels: Record<string, string> = {};
    for (const pair of (match[2] ?? '').matchAll(/(\w+)="((?:[^"\\]|\\.)*)"/g)) labels[pair[1] as string] = pair[2] as string;
    samples.push({ name: match[1] as string, labels, value: Number(match[3]) });
  }
  return samples;
}

function value(samples: Sample[], name: string, labels: Record<string, string> = {}): number | undefined {
  return samples.find((s) => s.name === name && Object.entries(labels).every(([k, v]) => s.labels[k] === v))?.value;
}

/** One request, then the response as Envoy streams it when response bodies go to the EPP. */
async function roundTrip(
  model: string,
  response: { status: number; served?: string; body?: string[] },
  headers: Record<string, string> = {},
): Promise<string> {
  const client = extProcClient(epp.grpcPort);
  const stream = new EnvoyStream(client);
  try {
    stream.send(envoyRequestMessages({ body: completion(model, 'Count to three.'), headers }));
    const [routed] = await stream.waitFor(2);
    const destination = destinationOf(routed).header as string;
    stream.send([responseHeadersMessage(response.status, response.served ?? destination.split(',')[0])]);
    const chunks = response.body ?? [];
    chunks.forEach((chunk, i) => stream.send([bodyMessage('responseBody', utf8.encode(chunk), i === chunks.length - 1)]));
    await stream.waitFor(3 + chunks.length);
    return destination;
  } finally {
    stream.close();
    client.close();
  }
}

const SSE = [
  'data: {"id":"c1","model":"llama-v2","choices":[{"index":0,"text":"one"}],"usage":null}\n\n',
  'data: {"id":"c1","model":"llama-v2","choices":[{"index":0,"text":" two three"}],"usage":null}\n\n',
  'data: {"id":"c1","model":"llama-v2","choices":[],"usage":{"prompt_tokens":12,"completion_tokens":8,"total_tokens":20,"prompt_tokens_details":{"cached_tokens":4}}}\n\n',
  'data: [DONE]\n\n',
];

describe('metrics after traffic', () => {
  // The reference: the Gateway API Inference Extension's EPP (now in llm-d), whose metric names and labels the EPP keeps.
  it('observes sizes, durations and tokens with the reference labels: model_name asked for, target_model_name rewritten', async () => {
    await roundTrip('llama', { status: 200, body: SSE }, { 'x-gateway-inference-objective': 'interactive' });
    // Headers-only response mode: no body, so no token figures, but size and duration all the same.
    await roundTrip('llama', { status: 200 });
    const pair = { model_name: 'llama', target_model_name: 'llama-v2' };
    await eventually(async () => expect(value(await scrape(), 'inference_objective_request_duration_seconds_count', pair)).toBe(2));
    const samples = await scrape();
    expect(value(samples, 'inference_objective_request_total', { ...pair, priority: '10' })).toBe(1);
    expect(value(samples, 'inference_objective_request_total', { ...pair, priority: '0' })).toBe(1);
    expect(value(samples, 'inference_objective_request_sizes_count', pair)).toBe(2);
    expect(value(samples, 'inference_objective_request_sizes_sum', pair)).toBe(
      2 * utf8.encode(completion('llama', 'Count to three.')).length,
    );
    expect(value(samples, 'inference_objective_request_duration_seconds_sum', pair)).toBeGreaterThan(0);
    expect(value(samples, 'inference_objective_response_sizes_count', pair)).toBe(1);
    expect(value(samples, 'inference_objective_response_sizes_sum', pair)).toBe(utf8.encode(SSE.join('')).length);
    expect(value(samples, 'inference_objective_input_tokens_sum', pair)).toBe(12);
    expect(value(samples, 'inference_objective_output_tokens_sum', pair)).toBe(8);
    expect(value(samples, 'inference_objective_prompt_cached_tokens_sum', pair)).toBe(4);
    expect(value(samples, 'inference_objective_normalized_time_per_output_token_seconds_count', pair)).toBe(1);
    // Running: by the model asked for, back to 0 once the streams ended.
    expect(value(samples, 'inference_objective_running_requests', { model_name: 'llama' })).toBe(0);
  });

  it('counts errors with the reference error codes, and model server errors', async () => {
    const client = extProcClient(epp.grpcPort);
    const rejected = async (options: Parameters<typeof envoyRequestMessages>[0]) => {
      const stream = new EnvoyStream(client);
      stream.send(envoyRequestMessages(options));
      const [reply] = await stream.waitFor(1);
      stream.close();
      return immediateOf(reply)?.status;
    };
    try {
      expect(await rejected({ body: 'not json' })).toBe(400);
      expect(await rejected({ body: completion('llama'), subset: ['10.9.9.9:8000'] })).toBe(503);
    } finally {
      client.close();
    }
    await roundTrip('llama', { status: 500 });
    await eventually(async () =>
      expect(value(await scrape(), 'inference_objective_request_duration_seconds_count', { model_name: 'llama' })).toBe(3),
    );
    const samples = await scrape();
    expect(
      value(samples, 'inference_objective_request_error_total', {
        model_name: 'other',
        target_model_name: 'other',
        error_code: 'BadRequest',
      }),
    ).toBe(1);
    expect(
      value(samples, 'inference_objective_request_error_total', {
        model_name: 'llama',
        target_model_name: 'llama-v2',
        error_code: 'ServiceUnavailable',
      }),
    ).toBe(1);
    expect(
      value(samples, 'inference_objective_request_error_total', {
        model_name: 'llama',
        target_model_name: 'llama-v2',
        error_code: 'ModelServerError',
      }),
    ).toBe(1);
  });

  it('keeps model labels to the configured models and "other", however many models clients name', async () => {
    for (let i = 0; i < 20; i++) await roundTrip(`client-model-${i}`, { status: 200, body: SSE });
    // Observed when the EPP sees each stream end, which may come just after the client's.
    await eventually(async () =>
      expect(value(await scrape(), 'inference_objective_output_tokens_count', { model_name: 'other', target_model_name: 'other' })).toBe(
        20,
      ),
    );
    const samples = await scrape();
    const modelLabels = new Set(
      samples.flatMap((s) => [s.labels['model_name'], s.labels['target_model_name']]).filter((v) => v !== undefined),
    );
    expect([...modelLabels].sort()).toEqual(['llama', 'llama-v2', 'other']);
    expect(value(samples, 'inference_objective_request_total', { model_name: 'other', target_model_name: 'other', priority: '0' })).toBe(
      20,
    );
    // Every label name is a documented one (docs/metrics.md).
    const names = new Set(
      samples.filter((s) => !s.name.startsWith('nodejs_') && !s.name.startsWith('process_')).flatMap((s) => Object.keys(s.labels)),
    );
    for (const name of names)
      expect([
        'model_name',
        'target_model_name',
        'priority',
        'error_code',
        'outcome',
        'status',
        'reason',
        'result',
        'zone',
        'name',
        'le',
        'commit',
        'build_ref',
        'hash',
        'direction',
        'origin',
        'event',
        'tokens',
        'tier',
        'credited',
        'rank',
        'phase',
        'state',
      ]).toContain(name);
  });

  it('exports the build from package.json', async () => {
    const { version } = (await import('../package.json', { with: { type: 'json' } })).default as { version: string };
    const info = (await scrape()).find((s) => s.name === 'inference_extension_info');
    expect(info?.labels['build_ref']).toBe(`v${version}`);
    expect(info?.labels['commit']).toMatch(/^(unknown|[0-9a-f]{7,40})$/);
  });

  it('logs no line per request at info, and one activity summary per period', async () => {
    // A fallback served (the primary penalised): a per-request event, debug only.
    const penalised = async (): Promise<void> => {
      const client = extProcClient(epp.grpcPort);
      const stream = new EnvoyStream(client);
      try {
        stream.send(envoyRequestMessages({ body: completion('llama') }));
        const [primary] = (destinationOf((await stream.waitFor(2))[0]).header as string).split(',');
        // The other pod served it (an earlier test's failure may have left only one in the list).
        stream.send([responseHeadersMessage(200, PODS.find((p) => p.address !== primary)?.address)]);
        await stream.waitFor(3);
      } finally {
        stream.close();
        client.close();
      }
    };
    await penalised();
    const summary = await eventually(() => {
      const found = lines.filter((l) => l['msg'] === 'activity').find((l) => (l['fallbacks'] as number) > 0);
      expect(found).toBeDefined();
      return found as Record<string, unknown>;
    });
    expect(summary['level']).toBe(30);
    expect(summary['outcomes']).toMatchObject({ routed: expect.any(Number) });
    expect(lines.filter((l) => /fallback|penalised/.test(String(l['msg'])) && l['msg'] !== 'activity')).toEqual([]);
    // An idle period writes nothing.
    const count = lines.filter((l) => l['msg'] === 'activity').length;
    await new Promise((r) => setTimeout(r, 1000));
    expect(lines.filter((l) => l['msg'] === 'activity').length).toBe(count);
  });
});
