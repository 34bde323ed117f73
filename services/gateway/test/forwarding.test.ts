// Forwarding: the EPP's list and body decide where and what goes upstream; streams pass through.
import { request } from 'node:http';
import { describe, expect, it } from 'vitest';
import { messagesOf } from './fake-epp.js';
import { MODEL, completion, fakeEpp, gateway, post, rawUpstream, sim } from './fixtures.js';

describe('forwarding', () => {
  it('sends the request to the first endpoint of the list and reports it', async () => {
    const [a, b] = [await sim(), await sim()];
    const epp = await fakeEpp(() => ({ destination: `${b.address},${a.address}` }));
    const gw = await gateway({ epp: epp.address, endpoints: [{ address: a.address }, { address: b.address }] });
    const res = await post(`${gw.url}/v1/completions`, completion());
    expect(res.status).toBe(200);
    expect(((await res.json()) as { usage: { completion_tokens: number } }).usage.completion_tokens).toBe(3);
    expect(res.headers.get('x-spillway-served-endpoint')).toBe(b.address);
    expect(res.headers.get('x-spillway-attempts')).toBe('1');
    expect(res.headers.get('x-spillway-destination')).toBe(`${b.address},${a.address}`);
    // The simulator behind b generated the tokens; a saw nothing.
    expect(b.engine.stats().finished).toBe(1);
    expect(a.engine.stats().finished).toBe(0);
    const stats = gw.stats();
    expect(stats.servedBy).toEqual({ [b.address]: 1 });
    expect(stats.byStatus).toEqual({ '200': 1 });
    expect(stats.fallbacks).toBe(0);
  });

  it('forwards the body the EPP returned, not the client body', async () => {
    const upstream = await sim();
    // The client names a model the simulator does not serve (it would answer 404); the EPP
    // rewrites it, as a model rewrite would.
    const epp = await fakeEpp(() => ({ destination: upstream.address, body: Buffer.from(completion()) }));
    const gw = await gateway({ epp: epp.address, endpoints: [{ address: upstream.address }] });
    const res = await post(`${gw.url}/v1/completions`, completion({ model: 'alias-of-the-model' }));
    expect(res.status).toBe(200);
    expect(((await res.json()) as { model: string }).model).toBe(MODEL);
  });

  it('reads the destination from the header when the EPP sends no envoy.lb metadata', async () => {
    const [a, b] = [await sim(), await sim()];
    const epp = await fakeEpp(() => ({ destination: `${b.address},${a.address}`, via: 'header' }));
    const gw = await gateway({ epp: epp.address, endpoints: [{ address: a.address }, { address: b.address }] });
    const res = await post(`${gw.url}/v1/completions`, completion());
    expect(res.status).toBe(200);
    expect(res.headers.get('x-spillway-served-endpoint')).toBe(b.address);
  });

  it('never routes on a destination header sent by the client', async () => {
    const [a, b] = [await sim(), await sim()];
    const epp = await fakeEpp(() => ({ destination: a.address, via: 'metadata' }));
    const gw = await gateway({ epp: epp.address, endpoints: [{ address: a.address }, { address: b.address }] });
    const steered = await post(`${gw.url}/v1/completions`, completion(), { 'x-gateway-destination-endpoint': b.address });
    expect(steered.headers.get('x-spillway-served-endpoint')).toBe(a.address);
    expect(b.engine.stats().submitted).toBe(0);
    // An EPP that names no destination at all: envoy-rules.test.ts (the fallback policy, not the header).
  });

  it('streams SSE through as it is produced, not after the upstream finished', async () => {
    let release: () => void = () => undefined;
    const released = new Promise<void>((resolve) => (release = resolve));
    const upstream = await rawUpstream((req, res) => {
      req.resume();
      req.on('end', () => {
        res.writeHead(200, { 'content-type': 'text/event-stream' });
        res.write('data: {"n":1}\n\n');
        // The second event only after the client proved it saw the first one.
        void released.then(() => res.end('data: {"n":2}\n\ndata: [DONE]\n\n'));
      });
    });
    const epp = await fakeEpp(() => ({ destination: upstream.address }));
    const gw = await gateway({
      epp: epp.address,
      endpoints: [{ address: upstream.address }],
      responseBodyMode: 'full-duplex',
      responseTrailerMode: 'send',
    });
    const res = await post(`${gw.url}/v1/completions`, completion({ stream: true }));
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toBe('text/event-stream');
    const reader = (res.body as ReadableStream<Uint8Array>).getReader();
    const decoder = new TextDecoder();
    const firstRead = await reader.read();
    expect(decoder.decode(firstRead.value)).toBe('data: {"n":1}\n\n');
    release();
    let rest = '';
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      rest += decoder.decode(value);
    }
    expect(rest).toBe('data: {"n":2}\n\ndata: [DONE]\n\n');
    // Each upstream chunk went through the EPP (full duplex) before it reached the client.
    const stream = epp.streams[0];
    if (stream === undefined) throw new Error('no ext_proc stream');
    const echoed = messagesOf(stream, 'responseBody');
    const text = echoed.map((m) => (m.request?.$case === 'responseBody' ? Buffer.from(m.request.value.body).toString() : '')).join('');
    expect(text).toBe('data: {"n":1}\n\ndata: {"n":2}\n\ndata: [DONE]\n\n');
  });

  it('streams a simulator SSE completion end to end', async () => {
    const upstream = await sim();
    const epp = await fakeEpp(() => ({ destination: upstream.address }));
    const gw = await gateway({ epp: epp.address, endpoints: [{ address: upstream.address }] });
    const res = await post(`${gw.url}/v1/completions`, completion({ stream: true, max_tokens: 5 }));
    expect(res.headers.get('content-type')).toMatch(/text\/event-stream/);
    expect(res.headers.get('content-length')).toBeNull();
    const events = (await res.text()).split('\n\n').filter((e) => e.startsWith('data: '));
    expect(events.at(-1)).toBe('data: [DONE]');
    expect(events).toHaveLength(6);
  });

  it('passes the upstream status and headers through, and answers HEAD without a body', async () => {
    const upstream = await rawUpstream((req, res) => {
      req.resume();
      req.on('end', () =>
        res
          .writeHead(418, { 'x-upstream': 'teapot', 'content-type': 'text/plain' })
          .end(req.method === 'HEAD' ? undefined : 'short and stout'),
      );
    });
    const epp = await fakeEpp(() => ({ destination: upstream.address }));
    const gw = await gateway({ epp: epp.address, endpoints: [{ address: upstream.address }] });
    const res = await post(`${gw.url}/anything`, '{}');
    expect(res.status).toBe(418);
    expect(res.headers.get('x-upstream')).toBe('teapot');
    expect(await res.text()).toBe('short and stout');
    const head = await new Promise<number>((resolve, reject) => {
      const req = request(`${gw.url}/anything`, { method: 'HEAD' }, (r) => {
        r.resume();
        r.on('end', () => resolve(r.statusCode ?? 0));
      });
      req.on('error', reject);
      req.end();
    });
    expect(head).toBe(418);
  });

  it('answers its own paths without calling the EPP', async () => {
    const epp = await fakeEpp(() => ({ hang: true }));
    const gw = await gateway({ epp: epp.address, zone: 'z', endpoints: [{ address: '127.0.0.1:1', zone: 'z' }] });
    const res = await fetch(`${gw.url}/gateway/stats`);
    expect(res.status).toBe(200);
    const stats = (await res.json()) as { requests: number; zone: string; endpoints: Array<{ address: string; healthy: boolean }> };
    expect(stats.requests).toBe(0);
    expect(stats.zone).toBe('z');
    expect(stats.endpoints).toEqual([expect.objectContaining({ address: '127.0.0.1:1', healthy: true })]);
    expect((await fetch(`${gw.url}/gateway/health`)).status).toBe(200);
    expect(epp.streams).toHaveLength(0);
  });
});
