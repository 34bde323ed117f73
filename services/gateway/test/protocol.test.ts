// The gateway talks to the EPP exactly as Envoy's ext_proc filter does (docs/protocol.md).
import { request } from 'node:http';
import { BodySendMode, GATEWAY_ZONE_KEY, LB_NAMESPACE, SERVED_KEY, SUBSET_KEY, SUBSET_NAMESPACE, headerValue } from '@spillway/protocol';
import type { HttpBody, HttpHeaders, ProcessingRequest } from '@spillway/protocol';
import { describe, expect, it } from 'vitest';
import { messagesOf } from './fake-epp.js';
import { completion, deadAddress, fakeEpp, gateway, post, rawUpstream, sim, utf8 } from './fixtures.js';

function headersOf(message: ProcessingRequest | undefined): HttpHeaders {
  if (message?.request?.$case !== 'requestHeaders' && message?.request?.$case !== 'responseHeaders')
    throw new Error('not a headers message');
  return message.request.value;
}
function bodyOf(message: ProcessingRequest): HttpBody {
  if (message.request?.$case !== 'requestBody' && message.request?.$case !== 'responseBody') throw new Error('not a body message');
  return message.request.value;
}
function header(headers: HttpHeaders, key: string): string | undefined {
  const found = headers.headers?.headers.find((h) => h.key === key);
  return found === undefined ? undefined : headerValue(found);
}

