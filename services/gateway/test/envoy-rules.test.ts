// Each rule the development gateway follows from Envoy (docs/protocol.md, "The development
// gateway"), shown on the gateway itself: a scripted ext_proc server in the test, real HTTP, real
// simulators. The rules alone are in ext-proc-filter.test.ts.
import { request } from 'node:http';
import { status as GrpcStatus } from '@grpc/grpc-js';
import {
  LB_NAMESPACE,
  SERVED_KEY,
  requestHeadersResponse,
  responseHeadersResponse,
  routedResponses,
  streamedBodyResponses,
} from '@spillway/protocol';
import type { ProcessingResponse } from '@spillway/protocol';
import { eventually, freePort } from '@spillway/testkit';
import { describe, expect, it } from 'vitest';
import type { BodyMode, SendMode } from '../src/ext-proc-filter.js';
import { messagesOf } from './fake-epp.js';
import type { FakeEpp, RecordedStream } from './fake-epp.js';
import { completion, deadAddress, fakeEpp, gateway, heldUpstream, post, rawUpstream, sim } from './fixtures.js';

interface ErrorBody {
  error: { code: string; message: string };
}

function only(epp: FakeEpp): RecordedStream {
  const stream = epp.streams[0];
  if (stream === undefined || epp.streams.length !== 1) throw new Error(`expected one ext_proc stream, got ${epp.streams.length}`);
  return stream;
}

/** The destination replies of the full-duplex protocol, for scripts that answer themselves. */
function routed(destination: string, body: string): ProcessingResponse[] {
  return routedResponses({ mode: 'full-duplex', destination, body: Buffer.from(body) });
}

describe('the stream closes after the last reply Envoy expects (Filter::closeGrpcStreamIfLastRespReceived)', () => {
  const combinations: Array<{ requestBody: BodyMode; responseBody: BodyMode; responseTrailer: SendMode }> = [];
  for (const requestBody of ['full-duplex', 'buffered', 'none'] as const) {
    combinations.push(
      { requestBody, responseBody: 'none', responseTrailer: 'skip' },
      { requestBody, responseBody: 'none', responseTrailer: 'send' },
      { requestBody, responseBody: 'full-duplex', responseTrailer: 'send' },
    );
  }

  for (const { requestBody, responseBody, responseTrailer } of combinations) {
    const early = responseBody === 'none' && responseTrailer === 'skip';
    it(`request ${requestBody}, response body ${responseBody}, response trailers ${responseTrailer}: ${
      early ? 'closed after the response-headers reply, while the body still streams' : 'open until the response ends'
    }`, async () => {
      const upstream = await heldUpstream();
      const epp = await fakeEpp(() => ({ destination: upstream.address }));
      const gw = await gateway({
        epp: epp.address,
        endpoints: [{ address: upstream.address }],
        requestBodyMode: requestBody,
        requestTrailerMode: requestBody === 'full-duplex' ? 'send' : 'skip',
        responseBodyMode: responseBody,
        responseTrailerMode: responseTrailer,
      });
      const body = completion({ stream: true });
      const res = await post(`${gw.url}/v1/completions`, body);
      expect(res.status).toBe(200);
      const stream = only(epp);
      if (early) {
        // The model server still holds the rest of its body: only the close can end the stream now.
        await eventually(() => expect(stream.closedAt).toBeDefined());
        expect(stream.cancelled).toBe(true);
        upstream.release();
      } else {
        upstream.release();
      }
      expect(await res.text()).toBe('data: {"n":1}\n\ndata: [DONE]\n\n');
      await stream.finished;
      if (!early) expect(stream.closedAt).toBeGreaterThan(upstream.endedAt() ?? Number.POSITIVE_INFINITY);
      // What reached the model server is the client's body whichever way it went through the EPP.
      expect(upstream.requests[0]?.toString()).toBe(body);
      expect(messagesOf(stream, 'responseHeaders')).toHaveLength(1);
      expect(messagesOf(stream, 'responseBody').length > 0).toBe(responseBody === 'full-duplex');
    });
  }

  it('an older Envoy (no close optimization) keeps the stream until the response ends', async () => {
    const upstream = await heldUpstream();
    const epp = await fakeEpp(() => ({ destination: upstream.address }));
    const gw = await gateway({ epp: epp.address, endpoints: [{ address: upstream.address }], streamCloseOptimization: false });
    const res = await post(`${gw.url}/v1/completions`, completion({ stream: true }));
    upstream.release();
    expect(await res.text()).toContain('[DONE]');
    const stream = only(epp);
    await stream.finished;
    expect(stream.closedAt).toBeGreaterThan(upstream.endedAt() ?? Number.POSITIVE_INFINITY);
  });

  it('with nothing of the response for the EPP, a header-only request closes on its headers reply, before the upstream answers', async () => {
    let answer: () => void = () => undefined;
    const answered = new Promise<void>((resolve) => (answer = resolve));
    const upstream = await rawUpstream((req, res) => {
      req.resume();
      void answered.then(() => res.writeHead(200, { 'content-type': 'application/json' }).end('{"data":[]}'));
    });
    const epp = await fakeEpp(() => ({ destination: upstream.address }));
    const gw = await gateway({ epp: epp.address, endpoints: [{ address: upstream.address }], responseHeaderMode: 'skip' });
    const pending = fetch(`${gw.url}/v1/models`);
    await eventually(() => expect(epp.streams[0]?.closedAt).toBeDefined());
    answer();
    expect((await pending).status).toBe(200);
    expect(messagesOf(only(epp), 'responseHeaders')).toHaveLength(0);
  });

  it('an immediate response ends the stream at once and answers the client', async () => {
    const upstream = await sim();
    const epp = await fakeEpp(() => ({ reject: 429, message: 'shed' }));
    const gw = await gateway({ epp: epp.address, endpoints: [{ address: upstream.address }] });
    const res = await post(`${gw.url}/v1/completions`, completion());
    expect(res.status).toBe(429);
    await only(epp).finished;
    expect(upstream.engine.stats().submitted).toBe(0);
  });
});

