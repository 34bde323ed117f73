// A request's life through a real EPP (gRPC, NATS): behind Envoy >= 1.37 with the shipped config
// (response body NONE, trailers skipped) the gateway closes the ext_proc stream right after the
// response-headers reply, while a streamed generation runs on. The request must stay charged to the
// endpoint that served it — in flight for picks, /api/state, peers and the running gauge — until a
// sample of the endpoint shows it gone; one that never started, or does not stream, or whose
// completion the EPP sees, is released when it ends.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BodySendMode, type ProcessingRequest } from '@spillway/protocol';
import { startNatsServer, eventually, type NatsServerHandle } from '@spillway/testkit';
import type { RunningEpp } from '@spillway/epp';
import {
  EnvoyStream,
  POOL,
  TestPublisher,
  bodyMessage,
  destinationOf,
  envoyRequestMessages,
  extProcClient,
  responseHeadersMessage,
  startTestEpp,
  type PodSpec,
} from './helpers.js';

const A0: PodSpec = { pod: 'a0', zone: 'zone-a', region: 'r1', address: '10.0.1.1:8000' };
const utf8 = new TextEncoder();

let nats: NatsServerHandle;
let publisher: TestPublisher;
let epp: RunningEpp;

beforeAll(async () => {
  nats = await startNatsServer({ forcePrivate: true });
  publisher = await TestPublisher.connect(nats.url);
  epp = await startTestEpp(nats.url, 'zone-a', ['--share-state', 'false']);
  await publisher.pods([A0]);
  await epp.ready;
  await eventually(() => expect(epp.core.fleet.pool(POOL)?.readyCount).toBe(1));
});

afterAll(async () => {
  await epp?.close();
  await publisher?.close();
  await nats?.stop();
});

const a0 = () => epp.core.fleet.get(POOL, 'zone-a', 'a0');

/** The request's messages as Envoy sends them with the given response body mode. */
function request(body: object, response: 'none' | 'full-duplex'): ProcessingRequest[] {
  const messages = envoyRequestMessages({ body: JSON.stringify(body), subset: [A0.address] });
  (messages[0] as ProcessingRequest).protocolConfig = {
    requestBodyMode: BodySendMode.FULL_DUPLEX_STREAMED,
    responseBodyMode: response === 'none' ? BodySendMode.NONE : BodySendMode.FULL_DUPLEX_STREAMED,
    sendBodyWithoutWaitingForHeaderResponse: false,
  };
  return messages;
}

const streamed = { model: 'llama', prompt: 'Write a long story.', max_tokens: 2000, stream: true };

/** A metric's value, summed over its series whose labels include `labels` (unconfigured models are labelled `other`). */
async function metric(name: string, labels = ''): Promise<number> {
  const text = await (await fetch(`http://127.0.0.1:${epp.metricsPort}/metrics`)).text();
  let sum = 0;
  for (const line of text.split('\n')) {
    if (!line.startsWith(`${name}{`) && !line.startsWith(`${name} `)) continue;
    if (labels !== '' && !line.includes(labels)) continue;
    sum += Number(line.slice(line.lastIndexOf(' ') + 1));
  }
  return sum;
}

const running = () => metric('inference_objective_running_requests');
const durations = () => metric('inference_objective_request_duration_seconds_count');

/** Routes one request and returns its stream once the destination came back. */
async function routed(body: object, response: 'none' | 'full-duplex'): Promise<EnvoyStream> {
  const stream = new EnvoyStream(extProcClient(epp.grpcPort));
  stream.send(request(body, response));
  const [headers] = await stream.waitFor(2);
  expect(destinationOf(headers).header).toBe(A0.address);
  return stream;
}

/** Envoy's stream close after the last reply it expects: a half-close and, at once, a reset. */
function closeLikeEnvoy(stream: EnvoyStream): void {
  stream.call.end();
  stream.call.cancel();
}

