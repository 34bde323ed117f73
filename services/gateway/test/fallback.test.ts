// The destination list used like Envoy's override_host policy with a retry policy
// (infra/envoy/README.md): known entries in order, unknown ones skipped, a bounded number of
// attempts, and the fallback round robin once the list is used up (more in envoy-rules.test.ts).
import { LB_NAMESPACE, SERVED_KEY } from '@spillway/protocol';
import { describe, expect, it } from 'vitest';
import { messagesOf } from './fake-epp.js';
import { completion, deadAddress, fakeEpp, gateway, post, sim } from './fixtures.js';

interface ErrorBody {
  error: { code: string; message: string; type: string };
}

describe('fallback along the destination list', () => {
  it('moves to the second endpoint when the first refuses connections, and reports the second as served', async () => {
    const dead = await deadAddress();
    const live = await sim();
    const epp = await fakeEpp(() => ({ destination: `${dead},${live.address}` }));
    const gw = await gateway({ epp: epp.address, endpoints: [{ address: dead }, { address: live.address }] });
    const res = await post(`${gw.url}/v1/completions`, completion());
    expect(res.status).toBe(200);
    await res.text();
    expect(res.headers.get('x-spillway-attempts')).toBe('2');
    expect(res.headers.get('x-spillway-served-endpoint')).toBe(live.address);
    const stream = epp.streams[0];
    if (stream === undefined) throw new Error('no stream');
    await stream.finished;
    for (const message of [...messagesOf(stream, 'responseHeaders'), ...messagesOf(stream, 'responseBody')]) {
      expect(message.metadataContext?.filterMetadata[LB_NAMESPACE]?.[SERVED_KEY]).toBe(live.address);
    }
    const stats = gw.stats();
    expect(stats.fallbacks).toBe(1);
    expect(stats.retries).toBe(1);
  });

  it("when every attempt fails, the router's local 503 goes through ext_proc as Envoy's does, naming the last host tried", async () => {
    const [first, second] = [await deadAddress(), await deadAddress()];
    const epp = await fakeEpp(() => ({ destination: `${first},${second}` }));
    const gw = await gateway({ epp: epp.address, retries: 1, endpoints: [{ address: first }, { address: second }] });
    const res = await post(`${gw.url}/v1/completions`, completion());
    expect(res.status).toBe(503);
    expect(((await res.json()) as ErrorBody).error.code).toBe('upstream_unavailable');
    const stream = epp.streams[0];
    if (stream === undefined) throw new Error('no stream');
    await stream.finished;
    const [headers] = messagesOf(stream, 'responseHeaders');
    const value = headers?.request?.$case === 'responseHeaders' ? headers.request.value : undefined;
    const status = value?.headers?.headers.find((h) => h.key === ':status');
    expect(Buffer.from(status?.rawValue ?? new Uint8Array()).toString()).toBe('503');
    // The local reply has a body (its JSON error), so its headers do not end the stream.
    expect(value?.endOfStream).toBe(false);
    expect(headers?.metadataContext?.filterMetadata[LB_NAMESPACE]?.[SERVED_KEY]).toBe(second);
  });

  it('moves on after a 5xx answer and ejects the failing endpoint from the subset hint', async () => {
    const failing = await sim({ errorRate: 1 });
    const live = await sim();
    const epp = await fakeEpp(() => ({ destination: `${failing.address},${live.address}` }));
    const gw = await gateway({
      epp: epp.address,
      zone: 'z',
      outlierFailures: 1,
      outlierEjectionMs: 60_000,
      endpoints: [
        { address: failing.address, zone: 'z' },
        { address: live.address, zone: 'z' },
      ],
    });
    expect(gw.subsetHint()).toEqual([failing.address, live.address]);
    const res = await post(`${gw.url}/v1/completions`, completion());
    expect(res.status).toBe(200);
    expect(res.headers.get('x-spillway-served-endpoint')).toBe(live.address);
    expect(res.headers.get('x-spillway-attempts')).toBe('2');
    expect(failing.engine.stats().finished).toBe(0);
    expect(gw.subsetHint()).toEqual([live.address]);
  });

  it('skips entries that are not configured endpoints without spending an attempt', async () => {
    const live = await sim();
    const epp = await fakeEpp(() => ({ destination: `10.255.255.1:8000, ,${live.address}` }));
    const gw = await gateway({ epp: epp.address, retries: 0, endpoints: [{ address: live.address }] });
    const res = await post(`${gw.url}/v1/completions`, completion());
    expect(res.status).toBe(200);
    expect(res.headers.get('x-spillway-attempts')).toBe('1');
    expect(res.headers.get('x-spillway-served-endpoint')).toBe(live.address);
    expect(gw.stats().unknownSkipped).toBe(1);
  });

  it('matches entries on their canonical spelling', async () => {
    const live = await sim();
    const epp = await fakeEpp(() => ({ destination: `[0:0::ffff:7f00:1]:1,${live.address}` }));
    const gw = await gateway({ epp: epp.address, endpoints: [{ address: ` ${live.address} ` }, { address: '[::ffff:7f00:1]:1' }] });
    const res = await post(`${gw.url}/v1/completions`, completion());
    expect(res.status).toBe(200);
    // The IPv6 entry was known (written differently) and tried first: two attempts.
    expect(res.headers.get('x-spillway-attempts')).toBe('2');
  });

  it('tries unknown entries with passthrough', async () => {
    const live = await sim();
    const epp = await fakeEpp(() => ({ destination: live.address }));
    const gw = await gateway({ epp: epp.address, passthrough: true, endpoints: [] });
    const res = await post(`${gw.url}/v1/completions`, completion());
    expect(res.status).toBe(200);
    expect(res.headers.get('x-spillway-served-endpoint')).toBe(live.address);
  });

  it('sends a list of unknown entries to the fallback policy', async () => {
    const live = await sim();
    const epp = await fakeEpp(() => ({ destination: '10.255.255.1:8000,10.255.255.2:8000' }));
    const gw = await gateway({ epp: epp.address, endpoints: [{ address: live.address }] });
    const res = await post(`${gw.url}/v1/completions`, completion());
    expect(res.status).toBe(200);
    expect(res.headers.get('x-spillway-served-endpoint')).toBe(live.address);
    expect(gw.stats()).toMatchObject({ unknownSkipped: 2, fallbackPicks: 1 });
  });

  it('answers 503 with a JSON error when every endpoint refuses connections', async () => {
    const [a, b] = [await deadAddress(), await deadAddress()];
    const epp = await fakeEpp(() => ({ destination: `${a},${b}` }));
    const gw = await gateway({ epp: epp.address, endpoints: [{ address: a }, { address: b }] });
    const res = await post(`${gw.url}/v1/completions`, completion());
    expect(res.status).toBe(503);
    expect(res.headers.get('content-type')).toBe('application/json');
    const body = (await res.json()) as ErrorBody;
    expect(body.error.code).toBe('upstream_unavailable');
    // Two listed entries, then the third attempt from the fallback round robin (both hosts dead).
    expect(res.headers.get('x-spillway-attempts')).toBe('3');
    expect([a, b].some((address) => body.error.message.includes(address))).toBe(true);
    expect(gw.stats()).toMatchObject({ byStatus: { '503': 1 }, fallbackPicks: 1 });
  });

  it('passes the last 5xx through when every endpoint answers 5xx (as Envoy does)', async () => {
    const [a, b] = [await sim({ errorRate: 1 }), await sim({ errorRate: 1 })];
    const epp = await fakeEpp(() => ({ destination: `${a.address},${b.address}` }));
    const gw = await gateway({ epp: epp.address, endpoints: [{ address: a.address }, { address: b.address }] });
    const res = await post(`${gw.url}/v1/completions`, completion());
    expect(res.status).toBe(500);
    // The list's two entries, then one from the fallback round robin; its 500 is passed on.
    expect(res.headers.get('x-spillway-attempts')).toBe('3');
    expect([a.address, b.address]).toContain(res.headers.get('x-spillway-served-endpoint'));
    expect(gw.stats().fallbackPicks).toBe(1);
    expect(((await res.json()) as ErrorBody).error.type).toBeTruthy();
  });

  it('stops after the retry budget even when more entries remain', async () => {
    const [a, b] = [await deadAddress(), await deadAddress()];
    const live = await sim();
    const epp = await fakeEpp(() => ({ destination: `${a},${b},${live.address}` }));
    const gw = await gateway({ epp: epp.address, retries: 1, endpoints: [{ address: a }, { address: b }, { address: live.address }] });
    const res = await post(`${gw.url}/v1/completions`, completion());
    expect(res.status).toBe(503);
    expect(res.headers.get('x-spillway-attempts')).toBe('2');
    expect(live.engine.stats().submitted).toBe(0);

    // The default budget (2 retries) reaches the third entry.
    const wide = await gateway({ epp: epp.address, endpoints: [{ address: a }, { address: b }, { address: live.address }] });
    const ok = await post(`${wide.url}/v1/completions`, completion());
    expect(ok.status).toBe(200);
    expect(ok.headers.get('x-spillway-attempts')).toBe('3');
  });

  it('gives up on an endpoint that sends no response headers within the per-try timeout', async () => {
    const stalled = await sim();
    const live = await sim();
    await fetch(`${stalled.url}/admin/fault`, { method: 'POST', body: JSON.stringify({ stall: true }) });
    const epp = await fakeEpp(() => ({ destination: `${stalled.address},${live.address}` }));
    const gw = await gateway({
      epp: epp.address,
      perTryTimeoutMs: 200,
      endpoints: [{ address: stalled.address }, { address: live.address }],
    });
    const res = await post(`${gw.url}/v1/completions`, completion());
    expect(res.status).toBe(200);
    expect(res.headers.get('x-spillway-served-endpoint')).toBe(live.address);
  });
});