describe('BUFFERED request bodies (Filter::handleDataBufferedMode, ProcessorState::handleHeadersResponse)', () => {
  it('the whole body goes in one message, only after the headers reply; the destination rides on the body reply', async () => {
    const upstream = await heldUpstream();
    const epp = await fakeEpp(() => ({ destination: upstream.address }));
    const seenAtHeadersReply: number[] = [];
    epp.script = (message, stream) => {
      if (message.request?.$case === 'requestHeaders') {
        setTimeout(() => {
          seenAtHeadersReply.push(stream.record.messages.length);
          stream.send(requestHeadersResponse());
        }, 50);
      } else if (message.request?.$case === 'requestBody') {
        for (const reply of routedResponses({ mode: 'buffered', destination: upstream.address })) stream.send(reply);
      } else {
        return false;
      }
      return true;
    };
    const gw = await gateway({
      epp: epp.address,
      endpoints: [{ address: upstream.address }],
      requestBodyMode: 'buffered',
      requestTrailerMode: 'skip',
    });
    const body = completion({ prompt: 'b'.repeat(200_000) });
    const res = await post(`${gw.url}/v1/completions`, body);
    upstream.release();
    expect(await res.text()).toContain('[DONE]');
    expect(res.status).toBe(200);
    expect(seenAtHeadersReply).toEqual([1]);
    const bodies = messagesOf(only(epp), 'requestBody');
    expect(bodies).toHaveLength(1);
    const value = bodies[0]?.request?.$case === 'requestBody' ? bodies[0].request.value : undefined;
    expect(value?.endOfStream).toBe(true);
    expect(Buffer.from(value?.body ?? new Uint8Array()).toString()).toBe(body);
    expect(upstream.requests[0]?.toString()).toBe(body);
  });
});

