import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { startNatsServer, eventually, type ExternalProcessorClient, type NatsServerHandle } from '@spillway/testkit';
import type { RunningEpp } from '@spillway/epp';
import {
  EnvoyStream,
  TestPublisher,
  bodyMessage,
  completion,
  destinationOf,
  envoyRequestMessages,
  extProcClient,
  immediateOf,
  responseHeadersMessage,
  startTestEpp,
  streamedBodyOf,
  type PodSpec,
} from './helpers.js';

const PODS: PodSpec[] = [
  { pod: 'a0', zone: 'zone-a', region: 'r1', address: '10.0.1.1:8000' },
  { pod: 'a1', zone: 'zone-a', region: 'r1', address: '10.0.1.2:8000' },
  { pod: 'b0', zone: 'zone-b', region: 'r1', address: '10.0.2.1:8000' },
  { pod: 'c0', zone: 'zone-c', region: 'r2', address: '[fd00::3]:8000' },
];

let nats: NatsServerHandle;
let publisher: TestPublisher;
let epp: RunningEpp;
let client: ExternalProcessorClient;

const open: EnvoyStream[] = [];

async function roundTrip(options: Parameters<typeof envoyRequestMessages>[0], expected: number) {
  const stream = new EnvoyStream(client);
  open.push(stream);
  stream.send(envoyRequestMessages(options));
  const responses = await stream.waitFor(expected);
  return { stream, responses };
}

function inFlightTotal(): number {
  let total = 0;
  for (const pod of epp.core.fleet.pool('llama')?.endpoints() ?? []) total += pod.inFlight;
  return total;
}

beforeAll(async () => {
  nats = await startNatsServer({ forcePrivate: true });
  publisher = await TestPublisher.connect(nats.url);
  epp = await startTestEpp(nats.url, 'zone-a', ['--request-timeout-ms', '1500', '--max-body-bytes', String(1024 * 1024)]);
  await publisher.pods(PODS);
  await epp.ready;
  await eventually(() => expect(epp.core.fleet.pool('llama')?.readyCount).toBe(4));
  client = extProcClient(epp.grpcPort);
  // Keep samples fresh for the whole file.
  const refresh = setInterval(() => PODS.forEach((p) => publisher.metrics(p)), 200);
  refresh.unref();
});

// Every test's streams end with it, so in-flight accounting starts each test from zero.
afterEach(async () => {
  for (const stream of open.splice(0)) stream.close();
  await eventually(() => expect(inFlightTotal()).toBe(0));
});

afterAll(async () => {
  client?.close();
  await epp?.close();
  await publisher?.close();
  await nats?.stop();
});

describe('full-duplex requests', () => {
  it('answers after the whole body with the destination, then the body as streamed_response', async () => {
    const body = completion('llama', 'x'.repeat(200_000));
    const { stream, responses } = await roundTrip({ body, chunks: 17 }, 5);
    const destination = destinationOf(responses[0]);
    expect(responses[0]?.response?.$case).toBe('requestHeaders');
    expect(destination.header).toBeDefined();
    expect(destination.header).toBe(destination.metadata);
    expect(destination.clearRouteCache).toBe(true);
    expect(destination.usesValueField).toBe(false);
    const entries = (destination.header ?? '').split(',');
    expect(entries.length).toBe(3);
    expect(new Set(entries).size).toBe(3);
    expect(destination.header).not.toMatch(/\s/);
    // Local zone first, the last slot a cross-zone fallback.
    expect(['10.0.1.1:8000', '10.0.1.2:8000']).toContain(entries[0]);
    expect(['10.0.2.1:8000', '[fd00::3]:8000']).toContain(entries[2]);
    const echoed = streamedBodyOf(responses);
    expect(echoed.body).toBe(body);
    expect(echoed.endOfStream).toBe(true);
    expect(echoed.chunks).toBe(Math.ceil(Buffer.byteLength(body) / 62_000));
    stream.close();
    expect(await stream.ended).toBeUndefined();
  });

  it('routes header-only requests at once', async () => {
    const { stream, responses } = await roundTrip({}, 1);
    expect(destinationOf(responses[0]).header).toMatch(/^10\.0\.1\.[12]:8000,/);
    stream.close();
  });

  it('treats a missing protocol_config as full duplex', async () => {
    const { stream, responses } = await roundTrip({ body: completion(), noProtocolConfig: true }, 2);
    expect(destinationOf(responses[0]).header).toBeDefined();
    expect(streamedBodyOf(responses).body).toBe(completion());
    stream.close();
  });

  it('answers request trailers after the body when the request ends with them', async () => {
    const stream = new EnvoyStream(client);
    const messages = envoyRequestMessages({ body: completion() });
    const last = messages[messages.length - 1];
    if (last?.request?.$case === 'requestBody') last.request.value.endOfStream = false;
    stream.send(messages);
    stream.send([
      { request: { $case: 'requestTrailers', value: { trailers: { headers: [] } } }, attributes: {}, observabilityMode: false },
    ]);
    const responses = await stream.waitFor(3);
    expect(destinationOf(responses[0]).header).toBeDefined();
    expect(streamedBodyOf(responses).endOfStream).toBe(false);
    expect(responses.at(-1)?.response?.$case).toBe('requestTrailers');
    stream.close();
  });
});