describe('the shipped Envoy config: the stream closes right after the response headers', () => {
  it('a streamed request stays charged until a sample shows it gone, then its charge, the running gauge and its duration end', async () => {
    publisher.metrics(A0);
    const runningBefore = await running();
    const durationsBefore = await durations();
    const stream = await routed(streamed, 'none');
    stream.send([responseHeadersMessage(200, A0.address)]);
    await stream.waitFor(3);
    closeLikeEnvoy(stream);
    await new Promise((resolve) => setTimeout(resolve, 300));
    expect([a0()?.inFlight, a0()?.startedInFlight]).toEqual([1, 1]);
    expect(await running()).toBe(runningBefore + 1);
    const state = (await (await fetch(`http://127.0.0.1:${epp.metricsPort}/api/state`)).json()) as {
      pods: { items: { pod: string; inFlight: number; started: number }[] };
    };
    expect(state.pods.items.find((p) => p.pod === 'a0')).toMatchObject({ inFlight: 1, started: 1 });
    // A sample showing it running takes it over: still in flight, no longer unsampled, never released on a guess.
    publisher.metrics({ ...A0, running: 1 });
    await eventually(() => expect(a0()?.unsampledPicks).toBe(0));
    expect([a0()?.inFlight, a0()?.releasedSinceSample]).toEqual([1, 0]);
    // Gone from the next sample: the charge ends there, and the request's figures with it.
    publisher.metrics({ ...A0, running: 0 });
    await eventually(() => expect(a0()?.inFlight).toBe(0));
    expect(a0()?.releasedSinceSample).toBe(0);
    await eventually(async () => expect(await running()).toBe(runningBefore));
    expect(await durations()).toBe(durationsBefore + 1);
    expect(await metric('spillway_charges_ended_total', 'reason="samples"')).toBeGreaterThanOrEqual(1);
  });

  it('a request that does not stream is done at its response headers (they come with the whole response)', async () => {
    const stream = await routed({ model: 'llama', prompt: 'Hi', max_tokens: 5 }, 'none');
    stream.send([responseHeadersMessage(200, A0.address)]);
    await stream.waitFor(3);
    expect(a0()?.inFlight).toBe(0);
    closeLikeEnvoy(stream);
  });

  it('a request whose response never began is released when its stream ends: client gone, or an error status', async () => {
    const gone = await routed(streamed, 'none');
    expect(a0()?.inFlight).toBe(1);
    closeLikeEnvoy(gone);
    await eventually(() => expect(a0()?.inFlight).toBe(0));
    const failed = await routed(streamed, 'none');
    failed.send([responseHeadersMessage(503, A0.address)]);
    await failed.waitFor(3);
    expect(a0()?.inFlight).toBe(1);
    closeLikeEnvoy(failed);
    await eventually(() => expect(a0()?.inFlight).toBe(0));
  });
});

describe('response bodies streamed through the EPP (FULL_DUPLEX_STREAMED)', () => {
  it('the completion is seen: released at the last chunk, usage from the final SSE event', async () => {
    const outputBefore = await metric('inference_objective_output_tokens_sum');
    const stream = await routed(streamed, 'full-duplex');
    stream.send([responseHeadersMessage(200, A0.address)]);
    const chunks = [
      'data: {"id":"c1","choices":[{"index":0,"text":"Once"}],"usage":null}\n\n',
      'data: {"id":"c1","choices":[],"usage":{"prompt_tokens":5,"completion_tokens":7,"total_tokens":12}}\n\ndata: [DONE]\n\n',
    ];
    stream.send([bodyMessage('responseBody', utf8.encode(chunks[0] as string), false)]);
    await stream.waitFor(4);
    expect([a0()?.inFlight, a0()?.startedInFlight]).toEqual([1, 1]);
    stream.send([bodyMessage('responseBody', utf8.encode(chunks[1] as string), true)]);
    await stream.waitFor(5);
    expect(a0()?.inFlight).toBe(0);
    expect(await metric('inference_objective_output_tokens_sum')).toBe(outputBefore + 7);
    stream.close();
  });
});