describe('a streamed model-server response: headers before the first token, as vLLM sends them', () => {
  it('reaches the EPP (and ends its stream) while the model is still prefilling', async () => {
    // 20x slower than the test preset: the prompt's prefill alone takes a few hundred ms.
    const upstream = await sim({ timeScale: 0.05 });
    const epp = await fakeEpp(() => ({ destination: upstream.address }));
    const tokensAtResponseHeaders: number[] = [];
    epp.script = (message) => {
      if (message.request?.$case === 'responseHeaders') tokensAtResponseHeaders.push(upstream.engine.stats().generationTokens);
      return false;
    };
    const gw = await gateway({ epp: epp.address, endpoints: [{ address: upstream.address }] });
    const res = await post(`${gw.url}/v1/completions`, completion({ stream: true, max_tokens: 4, prompt: 'p'.repeat(2_000) }));
    expect(res.status).toBe(200);
    const stream = only(epp);
    await eventually(() => expect(stream.closedAt).toBeDefined());
    // Closed while the model still generates: the EPP heard nothing of the tokens.
    expect(upstream.engine.stats().generationTokens).toBeLessThan(4);
    expect(tokensAtResponseHeaders).toEqual([0]);
    const events = (await res.text()).split('\n\n').filter((e) => e.startsWith('data: '));
    expect(events.at(-1)).toBe('data: [DONE]');
    expect(upstream.engine.stats().generationTokens).toBe(4);
  });
});

describe('message_timeout: armed per message outside FULL_DUPLEX_STREAMED (ProcessorState::onStartProcessorCall)', () => {
  it('BUFFERED: an EPP that does not answer the headers fails the request with 504', async () => {
    const upstream = await sim();
    const epp = await fakeEpp(() => ({ destination: upstream.address }));
    epp.script = (message) => message.request?.$case === 'requestHeaders';
    const gw = await gateway({
      epp: epp.address,
      endpoints: [{ address: upstream.address }],
      requestBodyMode: 'buffered',
      requestTrailerMode: 'skip',
      eppTimeoutMs: 150,
    });
    const res = await post(`${gw.url}/v1/completions`, completion());
    expect(res.status).toBe(504);
    expect(((await res.json()) as ErrorBody).error.code).toBe('epp_timeout');
    expect(gw.stats()).toMatchObject({ messageTimeouts: 1, eppErrors: 1 });
    await eventually(() => expect(only(epp).cancelled).toBe(true));
    expect(upstream.engine.stats().submitted).toBe(0);
  });

  it('FULL_DUPLEX_STREAMED: no message timer; only the request deadline ends a silent EPP', async () => {
    const epp = await fakeEpp(() => ({ hang: true }));
    const gw = await gateway({
      epp: epp.address,
      endpoints: [{ address: await deadAddress() }],
      eppTimeoutMs: 100,
      requestTimeoutMs: 1_500,
    });
    const res = await post(`${gw.url}/v1/completions`, completion());
    expect(res.status).toBe(504);
    expect(((await res.json()) as ErrorBody).error.code).toBe('request_timeout');
    expect(gw.stats().messageTimeouts).toBe(0);
  });

  it('the response-headers reply is timed (its body mode is NONE): a silent EPP turns the 200 into a 504', async () => {
    const upstream = await sim();
    const epp = await fakeEpp(() => ({ destination: upstream.address }));
    epp.script = (message) => message.request?.$case === 'responseHeaders';
    const gw = await gateway({ epp: epp.address, endpoints: [{ address: upstream.address }], eppTimeoutMs: 150 });
    const res = await post(`${gw.url}/v1/completions`, completion());
    expect(res.status).toBe(504);
    expect(gw.stats().messageTimeouts).toBe(1);
    expect(upstream.engine.stats().submitted).toBe(1);
  });

  it('with failure_mode_allow a timeout lets the request go on without a destination (the fallback policy)', async () => {
    const upstream = await sim();
    const epp = await fakeEpp(() => ({ destination: upstream.address }));
    epp.script = (message) => message.request?.$case === 'requestHeaders';
    const gw = await gateway({
      epp: epp.address,
      endpoints: [{ address: upstream.address }],
      requestBodyMode: 'buffered',
      requestTrailerMode: 'skip',
      eppTimeoutMs: 150,
      failureModeAllow: true,
    });
    const res = await post(`${gw.url}/v1/completions`, completion());
    expect(res.status).toBe(200);
    expect(res.headers.get('x-spillway-destination')).toBeNull();
    expect(gw.stats()).toMatchObject({ messageTimeouts: 1, eppFailOpen: 1, fallbackPicks: 1 });
  });
});