describe('buffered requests', () => {
  it('continues the headers at once and puts the destination on a plain body reply', async () => {
    const stream = new EnvoyStream(client);
    const [headers, ...body] = envoyRequestMessages({ body: completion(), mode: 'buffered' });
    stream.send([headers as never]);
    const first = await stream.waitFor(1);
    expect(first[0]?.response?.$case).toBe('requestHeaders');
    expect(destinationOf(first[0]).header).toBeUndefined();
    stream.send(body);
    const responses = await stream.waitFor(2);
    expect(responses[1]?.response?.$case).toBe('requestBody');
    const destination = destinationOf(responses[1]);
    expect(destination.header).toBe(destination.metadata);
    expect(destination.clearRouteCache).toBe(true);
    expect(streamedBodyOf(responses).chunks).toBe(0);
    stream.close();
  });
});

describe('subset hint', () => {
  it('picks only inside a list subset (strict)', async () => {
    const { responses } = await roundTrip({ body: completion(), subset: ['10.0.1.2:8000', '10.0.2.1:8000'] }, 2);
    expect(destinationOf(responses[0]).header).toBe('10.0.1.2:8000,10.0.2.1:8000');
  });

  it('reads a comma-separated string, bare IPs and IPv6', async () => {
    const { responses } = await roundTrip({ body: completion(), subset: '10.0.1.1, fd00::3' }, 2);
    expect(destinationOf(responses[0]).header).toBe('10.0.1.1:8000,[fd00::3]:8000');
  });

  it('ignores malformed entries, counts them, and uses the rest', async () => {
    // prom-client hands out its live value objects: read the number before the request.
    const ignored = async () => (await epp.metrics.subsetEntriesIgnored.get()).values[0]?.value ?? 0;
    const before = await ignored();
    const { responses } = await roundTrip({ body: completion(), subset: ['nonsense', 42, '10.0.2.1:8000', '10.0.9.9:1'] }, 2);
    expect(destinationOf(responses[0]).header).toBe('10.0.2.1:8000');
    expect((await ignored()) - before).toBe(2);
  });

  it.each([
    ['an empty list', []],
    ['an empty string', ''],
    ['only unknown endpoints', ['10.9.9.9:8000']],
    ['only malformed entries', ['pod-a:80', 'x']],
    ['a non-list value', { not: 'a list' }],
  ])('answers 503 for %s', async (_name, subset) => {
    const { stream, responses } = await roundTrip({ body: completion(), subset }, 1);
    const error = immediateOf(responses[0]);
    expect(error?.status).toBe(503);
    expect(error?.contentType).toBe('application/json');
    expect(error?.body.error.type).toBeTypeOf('string');
    expect(await stream.ended).toBeUndefined();
  });

  it('never reads the subset or the destination from client headers, and strips them', async () => {
    const { responses } = await roundTrip(
      {
        body: completion(),
        subset: ['10.0.2.1:8000'],
        headers: { 'x-gateway-destination-endpoint': '10.6.6.6:1', 'x-gateway-destination-endpoint-subset': '10.6.6.6:1' },
      },
      2,
    );
    expect(destinationOf(responses[0]).header).toBe('10.0.2.1:8000');
    const mutation = (responses[0]?.response?.value as { response?: { headerMutation?: { removeHeaders: string[] } } }).response
      ?.headerMutation;
    expect(mutation?.removeHeaders).toContain('x-gateway-destination-endpoint-subset');
  });
});

describe('served endpoint and passive health', () => {
  it('penalises a primary the gateway did not serve, and passes the response through', async () => {
    const subset = ['10.0.1.1:8000', '10.0.1.2:8000'];
    const first = await roundTrip({ body: completion(), subset }, 2);
    const [primary, fallback] = (destinationOf(first.responses[0]).header ?? '').split(',');
    expect(primary && fallback).toBeTruthy();
    first.stream.send([responseHeadersMessage(200, fallback)]);
    const chunk = new TextEncoder().encode('data: {"x":1}\n\n');
    first.stream.send([bodyMessage('responseBody', chunk, true)]);
    const responses = await first.stream.waitFor(first.responses.length + 2);
    expect(responses.at(-2)?.response?.$case).toBe('responseHeaders');
    const echo = responses.at(-1)?.response;
    expect(echo?.$case).toBe('responseBody');
    first.stream.close();
    await first.stream.ended;
    // For the penalty period, the failed primary is not picked first.
    for (let i = 0; i < 5; i++) {
      const next = await roundTrip({ body: completion(), subset }, 2);
      expect(destinationOf(next.responses[0]).header?.split(',')[0]).toBe(fallback);
      next.stream.close();
    }
    expect((await epp.metrics.servedElsewhere.get()).values[0]?.value).toBeGreaterThanOrEqual(1);
  });
});