describe('ext_proc messages', () => {
  it('sends protocol_config, raw_value headers, the healthy zone-local subset, body chunks and the served endpoint', async () => {
    const [localA, localB, remote] = [await sim(), await sim(), await sim()];
    const deadLocal = await deadAddress();
    const epp = await fakeEpp(() => ({ destination: localB.address }));
    const gw = await gateway({
      epp: epp.address,
      zone: 'zone-a',
      // Response bodies through the EPP too, so every message kind is seen.
      responseBodyMode: 'full-duplex',
      responseTrailerMode: 'send',
      healthIntervalMs: 60_000,
      healthTimeoutMs: 500,
      unhealthyThreshold: 1,
      endpoints: [
        { address: localA.address, zone: 'zone-a' },
        { address: deadLocal, zone: 'zone-a' },
        { address: localB.address, zone: 'zone-a' },
        { address: remote.address, zone: 'zone-b' },
      ],
    });

    const body = completion();
    const res = await post(`${gw.url}/v1/completions?x=1`, body, { 'x-custom': 'yes', 'x-gateway-inference-objective': 'batch' });
    expect(res.status).toBe(200);
    await res.text();
    const [stream] = epp.streams;
    if (stream === undefined) throw new Error('no ext_proc stream');
    await stream.finished;

    const [first, ...rest] = stream.messages;
    expect(first?.protocolConfig).toEqual({
      requestBodyMode: BodySendMode.FULL_DUPLEX_STREAMED,
      responseBodyMode: BodySendMode.FULL_DUPLEX_STREAMED,
      sendBodyWithoutWaitingForHeaderResponse: false,
    });
    expect(rest.every((m) => m.protocolConfig === undefined)).toBe(true);

    const headers = headersOf(first);
    expect(headers.endOfStream).toBe(false);
    const list = headers.headers?.headers ?? [];
    expect(list.every((h) => h.value === '' && h.rawValue.length > 0 && h.key === h.key.toLowerCase())).toBe(true);
    expect(list.slice(0, 4).map((h) => h.key)).toEqual([':method', ':path', ':authority', ':scheme']);
    expect(header(headers, ':method')).toBe('POST');
    expect(header(headers, ':path')).toBe('/v1/completions?x=1');
    expect(header(headers, ':authority')).toBe(new URL(gw.url).host);
    expect(header(headers, ':scheme')).toBe('http');
    expect(header(headers, 'x-custom')).toBe('yes');
    expect(header(headers, 'x-gateway-inference-objective')).toBe('batch');
    expect(header(headers, 'content-length')).toBe(String(Buffer.byteLength(body)));
    expect(header(headers, 'x-request-id')).toMatch(/^[0-9a-f-]{36}$/);
    expect(header(headers, 'host')).toBeUndefined();
    expect(header(headers, 'connection')).toBeUndefined();

    // The subset: exactly the zone-local endpoints that passed the health check, as a list; beside
    // it the gateway's zone, so any zone's EPP picks for this one.
    expect(first?.metadataContext?.filterMetadata[SUBSET_NAMESPACE]).toEqual({
      [SUBSET_KEY]: [localA.address, localB.address],
      [GATEWAY_ZONE_KEY]: 'zone-a',
    });

    const chunks = messagesOf(stream, 'requestBody').map(bodyOf);
    expect(utf8(Buffer.concat(chunks.map((c) => c.body)))).toBe(body);
    expect(chunks.map((c) => c.endOfStream)).toEqual([...chunks.slice(1).map(() => false), true]);

    const [responseHeaders] = messagesOf(stream, 'responseHeaders');
    expect(header(headersOf(responseHeaders), ':status')).toBe('200');
    expect(header(headersOf(responseHeaders), 'content-type')).toMatch(/application\/json/);
    const served = { [SERVED_KEY]: localB.address };
    expect(responseHeaders?.metadataContext?.filterMetadata[LB_NAMESPACE]).toMatchObject(served);
    const responseBodies = messagesOf(stream, 'responseBody');
    expect(responseBodies.length).toBeGreaterThan(0);
    for (const m of responseBodies) expect(m.metadataContext?.filterMetadata[LB_NAMESPACE]).toMatchObject(served);
    expect(responseBodies.map((m) => bodyOf(m).endOfStream)).toEqual([...responseBodies.slice(1).map(() => false), true]);
    // Request messages never carry a served endpoint: nothing was picked yet.
    for (const m of [first, ...messagesOf(stream, 'requestBody')]) {
      expect(m?.metadataContext?.filterMetadata[LB_NAMESPACE]?.[SERVED_KEY]).toBeUndefined();
    }
  });

  it('announces the shipped modes by default: request body full duplex, response body none', async () => {
    const upstream = await sim();
    const epp = await fakeEpp(() => ({ destination: upstream.address }));
    const gw = await gateway({ epp: epp.address, endpoints: [{ address: upstream.address }] });
    expect((await post(`${gw.url}/v1/completions`, completion())).status).toBe(200);
    const stream = epp.streams[0];
    if (stream === undefined) throw new Error('no stream');
    await stream.finished;
    expect(stream.messages[0]?.protocolConfig).toEqual({
      requestBodyMode: BodySendMode.FULL_DUPLEX_STREAMED,
      responseBodyMode: BodySendMode.NONE,
      sendBodyWithoutWaitingForHeaderResponse: false,
    });
    expect(messagesOf(stream, 'responseBody')).toHaveLength(0);
  });

  it('sets end_of_stream on the headers of a bodiless GET and sends no body messages', async () => {
    const upstream = await sim();
    const epp = await fakeEpp(() => ({ destination: upstream.address }));
    const gw = await gateway({ epp: epp.address, endpoints: [{ address: upstream.address }] });
    const res = await fetch(`${gw.url}/v1/models`);
    expect(res.status).toBe(200);
    expect(((await res.json()) as { data: unknown[] }).data.length).toBeGreaterThan(0);
    const stream = epp.streams[0];
    if (stream === undefined) throw new Error('no stream');
    await stream.finished;
    expect(headersOf(stream.messages[0]).endOfStream).toBe(true);
    expect(header(headersOf(stream.messages[0]), ':method')).toBe('GET');
    expect(messagesOf(stream, 'requestBody')).toHaveLength(0);
  });

  it('ends a chunked body of unknown length with an empty end_of_stream message', async () => {
    const upstream = await sim();
    const epp = await fakeEpp(() => ({ destination: upstream.address }));
    const gw = await gateway({ epp: epp.address, endpoints: [{ address: upstream.address }] });
    const body = completion();
    const status = await new Promise<number>((resolve, reject) => {
      const req = request(`${gw.url}/v1/completions`, { method: 'POST', headers: { 'content-type': 'application/json' } }, (res) => {
        res.resume();
        res.on('end', () => resolve(res.statusCode ?? 0));
      });
      req.on('error', reject);
      req.write(body.slice(0, 10));
      setTimeout(() => req.end(body.slice(10)), 20);
    });
    expect(status).toBe(200);
    const stream = epp.streams[0];
    if (stream === undefined) throw new Error('no stream');
    const chunks = messagesOf(stream, 'requestBody').map(bodyOf);
    expect(utf8(Buffer.concat(chunks.map((c) => c.body)))).toBe(body);
    const last = chunks.at(-1);
    expect(last?.endOfStream).toBe(true);
    expect(last?.body.length).toBe(0);
    expect(chunks.slice(0, -1).every((c) => !c.endOfStream)).toBe(true);
  });

  it('splits a large body into chunks of at most 62,000 bytes and forwards it whole', async () => {
    const received: Buffer[] = [];
    const upstream = await rawUpstream((req, res) => {
      req.on('data', (chunk: Buffer) => received.push(chunk));
      req.on('end', () => res.writeHead(200, { 'content-type': 'text/plain' }).end(String(Buffer.concat(received).length)));
    });
    const epp = await fakeEpp(() => ({ destination: upstream.address }));
    const gw = await gateway({ epp: epp.address, endpoints: [{ address: upstream.address }] });
    const body = completion({ prompt: 'x'.repeat(300_000) });
    const res = await post(`${gw.url}/v1/completions`, body);
    expect(await res.text()).toBe(String(Buffer.byteLength(body)));
    expect(Buffer.concat(received).toString()).toBe(body);
    const stream = epp.streams[0];
    if (stream === undefined) throw new Error('no stream');
    const chunks = messagesOf(stream, 'requestBody').map(bodyOf);
    expect(chunks.length).toBeGreaterThan(4);
    expect(Math.max(...chunks.map((c) => c.body.length))).toBeLessThanOrEqual(62_000);
    expect(chunks.filter((c) => c.endOfStream)).toHaveLength(1);
    expect(chunks.at(-1)?.endOfStream).toBe(true);
  });

  it('answers 413 when the body the EPP returns exceeds the buffer limit', async () => {
    const upstream = await sim();
    const epp = await fakeEpp(() => ({ destination: upstream.address }));
    const gw = await gateway({ epp: epp.address, maxBodyBytes: 1_000, endpoints: [{ address: upstream.address }] });
    const res = await post(`${gw.url}/v1/completions`, completion({ prompt: 'y'.repeat(5_000) }));
    expect(res.status).toBe(413);
    expect(((await res.json()) as { error: { code: string } }).error.code).toBe('request_too_large');
    expect(upstream.engine.stats().submitted).toBe(0);
  });

  it('sends no subset hint with --subset-hint off (like Istio)', async () => {
    const upstream = await sim();
    const epp = await fakeEpp(() => ({ destination: upstream.address }));
    const gw = await gateway({ epp: epp.address, subsetHint: false, endpoints: [{ address: upstream.address }] });
    expect((await post(`${gw.url}/v1/completions`, completion())).status).toBe(200);
    const stream = epp.streams[0];
    expect(stream?.messages[0]?.metadataContext?.filterMetadata[SUBSET_NAMESPACE]).toBeUndefined();
  });

  it('sends an empty subset when no zone-local endpoint is healthy', async () => {
    const remote = await sim();
    const epp = await fakeEpp(() => ({ destination: remote.address }));
    const gw = await gateway({
      epp: epp.address,
      zone: 'zone-a',
      // Response bodies through the EPP too, so every message kind is seen.
      responseBodyMode: 'full-duplex',
      responseTrailerMode: 'send',
      healthIntervalMs: 60_000,
      unhealthyThreshold: 1,
      endpoints: [
        { address: await deadAddress(), zone: 'zone-a' },
        { address: remote.address, zone: 'zone-b' },
      ],
    });
    expect((await post(`${gw.url}/v1/completions`, completion())).status).toBe(200);
    expect(epp.streams[0]?.messages[0]?.metadataContext?.filterMetadata[SUBSET_NAMESPACE]).toEqual({
      [SUBSET_KEY]: [],
      [GATEWAY_ZONE_KEY]: 'zone-a',
    });
  });

  it('forwards a client header the EPP set and never forwards client destination headers', async () => {
    const seen: Array<Record<string, string | string[] | undefined>> = [];
    const upstream = await rawUpstream((req, res) => {
      seen.push(req.headers);
      req.resume();
      req.on('end', () => res.writeHead(200, { 'content-type': 'text/plain' }).end('ok'));
    });
    const epp = await fakeEpp(() => ({ destination: upstream.address }));
    const gw = await gateway({ epp: epp.address, endpoints: [{ address: upstream.address }] });
    const res = await post(`${gw.url}/v1/completions`, completion(), {
      'x-gateway-destination-endpoint-subset': '10.0.0.1:80',
      'x-keep': '1',
    });
    expect(await res.text()).toBe('ok');
    expect(seen[0]?.['x-keep']).toBe('1');
    expect(Object.keys(seen[0] ?? {}).filter((k) => k.startsWith('x-gateway-destination-endpoint'))).toEqual([]);
    // The EPP still saw the client's header (Envoy strips it at the route, after ext_proc).
    const first = epp.streams[0]?.messages[0];
    expect(header(headersOf(first), 'x-gateway-destination-endpoint-subset')).toBe('10.0.0.1:80');
  });
});