describe('failure_mode_allow (Filter::onGrpcError, Filter::failureModeAllow)', () => {
  /** An EPP that fails its stream with UNAVAILABLE once the request body is complete. */
  async function failingEpp(): Promise<FakeEpp> {
    const epp = await fakeEpp(() => ({ hang: true }));
    epp.script = (message, stream) => {
      if (message.request?.$case === 'requestBody' && message.request.value.endOfStream) stream.fail(GrpcStatus.UNAVAILABLE, 'going away');
      return false;
    };
    return epp;
  }

  it('fails closed with status_on_error (500 unless set)', async () => {
    const upstream = await sim();
    const epp = await failingEpp();
    const gw = await gateway({ epp: epp.address, endpoints: [{ address: upstream.address }] });
    const res = await post(`${gw.url}/v1/completions`, completion());
    expect(res.status).toBe(500);
    expect(((await res.json()) as ErrorBody).error.code).toBe('epp_error');
    const custom = await gateway({ epp: epp.address, endpoints: [{ address: upstream.address }], statusOnError: 503 });
    expect((await post(`${custom.url}/v1/completions`, completion())).status).toBe(503);
    expect(upstream.engine.stats().submitted).toBe(0);
  });

  it('still fails closed once a FULL_DUPLEX_STREAMED body reached the filter, even with failure_mode_allow', async () => {
    const upstream = await sim();
    const epp = await failingEpp();
    const gw = await gateway({ epp: epp.address, endpoints: [{ address: upstream.address }], failureModeAllow: true });
    expect((await post(`${gw.url}/v1/completions`, completion())).status).toBe(500);
    expect(gw.stats().eppFailOpen).toBe(0);
  });

  it('fails open for a request without a body: the fallback policy picks', async () => {
    const upstream = await sim();
    const unreachable = `127.0.0.1:${await freePort()}`;
    const closed = await gateway({ epp: unreachable, endpoints: [{ address: upstream.address }] });
    expect((await fetch(`${closed.url}/v1/models`)).status).toBe(500);
    const open = await gateway({ epp: unreachable, endpoints: [{ address: upstream.address }], failureModeAllow: true });
    const res = await fetch(`${open.url}/v1/models`);
    expect(res.status).toBe(200);
    expect(res.headers.get('x-spillway-served-endpoint')).toBe(upstream.address);
    expect(open.stats()).toMatchObject({ eppFailOpen: 1, fallbackPicks: 1 });
  });

  it('a clean close by the EPP before its reply lets the request go on without it (whatever the failure mode)', async () => {
    const bodies: string[] = [];
    const upstream = await rawUpstream((req, res) => {
      let text = '';
      req.on('data', (chunk: Buffer) => (text += chunk.toString()));
      req.on('end', () => {
        bodies.push(text);
        res.writeHead(200, { 'content-type': 'text/plain' }).end('ok');
      });
    });
    const epp = await fakeEpp(() => ({ hang: true }));
    epp.script = (message, stream) => {
      if (message.request?.$case === 'requestBody' && message.request.value.endOfStream) stream.end();
      return false;
    };
    const gw = await gateway({ epp: epp.address, endpoints: [{ address: upstream.address }] });
    const res = await post(`${gw.url}/v1/completions`, completion());
    expect(res.status).toBe(200);
    // Full duplex: the body chunks went to the EPP and are gone (Envoy drains them); none came after.
    expect(bodies).toEqual(['']);
    expect(gw.stats()).toMatchObject({ eppFailOpen: 1, eppErrors: 0, fallbackPicks: 1 });
  });
});