describe('model rewrite', () => {
  it('rewrites the model from the header and forwards the new body', async () => {
    const { responses } = await roundTrip({ body: completion('llama'), headers: { 'x-gateway-model-name-rewrite': 'llama-v2' } }, 2);
    expect(JSON.parse(streamedBodyOf(responses).body).model).toBe('llama-v2');
  });
});

describe('bad input', () => {
  it.each([
    ['invalid JSON', '/v1/completions', '{"model": "llama",', 400],
    ['a JSON array', '/v1/completions', '[1,2]', 400],
    ['a missing model', '/v1/completions', '{"prompt":"hi"}', 400],
    ['a non-string model', '/v1/completions', '{"model":7,"prompt":"hi"}', 400],
    ['the wrong shape for the path', '/v1/chat/completions', '{"model":"llama","prompt":"hi"}', 400],
  ])('answers %s with its error', async (_name, path, body, status) => {
    const { stream, responses } = await roundTrip({ path, body }, 1);
    const error = immediateOf(responses[0]);
    expect(error?.status).toBe(status);
    expect(error?.body.error.message.length).toBeGreaterThan(0);
    expect(await stream.ended).toBeUndefined();
  });

  it('answers non-UTF-8 bytes with 400', async () => {
    const { responses } = await roundTrip({ body: new Uint8Array([0x7b, 0x22, 0xff, 0xfe, 0x22, 0x7d]) }, 1);
    expect(immediateOf(responses[0])?.status).toBe(400);
  });

  it('answers a body over the limit with 413 without waiting for the rest', async () => {
    const big = new Uint8Array(10 * 1024 * 1024).fill(0x20);
    const stream = new EnvoyStream(client);
    const [headers] = envoyRequestMessages({ body: completion() });
    stream.send([headers as never]);
    for (let offset = 0; offset < big.length; offset += 1024 * 1024) {
      stream.send([bodyMessage('requestBody', big.subarray(offset, offset + 1024 * 1024), offset + 1024 * 1024 >= big.length)]);
    }
    const responses = await stream.waitFor(1);
    expect(immediateOf(responses[0])?.status).toBe(413);
  });

  it.each([
    ['a body before the headers', [bodyMessage('requestBody', new TextEncoder().encode(completion()), true)]],
    [
      'a second headers message',
      [...envoyRequestMessages({ body: completion() }).slice(0, 1), ...envoyRequestMessages({ body: completion() }).slice(0, 1)],
    ],
    ['an empty message', [{ attributes: {}, observabilityMode: false }]],
    [
      'a response before the request was routed',
      [...envoyRequestMessages({ body: completion() }).slice(0, 1), responseHeadersMessage(200)],
    ],
  ])('ends the stream with INVALID_ARGUMENT on %s', async (_name, messages) => {
    const stream = new EnvoyStream(client);
    stream.send(messages as never);
    const error = await stream.ended;
    expect(error?.code).toBe(3);
  });

  it('ends a stream whose body never completes, and keeps serving others', async () => {
    const stream = new EnvoyStream(client);
    const [headers] = envoyRequestMessages({ body: completion() });
    stream.send([headers as never, bodyMessage('requestBody', new TextEncoder().encode('{"model"'), false)]);
    const error = await stream.ended;
    expect(error?.code).toBe(4); // DEADLINE_EXCEEDED
    const other = await roundTrip({ body: completion() }, 2);
    expect(destinationOf(other.responses[0]).header).toBeDefined();
    other.stream.close();
  });

  it('releases in-flight accounting however streams end', async () => {
    const streams: EnvoyStream[] = [];
    for (let i = 0; i < 10; i++) {
      const { stream } = await roundTrip({ body: completion() }, 2);
      streams.push(stream);
    }
    expect(inFlightTotal()).toBeGreaterThanOrEqual(10);
    streams.slice(0, 5).forEach((s) => s.close());
    await eventually(() => expect(inFlightTotal()).toBe(5));
    streams.slice(5).forEach((s) => s.call.cancel());
    // A stream cancelled mid-body holds nothing either.
    const midBody = new EnvoyStream(client);
    midBody.send(envoyRequestMessages({ body: completion(), chunks: 2 }).slice(0, 2));
    midBody.call.cancel();
    await eventually(() => expect(inFlightTotal()).toBe(0));
  });
});
