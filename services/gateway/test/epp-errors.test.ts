// The EPP's refusals reach the client; an unreachable or misbehaving EPP fails closed
// (failure_mode_allow: false, status_on_error 500); a client that leaves cancels the stream.
// Timers, fail-open and the other ext_proc rules: envoy-rules.test.ts.
import { request } from 'node:http';
import { eventually, freePort } from '@spillway/testkit';
import { describe, expect, it } from 'vitest';
import { completion, fakeEpp, gateway, post, rawUpstream, sim } from './fixtures.js';

interface ErrorBody {
  error: { code: string; message: string; type: string };
}

describe('EPP answers and failures', () => {
  for (const status of [503, 429, 400] as const) {
    it(`passes an immediate_response ${status} to the client with its JSON body`, async () => {
      const upstream = await sim();
      const epp = await fakeEpp(() => ({ reject: status, message: `refused with ${status}` }));
      const gw = await gateway({ epp: epp.address, endpoints: [{ address: upstream.address }] });
      const res = await post(`${gw.url}/v1/completions`, completion());
      expect(res.status).toBe(status);
      expect(res.headers.get('content-type')).toBe('application/json');
      const body = (await res.json()) as ErrorBody;
      expect(body.error.message).toBe(`refused with ${status}`);
      expect(upstream.engine.stats().submitted).toBe(0);
      expect(gw.stats().eppRejections).toEqual({ [String(status)]: 1 });
    });
  }

  it('answers an immediate_response to a header-only request', async () => {
    const epp = await fakeEpp(() => ({ reject: 503, message: 'no endpoint' }));
    const gw = await gateway({ epp: epp.address, endpoints: [], passthrough: true });
    const res = await fetch(`${gw.url}/v1/models`);
    expect(res.status).toBe(503);
    expect(((await res.json()) as ErrorBody).error.message).toBe('no endpoint');
  });

  it('answers status_on_error (500) with a JSON error when the EPP is unreachable', async () => {
    const upstream = await sim();
    const gw = await gateway({ epp: `127.0.0.1:${await freePort()}`, endpoints: [{ address: upstream.address }] });
    const res = await post(`${gw.url}/v1/completions`, completion());
    expect(res.status).toBe(500);
    const body = (await res.json()) as ErrorBody;
    expect(body.error.code).toBe('epp_error');
    expect(body.error.message).toMatch(/UNAVAILABLE/);
    expect(upstream.engine.stats().submitted).toBe(0);
    expect(gw.stats().eppErrors).toBe(1);
  });

  it('fails with 500 when the EPP breaks the full-duplex protocol', async () => {
    const upstream = await sim();
    const epp = await fakeEpp(() => ({
      destination: upstream.address,
      // A plain body response instead of streamed_response: Envoy calls this a spurious message.
      tamper: (responses) =>
        responses.map((r) =>
          r.response?.$case === 'requestBody'
            ? { ...r, response: { $case: 'requestBody', value: { response: { status: 0, clearRouteCache: false } } } }
            : r,
        ),
    }));
    const gw = await gateway({ epp: epp.address, endpoints: [{ address: upstream.address }] });
    const res = await post(`${gw.url}/v1/completions`, completion());
    expect(res.status).toBe(500);
    expect(((await res.json()) as ErrorBody).error.message).toMatch(/spurious message/);
    expect(upstream.engine.stats().submitted).toBe(0);
  });

  it('fails with 500 when a header sets both value and raw_value, as Envoy does', async () => {
    const upstream = await sim();
    const epp = await fakeEpp(() => ({
      destination: upstream.address,
      tamper: (responses) => {
        const first = responses[0];
        const option =
          first?.response?.$case === 'requestHeaders' ? first.response.value.response?.headerMutation?.setHeaders[0] : undefined;
        if (option?.header) option.header.value = 'also-set';
        return responses;
      },
    }));
    const gw = await gateway({ epp: epp.address, endpoints: [{ address: upstream.address }] });
    const res = await post(`${gw.url}/v1/completions`, completion());
    expect(res.status).toBe(500);
    expect(((await res.json()) as ErrorBody).error.message).toMatch(/only one of value or raw_value/);
  });

  it('cancels the ext_proc stream when the client leaves during the request body', async () => {
    const epp = await fakeEpp(() => ({ hang: true }));
    const gw = await gateway({ epp: epp.address, endpoints: [{ address: '127.0.0.1:1' }] });
    const req = request(`${gw.url}/v1/completions`, { method: 'POST', headers: { 'content-length': '1000' } });
    req.on('error', () => undefined);
    req.write('{"model":');
    await eventually(() => expect(epp.streams[0]?.messages.length).toBeGreaterThanOrEqual(2));
    req.destroy();
    await eventually(() => expect(epp.streams[0]?.cancelled).toBe(true));
    await eventually(() => expect(gw.stats().clientAborts).toBe(1));
  });

  it('cancels the stream and the upstream request when the client leaves mid-response', async () => {
    let upstreamClosed = false;
    const upstream = await rawUpstream((req, res) => {
      req.resume();
      req.on('end', () => {
        res.writeHead(200, { 'content-type': 'text/event-stream' });
        res.write('data: {"n":1}\n\n');
        res.on('close', () => (upstreamClosed = true));
      });
    });
    const epp = await fakeEpp(() => ({ destination: upstream.address }));
    const gw = await gateway({ epp: epp.address, endpoints: [{ address: upstream.address }] });
    const res = await post(`${gw.url}/v1/completions`, completion({ stream: true }));
    const reader = (res.body as ReadableStream<Uint8Array>).getReader();
    await reader.read();
    // Cancelling the body closes the connection: the client is gone.
    await reader.cancel();
    await eventually(() => expect(epp.streams[0]?.cancelled).toBe(true));
    await eventually(() => expect(upstreamClosed).toBe(true));
    // The gateway still serves.
    expect((await fetch(`${gw.url}/gateway/stats`)).status).toBe(200);
  });
});