describe('fail-open across zones: the zone EPP down, the fallback round robin over every zone', () => {
  async function threeZones() {
    const [a, b, c] = [await sim(), await sim(), await sim()];
    const endpoints = [
      { address: a.address, zone: 'zone-a' },
      { address: b.address, zone: 'zone-b' },
      { address: c.address, zone: 'zone-c' },
    ];
    return { sims: [a, b, c], endpoints };
  }

  it('failure_mode_allow with an EPP cluster that fails streams at start (healthy_panic_threshold 0): every zone serves', async () => {
    const { sims, endpoints } = await threeZones();
    const gw = await gateway({
      epp: await deadAddress(),
      zone: 'zone-a',
      endpoints,
      failureModeAllow: true,
      eppHealthIntervalMs: 50,
      eppHealthyPanicThreshold: 0,
    });
    await eventually(() => expect(gw.stats().eppHealthy).toBe(false));
    const served: string[] = [];
    for (let i = 0; i < 6; i++) {
      const res = await post(
        `${gw.url}/v1/chat/completions`,
        JSON.stringify({ model: 'test-model', messages: [{ role: 'user', content: 'hi' }] }),
      );
      expect(res.status).toBe(200);
      served.push(res.headers.get('x-spillway-served-endpoint') ?? '');
      await res.text();
    }
    // Round robin, every zone alike: each of the three hosts twice, in a fixed rotation.
    for (const s of sims) expect(served.filter((address) => address === s.address)).toHaveLength(2);
    expect(served.slice(3)).toEqual(served.slice(0, 3));
    expect(gw.stats()).toMatchObject({ eppFailOpen: 6, fallbackPicks: 6 });
  });

  it('without failure_mode_allow the same outage is an error for every request', async () => {
    const { sims, endpoints } = await threeZones();
    const gw = await gateway({ epp: await deadAddress(), zone: 'zone-a', endpoints, eppHealthIntervalMs: 50, eppHealthyPanicThreshold: 0 });
    await eventually(() => expect(gw.stats().eppHealthy).toBe(false));
    for (let i = 0; i < 3; i++) expect((await post(`${gw.url}/v1/completions`, completion())).status).toBe(500);
    for (const s of sims) expect(s.engine.stats().submitted).toBe(0);
  });
});

describe('spurious and out-of-order messages', () => {
  it('a body reply before the headers reply fails the request (fail closed)', async () => {
    const upstream = await sim();
    const epp = await fakeEpp(() => ({ hang: true }));
    epp.script = (message, stream) => {
      if (message.request?.$case !== 'requestBody' || !message.request.value.endOfStream) return false;
      const [, ...bodyOnly] = routed(upstream.address, completion());
      for (const reply of bodyOnly) stream.send(reply);
      return true;
    };
    const gw = await gateway({ epp: epp.address, endpoints: [{ address: upstream.address }] });
    const res = await post(`${gw.url}/v1/completions`, completion());
    expect(res.status).toBe(500);
    expect(((await res.json()) as ErrorBody).error.message).toMatch(/spurious/);
    expect(upstream.engine.stats().submitted).toBe(0);
  });

  it('a response-headers reply during the request phase, or an empty message, fails the request', async () => {
    const upstream = await sim();
    for (const wrong of [responseHeadersResponse(), { requestDrain: false } as ProcessingResponse]) {
      const epp = await fakeEpp(() => ({ hang: true }));
      epp.script = (message, stream) => {
        if (message.request?.$case === 'requestBody' && message.request.value.endOfStream) stream.send(wrong);
        return false;
      };
      const gw = await gateway({ epp: epp.address, endpoints: [{ address: upstream.address }] });
      expect((await post(`${gw.url}/v1/completions`, completion())).status).toBe(500);
    }
    expect(upstream.engine.stats().submitted).toBe(0);
  });

  it('an extra reply while the model server works fails the request there and then (the stream is still open)', async () => {
    let upstreamGone = false;
    let reached: () => void = () => undefined;
    const atUpstream = new Promise<void>((resolve) => (reached = resolve));
    const upstream = await rawUpstream((req, res) => {
      req.resume();
      res.on('close', () => (upstreamGone = true));
      reached();
    });
    const epp = await fakeEpp(() => ({ destination: upstream.address }));
    epp.script = (message, stream) => {
      if (message.request?.$case === 'requestBody' && message.request.value.endOfStream) {
        void atUpstream.then(() => stream.send(requestHeadersResponse()));
      }
      return false;
    };
    const gw = await gateway({ epp: epp.address, endpoints: [{ address: upstream.address }] });
    const res = await post(`${gw.url}/v1/completions`, completion());
    expect(res.status).toBe(500);
    await eventually(() => expect(upstreamGone).toBe(true));
  });

  it('with failure_mode_allow (and no full-duplex body yet) the EPP is ignored from then on', async () => {
    const upstream = await sim();
    const epp = await fakeEpp(() => ({ destination: upstream.address }));
    epp.script = (message, stream) => {
      if (message.request?.$case !== 'requestHeaders') return false;
      // A body reply before Envoy sent the body: spurious.
      stream.send(streamedBodyResponses('request', Buffer.from('{}'))[0] as ProcessingResponse);
      return true;
    };
    const gw = await gateway({
      epp: epp.address,
      endpoints: [{ address: upstream.address }],
      requestBodyMode: 'buffered',
      requestTrailerMode: 'skip',
      failureModeAllow: true,
    });
    const res = await post(`${gw.url}/v1/completions`, completion());
    expect(res.status).toBe(200);
    expect(gw.stats()).toMatchObject({ eppFailOpen: 1, fallbackPicks: 1 });
  });
});

describe('override_host and the retry policy', () => {
  it('tries a listed host the gateway holds unhealthy (override_host checks only that the cluster knows it)', async () => {
    const failing = await sim({ errorRate: 1 });
    const live = await sim();
    const epp = await fakeEpp(() => ({ destination: `${failing.address},${live.address}` }));
    const gw = await gateway({
      epp: epp.address,
      outlierFailures: 1,
      outlierEjectionMs: 60_000,
      endpoints: [{ address: failing.address }, { address: live.address }],
    });
    for (let i = 0; i < 2; i++) {
      const res = await post(`${gw.url}/v1/completions`, completion());
      expect(res.status).toBe(200);
      expect(res.headers.get('x-spillway-attempts')).toBe('2');
    }
    // Ejected after the first request, tried first again on the second.
    expect(gw.stats().endpoints.find((e) => e.address === failing.address)?.ejected).toBe(true);
  });

  it('retries only what retry_on names', async () => {
    const failing = await sim({ errorRate: 1 });
    const live = await sim();
    const epp = await fakeEpp(() => ({ destination: `${failing.address},${live.address}` }));
    const endpoints = [{ address: failing.address }, { address: live.address }];
    for (const retryOn of [['connect-failure'], ['reset'], ['gateway-error']]) {
      const gw = await gateway({ epp: epp.address, endpoints, retryOn });
      const res = await post(`${gw.url}/v1/completions`, completion());
      expect(res.status, retryOn.join()).toBe(500);
      expect(res.headers.get('x-spillway-attempts')).toBe('1');
    }
    const gw = await gateway({ epp: epp.address, endpoints, retryOn: ['5xx'] });
    const res = await post(`${gw.url}/v1/completions`, completion());
    expect(res.status).toBe(200);
    expect(res.headers.get('x-spillway-attempts')).toBe('2');
  });

  it('once the list is used up, retries go to the fallback round robin, and the served host is reported', async () => {
    const dead = await deadAddress();
    const live = await sim();
    const epp = await fakeEpp(() => ({ destination: dead }));
    const gw = await gateway({ epp: epp.address, endpoints: [{ address: dead }, { address: live.address }] });
    const res = await post(`${gw.url}/v1/completions`, completion());
    expect(res.status).toBe(200);
    expect(res.headers.get('x-spillway-attempts')).toBe('2');
    expect(res.headers.get('x-spillway-served-endpoint')).toBe(live.address);
    expect(gw.stats()).toMatchObject({ fallbackPicks: 1, retries: 1 });
    const [headers] = messagesOf(only(epp), 'responseHeaders');
    expect(headers?.metadataContext?.filterMetadata[LB_NAMESPACE]?.[SERVED_KEY]).toBe(live.address);
  });

  it('stops after num_retries', async () => {
    const [a, b, c] = [await deadAddress(), await deadAddress(), await deadAddress()];
    const epp = await fakeEpp(() => ({ destination: `${a},${b},${c}` }));
    const gw = await gateway({ epp: epp.address, retries: 1, endpoints: [{ address: a }, { address: b }, { address: c }] });
    const res = await post(`${gw.url}/v1/completions`, completion());
    expect(res.status).toBe(503);
    expect(res.headers.get('x-spillway-attempts')).toBe('2');
  });

  it('an EPP answer without a destination goes to the fallback policy, never to a client-chosen host', async () => {
    const [a, b] = [await sim(), await sim()];
    const epp = await fakeEpp(() => ({
      destination: a.address,
      tamper: ([first, ...rest]) => {
        const common = first?.response?.$case === 'requestHeaders' ? first.response.value.response : undefined;
        if (common !== undefined) common.headerMutation = undefined;
        return [{ ...(first as ProcessingResponse), dynamicMetadata: undefined }, ...rest];
      },
    }));
    const gw = await gateway({ epp: epp.address, endpoints: [{ address: a.address }, { address: b.address }] });
    const served = new Set<string>();
    for (let i = 0; i < 4; i++) {
      const res = await post(`${gw.url}/v1/completions`, completion(), { 'x-gateway-destination-endpoint': b.address });
      expect(res.status).toBe(200);
      served.add(res.headers.get('x-spillway-served-endpoint') ?? '');
    }
    // Round robin over both hosts: the client's header steered nothing.
    expect(served).toEqual(new Set([a.address, b.address]));
    expect(gw.stats().fallbackPicks).toBe(4);
  });
});

describe('bad input', () => {
  it('rejects flags Envoy would reject: full duplex without trailers, an unknown retry condition', async () => {
    const epp = await fakeEpp(() => ({ hang: true }));
    await expect(gateway({ epp: epp.address, endpoints: [], requestTrailerMode: 'skip' })).rejects.toThrow(/trailer mode send/);
    await expect(gateway({ epp: epp.address, endpoints: [], retryOn: ['5xx', 'sometimes'] })).rejects.toThrow(/sometimes/);
  });

  it('a client that leaves mid-response closes the stream of an older Envoy too', async () => {
    const upstream = await heldUpstream();
    const epp = await fakeEpp(() => ({ destination: upstream.address }));
    const gw = await gateway({ epp: epp.address, endpoints: [{ address: upstream.address }], streamCloseOptimization: false });
    await new Promise<void>((resolve, reject) => {
      const req = request(`${gw.url}/v1/completions`, { method: 'POST', headers: { 'content-type': 'application/json' } }, (res) => {
        res.once('data', () => {
          req.destroy();
          resolve();
        });
      });
      req.on('error', () => undefined);
      req.end(completion({ stream: true }));
      setTimeout(() => reject(new Error('no response')), 10_000).unref();
    });
    await eventually(() => expect(only(epp).cancelled).toBe(true));
    upstream.release();
  });
});
